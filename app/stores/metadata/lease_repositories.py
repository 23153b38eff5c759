"""SQL of leases: the messages a group has handed out and not yet settled, the last step of the lock order.

The delivery hot paths (poll, ack, nack, extend) use Core statements, one per step for a whole call
(``executemany`` or one multi-row ``INSERT``), never an ORM object per message. Lease updates carry their
own conditions (holder, not acked, deadline still running), so concurrent calls stay honest.

The lock order is group → members → partitions → leases everywhere (``group_repositories``,
``partition_repositories``, ``lease_repositories``), so rebalances, polls and acks cannot deadlock. SQLite runs every
write unit of work under ``BEGIN IMMEDIATE``, which serialises them; ``FOR UPDATE`` is simply not rendered there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, delete, func, insert, select, tuple_, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import GroupLease, GroupPartition
from app.stores.metadata.protocol import DueLease, LeaseSettlement, LeaseState

partitions = cast(Table, GroupPartition.__table__)
leases = cast(Table, GroupLease.__table__)


class LeaseRepository(Repository):
    """Leases of consumer groups (one row per message handed out and not yet settled)."""

    async def due_leases(
        self, group_id: str, numbers: Sequence[int], now_ms: int, limit: int
    ) -> list[DueLease]:
        """Unacked leases whose deadline passed (timed out, nacked, or released), in offset order."""
        result = await self.session.execute(
            select(
                leases.c.partition,
                leases.c.offset,
                leases.c.attempt,
                leases.c.member_id,
                leases.c.deadline_ms,
                leases.c.reason,
                leases.c.replay_offset,
                leases.c.failures,
            )
            .where(
                leases.c.group_id == group_id,
                leases.c.partition.in_(numbers),
                leases.c.acked.is_(False),
                leases.c.deadline_ms <= now_ms,
            )
            .order_by(leases.c.partition, leases.c.offset)
            .limit(limit)
        )
        return [DueLease(*row) for row in result.all()]

    async def reschedule_leases(
        self,
        group_id: str,
        schedule: Sequence[tuple[int, int, int, str]],
        failures: Mapping[tuple[int, int], str] | None = None,
    ) -> None:
        """Failed attempts waiting for their retry: ``(partition, offset, due_ms, reason)``; no holder.
        With ``failures`` (every key's new failed-attempt history) the same statement writes those too."""
        if not schedule:
            return
        values: dict[str, Any] = {"member_id": None, "deadline_ms": bindparam("d"), "reason": bindparam("r")}
        if failures is not None:  # a key without a new history keeps the one it has
            values["failures"] = func.coalesce(bindparam("f"), leases.c.failures)
        await self.session.execute(
            update(leases)
            .where(
                leases.c.group_id == group_id,
                leases.c.partition == bindparam("p"),
                leases.c.offset == bindparam("o"),
            )
            .values(**values),
            [
                {
                    "p": p,
                    "o": o,
                    "d": d,
                    "r": r,
                    **({"f": failures.get((p, o))} if failures is not None else {}),
                }
                for p, o, d, r in schedule
            ],
        )

    async def failures_of(self, group_id: str, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
        """The failed-attempt histories kept on these leases (those that have one)."""
        if not keys:
            return {}
        result = await self.session.execute(
            select(leases.c.partition, leases.c.offset, leases.c.failures).where(
                leases.c.group_id == group_id,
                tuple_(leases.c.partition, leases.c.offset).in_(keys),
                leases.c.failures.is_not(None),
            )
        )
        return {(p, o): str(f) for p, o, f in result.all()}

    async def mark_acked(self, group_id: str, keys: Sequence[tuple[int, int]]) -> None:
        """Leases done with (dead-lettered): ``advance_committed`` then moves past them."""
        if keys:
            await self.session.execute(
                update(leases)
                .where(leases.c.group_id == group_id, tuple_(leases.c.partition, leases.c.offset).in_(keys))
                .values(acked=True)
            )

    async def add_replayed_leases(
        self, group_id: str, now_ms: int, replays: Sequence[tuple[int, int, int]]
    ) -> None:
        """Replayed dead letters ``(partition, offset, dead_letter_offset)``: due at once, attempt back at 1, a
        fresh retry budget. An acked lease left at that offset is replaced."""
        if not replays:
            return
        await self.drop_leases(group_id, [(p, o) for p, o, _ in replays])
        await self.session.execute(
            insert(leases),
            [
                {
                    "group_id": group_id,
                    "partition": p,
                    "offset": o,
                    "member_id": None,
                    "attempt": 0,
                    "deadline_ms": now_ms,
                    "acked": False,
                    "reason": None,
                    "replay_offset": dead_letter_offset,
                }
                for p, o, dead_letter_offset in replays
            ],
        )

    async def next_deadline(self, group_id: str, numbers: Sequence[int]) -> int | None:
        # ORDER BY … LIMIT 1, not min(): a walk of the due-time index that stops at the first match
        # (delayed messages may keep many rows waiting; min() with these filters reads them all).
        result = await self.session.execute(
            select(leases.c.deadline_ms)
            .where(leases.c.group_id == group_id, leases.c.partition.in_(numbers), leases.c.acked.is_(False))
            .order_by(leases.c.deadline_ms)
            .limit(1)
        )
        value = result.scalar_one_or_none()
        return int(value) if value is not None else None

    async def renew_leases(
        self,
        group_id: str,
        member_id: str,
        deadline_ms: int,
        keys: Sequence[tuple[int, int]],
        failures: Mapping[tuple[int, int], str] | None = None,
    ) -> None:
        """Hand due leases to ``member_id`` for one more attempt (the caller holds their partitions).
        ``failures``: new failed-attempt histories of some of them (timed out, retried at once)."""
        noted = failures or {}
        plain = [k for k in keys if k not in noted]
        values: dict[str, Any] = {
            "member_id": member_id,
            "attempt": leases.c.attempt + 1,
            "deadline_ms": deadline_ms,
        }
        where = (
            leases.c.group_id == group_id,
            leases.c.partition == bindparam("p"),
            leases.c.offset == bindparam("o"),
        )
        if plain:
            await self.session.execute(
                update(leases).where(*where).values(**values), [{"p": p, "o": o} for p, o in plain]
            )
        if noted:
            await self.session.execute(
                update(leases).where(*where).values(**values, failures=bindparam("f")),
                [{"p": p, "o": o, "f": f} for (p, o), f in noted.items()],
            )

    async def add_leases(
        self, group_id: str, member_id: str, deadline_ms: int, keys: Sequence[tuple[int, int]]
    ) -> None:
        """First deliveries (attempt 1, held by ``member_id`` until ``deadline_ms``)."""
        await self.put_leases(group_id, [LeaseState(p, o, member_id, 1, deadline_ms, False) for p, o in keys])

    async def drop_leases(self, group_id: str, keys: Sequence[tuple[int, int]]) -> None:
        if keys:
            await self.session.execute(
                delete(leases).where(
                    leases.c.group_id == group_id, tuple_(leases.c.partition, leases.c.offset).in_(keys)
                )
            )

    async def drop_partition_leases(self, group_id: str, numbers: Sequence[int]) -> None:
        await self.session.execute(
            delete(leases).where(leases.c.group_id == group_id, leases.c.partition.in_(numbers))
        )

    async def release_member_leases(
        self, group_id: str, member_ids: Sequence[str], now_ms: int, *, clean: bool = False
    ) -> None:
        """Leases of members that are gone become due at once (for the partitions' new owners).

        ``clean`` (the members left): what they held and whose deadline still ran is given back unspent,
        with no holder and the attempt counted back (the next delivery repeats the same ``attempt``).
        Otherwise (their sessions expired) the holder stays on the lease and its deadline ends now: the
        next poll takes it for an ack timeout. Leases whose deadline had passed already are timeouts
        either way, left as they are."""
        if not member_ids:
            return
        running = (
            leases.c.group_id == group_id,
            leases.c.member_id.in_(member_ids),
            leases.c.acked.is_(False),
            leases.c.deadline_ms > now_ms,
        )
        if clean:
            values: dict[str, Any] = {
                "member_id": None,
                "deadline_ms": now_ms,
                "attempt": leases.c.attempt - 1,
            }
        else:
            values = {"deadline_ms": now_ms}
        await self.session.execute(update(leases).where(*running).values(**values))

    async def settle(
        self,
        group_id: str,
        member_id: str,
        now_ms: int,
        keys: Sequence[tuple[int, int]],
        settlement: LeaseSettlement,
    ) -> set[tuple[int, int]]:
        """Write ``settlement`` on the member's live (unacked, deadline running) leases among ``keys``
        (one ``UPDATE``); which ones matched."""
        if not keys:
            return set()
        values: dict[str, Any] = {}
        if settlement.acked:
            values["acked"] = True
        if settlement.released:
            values["member_id"] = None
        if settlement.deadline_ms is not None:
            values["deadline_ms"] = settlement.deadline_ms
        if settlement.reason is not None:
            values["reason"] = settlement.reason
        result = await self.session.execute(
            update(leases)
            .where(
                leases.c.group_id == group_id,
                leases.c.member_id == member_id,
                leases.c.acked.is_(False),
                leases.c.deadline_ms > now_ms,
                tuple_(leases.c.partition, leases.c.offset).in_(keys),
            )
            .values(**values)
            .returning(leases.c.partition, leases.c.offset)
        )
        return {(p, o) for p, o in result.all()}

    async def replay_offsets(
        self, group_id: str, keys: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], int]:
        """Of these leases, the replayed dead letters: their copy's offset in the DLQ log."""
        if not keys:
            return {}
        result = await self.session.execute(
            select(leases.c.partition, leases.c.offset, leases.c.replay_offset).where(
                leases.c.group_id == group_id,
                tuple_(leases.c.partition, leases.c.offset).in_(keys),
                leases.c.replay_offset.is_not(None),
            )
        )
        return {(p, o): int(d) for p, o, d in result.all()}

    async def leases_among(
        self, group_id: str, keys: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], LeaseState]:
        if not keys:
            return {}
        result = await self.session.execute(
            select(
                leases.c.partition,
                leases.c.offset,
                leases.c.member_id,
                leases.c.attempt,
                leases.c.deadline_ms,
                leases.c.acked,
                leases.c.failures,
            ).where(leases.c.group_id == group_id, tuple_(leases.c.partition, leases.c.offset).in_(keys))
        )
        return {(row[0], row[1]): LeaseState(*row) for row in result.all()}

    async def unacked_counts(self) -> dict[str, int]:
        """Unacked leases (messages in flight or waiting for a retry) per group id."""
        result = await self.session.execute(
            select(GroupLease.group_id, func.count())
            .where(GroupLease.acked.is_(False))
            .group_by(GroupLease.group_id)
        )
        return {group_id: int(count) for group_id, count in result.all()}

    async def held_count(self, group_id: str, member_id: str, now_ms: int) -> int:
        """Messages ``member_id`` holds unacked with their deadline still running (its in-flight window)."""
        result = await self.session.execute(
            select(func.count()).where(
                leases.c.group_id == group_id,
                leases.c.member_id == member_id,
                leases.c.acked.is_(False),
                leases.c.deadline_ms > now_ms,
            )
        )
        return int(result.scalar_one())

    async def drop_acked_below_committed(self, group_id: str, numbers: Sequence[int]) -> None:
        committed = (
            select(partitions.c.committed)
            .where(partitions.c.group_id == leases.c.group_id, partitions.c.partition == leases.c.partition)
            .scalar_subquery()
        )
        await self.session.execute(
            delete(leases).where(
                leases.c.group_id == group_id,
                leases.c.partition.in_(numbers),
                leases.c.acked.is_(True),
                leases.c.offset < committed,
            )
        )

    # push members' checkpoints ---------------------------------------------------------------------

    async def leases_from_position(self, group_id: str, numbers: Sequence[int]) -> dict[int, set[int]]:
        """Per partition, the leased offsets at or past ``position`` (a read from there skips them)."""
        if not numbers:
            return {}
        result = await self.session.execute(
            select(leases.c.partition, leases.c.offset)
            .select_from(
                leases.join(
                    partitions,
                    and_(
                        partitions.c.group_id == leases.c.group_id,
                        partitions.c.partition == leases.c.partition,
                    ),
                )
            )
            .where(
                leases.c.group_id == group_id,
                leases.c.partition.in_(numbers),
                leases.c.offset >= partitions.c.position,
            )
        )
        ahead: dict[int, set[int]] = {}
        for p, o in result.all():
            ahead.setdefault(p, set()).add(o)
        return ahead

    async def put_leases(self, group_id: str, rows: Sequence[LeaseState]) -> None:
        """Insert lease rows: one ``executemany`` (a cached statement, sent as multi-row batches by the
        driver layer); a literal multi-row ``VALUES`` would be compiled anew for every call."""
        if rows:
            await self.session.execute(
                insert(leases),
                [
                    {
                        "group_id": group_id,
                        "partition": r.partition,
                        "offset": r.offset,
                        "member_id": r.member_id,
                        "attempt": r.attempt,
                        "deadline_ms": r.deadline_ms,
                        "acked": r.acked,
                        "reason": None,
                        "replay_offset": None,
                    }
                    for r in rows
                ],
            )
