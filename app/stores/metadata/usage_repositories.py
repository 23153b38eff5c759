"""SQL of the usage rollups: per project environment, API key, category and minute / hour / day bucket, the
requests, messages, bytes and 429s that the Spark usage job (``queuecore-spark usage``) added up from the
usage-metering topic, and how far into that topic it got.

The tables (``UsageRollup``, ``UsageRollupProgress`` in models.py) come from migration ``3f8e6a1c9b27``. A roll-up adds its counts and moves the
progress offset in one transaction, and only from the offset it started at (compare and set), so a crashed or
repeated run never counts an event twice."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import cast

from sqlalchemy import Table, case, select, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import UsageRollup, UsageRollupProgress
from app.stores.metadata.protocol import GRANULARITIES, Rollup

COUNTS = ("requests", "messages", "bytes_in", "bytes_out", "rate_limited")  # added up across runs
PEAK = "peak_requests_per_second"  # the larger of the runs' values

rollups = cast(Table, UsageRollup.__table__)
progress = cast(Table, UsageRollupProgress.__table__)


class UsageRollupRepository(Repository):
    """Usage rollups and how far into the usage topic they got."""

    async def next_offset(self, source: str) -> int:
        """The next offset of ``source`` to roll up (0 before the first run)."""
        value = await self.session.scalar(select(progress.c.next_offset).where(progress.c.source == source))
        return int(value or 0)

    async def add(self, rows: Sequence[Rollup], *, source: str, from_offset: int, next_offset: int) -> bool:
        """Add ``rows`` to the rollups and move ``source`` from ``from_offset`` to ``next_offset``; False (and
        nothing written) when another run moved it first. The caller commits."""
        now = datetime.now(UTC)
        if (
            from_offset == 0
            and await self.session.scalar(select(progress.c.source).where(progress.c.source == source))
            is None
        ):
            insert = self._insert(progress).values(source=source, next_offset=0, updated_at=now)
            await self.session.execute(insert.on_conflict_do_nothing(index_elements=["source"]))
        moved = await self.session.execute(
            update(progress)
            .where(progress.c.source == source, progress.c.next_offset == from_offset)
            .values(next_offset=next_offset, updated_at=now)
        )
        if moved.rowcount != 1:  # type: ignore[attr-defined]
            return False
        for row in rows:
            values = {c.name: getattr(row, c.name) for c in rollups.columns}
            stmt = self._insert(rollups).values(**values)
            stmt = stmt.on_conflict_do_update(
                index_elements=[c.name for c in rollups.primary_key.columns],
                set_={
                    **{c: rollups.c[c] + stmt.excluded[c] for c in COUNTS},
                    PEAK: case(
                        (stmt.excluded[PEAK] > rollups.c[PEAK], stmt.excluded[PEAK]), else_=rollups.c[PEAK]
                    ),
                },
            )
            await self.session.execute(stmt)
        return True

    async def series(
        self,
        project_id: str,
        environment: str,
        granularity: str,
        since: datetime,
        until: datetime,
        *,
        key_id: str | None = None,
        category: str | None = None,
    ) -> list[Rollup]:
        """The buckets of ``[since, until)``, oldest first (one row per bucket, key and category)."""
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity is one of {GRANULARITIES}")
        query = select(rollups).where(
            rollups.c.project_id == project_id,
            rollups.c.environment == environment,
            rollups.c.granularity == granularity,
            rollups.c.bucket_start >= since,
            rollups.c.bucket_start < until,
        )
        if key_id is not None:
            query = query.where(rollups.c.key_id == key_id)
        if category is not None:
            query = query.where(rollups.c.category == category)
        result = await self.session.execute(
            query.order_by(rollups.c.bucket_start, rollups.c.key_id, rollups.c.category)
        )
        out = []
        for r in result.mappings():
            start = r["bucket_start"]
            out.append(
                Rollup(
                    **{
                        **r,
                        "bucket_start": start.replace(tzinfo=UTC) if start.tzinfo is None else start,
                    }
                )
            )
        return out
