"""SQL of push groups: their endpoint rows (``push_endpoints``) and recent attempts (``push_attempts``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, delete, func, insert, select, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import ConsumerGroup, PushAttempt, PushEndpoint, Topic
from app.stores.metadata.protocol import (
    NewPushAttempt,
    PushAttemptRow,
    PushConfig,
    PushEndpointRow,
    PushTarget,
)

endpoints = cast(Table, PushEndpoint.__table__)
attempts = cast(Table, PushAttempt.__table__)
groups = cast(Table, ConsumerGroup.__table__)
topics = cast(Table, Topic.__table__)

_ENDPOINT_FIELDS = tuple(PushEndpointRow.__dataclass_fields__)
_ATTEMPT_FIELDS = tuple(PushAttemptRow.__dataclass_fields__)
_NEW_ATTEMPT_FIELDS = tuple(NewPushAttempt.__dataclass_fields__)


class PushRepository(Repository):
    """Push endpoints and their attempts."""

    async def get(self, group_id: str) -> PushEndpointRow | None:
        stmt = select(*(endpoints.c[f] for f in _ENDPOINT_FIELDS)).where(endpoints.c.group_id == group_id)
        row = (await self.session.execute(stmt)).first()
        return PushEndpointRow(*row) if row else None

    async def add(self, endpoint: PushEndpointRow) -> None:
        self.session.add(PushEndpoint(**{f: getattr(endpoint, f) for f in _ENDPOINT_FIELDS}))
        await self._flush()

    async def set_config(
        self, group_id: str, config: PushConfig, at: datetime, *, reset_breaker: bool = False
    ) -> None:
        values: dict[str, Any] = {f: getattr(config, f) for f in PushConfig.__dataclass_fields__}
        if reset_breaker:
            values.update(breaker_failures=0, breaker_open_until_ms=None)
        await self.session.execute(
            update(endpoints).where(endpoints.c.group_id == group_id).values(**values, updated_at=at)
        )

    async def rotate_secret(self, group_id: str, secret: str, previous_until_ms: int, at: datetime) -> None:
        await self.session.execute(
            update(endpoints)
            .where(endpoints.c.group_id == group_id)
            .values(
                previous_secret=endpoints.c.secret,  # the one signing until now
                previous_until_ms=previous_until_ms,
                secret=secret,
                updated_at=at,
            )
        )

    async def remove(self, group_id: str) -> bool:
        result = await self.session.execute(delete(endpoints).where(endpoints.c.group_id == group_id))
        return bool(cast(Any, result).rowcount)

    async def targets(self) -> list[PushTarget]:
        """Every push group of the deployment, with its topic (one query: what each node's workers poll)."""
        stmt = (
            select(
                endpoints.c.group_id,
                groups.c.name,
                topics.c.id,
                topics.c.name,
                topics.c.partitions,
                topics.c.delivery,
                topics.c.replicas,
                endpoints.c.url,
                endpoints.c.max_concurrency,
                endpoints.c.rate,
                endpoints.c.timeout_ms,
                endpoints.c.ordered,
                endpoints.c.mode,
                endpoints.c.secret,
                endpoints.c.previous_secret,
                endpoints.c.previous_until_ms,
            )
            .join(groups, groups.c.id == endpoints.c.group_id)
            .join(topics, topics.c.id == groups.c.topic_id)
        )
        rows = (await self.session.execute(stmt)).all()
        return [PushTarget(*row) for row in rows]  # type: ignore[call-arg]  # the columns, in order

    async def count(self, project_id: str, environment: str) -> int:
        """The push groups of a project environment's topics (the ``pushGroups`` quota's use)."""
        stmt = (
            select(func.count())
            .select_from(endpoints)
            .join(groups, groups.c.id == endpoints.c.group_id)
            .join(topics, topics.c.id == groups.c.topic_id)
            .where(topics.c.project_id == project_id, topics.c.environment == environment)
        )
        return int((await self.session.execute(stmt)).scalar_one())

    async def sealed_secrets(self) -> list[tuple[str, str, str | None]]:
        """Every push group's ``(group_id, secret, previous_secret)`` as stored (sealed)."""
        stmt = select(endpoints.c.group_id, endpoints.c.secret, endpoints.c.previous_secret)
        return [(g, s, p) for g, s, p in (await self.session.execute(stmt)).all()]

    async def replace_secrets(self, group_id: str, secret: str, previous_secret: str | None) -> None:
        await self.session.execute(
            update(endpoints)
            .where(endpoints.c.group_id == group_id)
            .values(secret=secret, previous_secret=previous_secret)
        )

    async def set_breaker(self, group_id: str, failures: int, open_until_ms: int | None) -> None:
        await self.session.execute(
            update(endpoints)
            .where(endpoints.c.group_id == group_id)
            .values(breaker_failures=failures, breaker_open_until_ms=open_until_ms)
        )

    # attempts -------------------------------------------------------------------------------------

    async def add_attempts(self, rows: Sequence[NewPushAttempt]) -> None:
        """Record attempts (one ``executemany``: a cached statement, sent as multi-row batches)."""
        if rows:
            await self.session.execute(
                insert(attempts), [{f: getattr(r, f) for f in _NEW_ATTEMPT_FIELDS} for r in rows]
            )

    async def trim_attempts(self, group_ids: Sequence[str], keep: int) -> None:
        """Keep the newest ``keep`` attempts of each group."""
        for group_id in group_ids:
            cutoff = (
                select(attempts.c.id)
                .where(attempts.c.group_id == group_id)
                .order_by(attempts.c.id.desc())
                .offset(keep)
                .limit(1)
                .scalar_subquery()
            )
            await self.session.execute(
                delete(attempts).where(attempts.c.group_id == group_id, attempts.c.id <= cutoff)
            )

    async def recent_attempts(self, group_id: str, limit: int) -> list[PushAttemptRow]:
        result = await self.session.execute(
            select(*(attempts.c[f] for f in _ATTEMPT_FIELDS))
            .where(attempts.c.group_id == group_id)
            # Concurrent attempts end (and are written) in another order than they began: sort by start.
            # At most ``attempts_kept`` rows per group are there to sort.
            .order_by(attempts.c.at.desc(), attempts.c.id.desc())
            .limit(limit)
        )
        return [PushAttemptRow(*row) for row in result.all()]
