"""SQL of consumer groups: groups, members, partition ownership and offsets, leases.

The delivery hot paths (poll, ack, nack, extend) use Core statements, one per step for a whole call
(``executemany`` or one multi-row ``INSERT``), never an ORM object per message. Row-level guards keep
concurrent calls honest on Postgres and SQLite alike:

- a poll locks the ``group_partitions`` rows its member owns (``FOR UPDATE … WHERE member_id = me``; on
  Postgres the owner test is re-checked after the lock), so only the current owner leases in a partition;
- rebalances and stopped-group changes lock the ``consumer_groups`` row first; the lock order is
  group → members → partitions → leases everywhere, so they cannot deadlock;
- lease updates carry their own conditions (holder, not acked, deadline still running).

SQLite runs every write unit of work under ``BEGIN IMMEDIATE``, which serialises them; ``FOR UPDATE`` is
simply not rendered there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Self, cast

from sqlalchemy import Table, and_, bindparam, case, delete, func, insert, or_, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.metadata.express import ExpressWriter
from app.stores.metadata.models import ConsumerGroup, GroupLease, GroupMember, GroupPartition, Topic

groups = cast(Table, ConsumerGroup.__table__)
members = cast(Table, GroupMember.__table__)
partitions = cast(Table, GroupPartition.__table__)
leases = cast(Table, GroupLease.__table__)


def _committed_below(limit: Any) -> Any:
    """The committed offset of the partition row being updated: its lowest unacked leased offset, or
    ``limit`` when none is lower (leases past ``position`` exist after a push member's checkpoint)."""
    lowest = (
        select(func.min(leases.c.offset))
        .where(
            leases.c.group_id == partitions.c.group_id,
            leases.c.partition == partitions.c.partition,
            leases.c.acked.is_(False),
        )
        .scalar_subquery()
    )
    return case((or_(lowest.is_(None), lowest > limit), limit), else_=lowest)


_CHECKPOINT = (
    update(partitions)
    .where(
        partitions.c.group_id == bindparam("g"),
        partitions.c.partition == bindparam("p"),
        partitions.c.member_id == bindparam("m"),
        partitions.c.held_by.is_(None),
        partitions.c.epoch == bindparam("e"),
    )
    .values(
        position=bindparam("pos", type_=partitions.c.position.type),
        committed=_committed_below(bindparam("pos", type_=partitions.c.position.type)),
    )
)


async def checkpoint_express(
    express: ExpressWriter, group_id: str, member_id: str, positions: list[tuple[int, int, int]]
) -> set[int]:
    """``GroupRepository.checkpoint`` (not releasing) of several ``(partition, epoch, position)`` in
    one transaction on the express connection; answers the partitions it was fenced from."""
    counts = await express.execute_each(
        _CHECKPOINT,
        [{"g": group_id, "p": p, "m": member_id, "e": e, "pos": pos} for p, e, pos in positions],
    )
    return {p for (p, _, _), count in zip(positions, counts, strict=True) if not count}


@dataclass(frozen=True, slots=True)
class CallerView:
    """What every member call needs to know first, read in one round trip."""

    group_id: str
    generation: int
    ack_timeout_ms: int
    partition_count: int
    member_expires_at_ms: int | None
    member_session_timeout_ms: int | None
    soonest_expiry_ms: int | None
    dead_letter: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    member_id: str | None
    committed: int | None
    position: int | None


@dataclass(frozen=True, slots=True)
class DueLease:
    """An unacked lease whose deadline passed: timed out (``member_id`` still set) or due for a retry."""

    partition: int
    offset: int
    attempt: int
    member_id: str | None
    deadline_ms: int
    reason: str | None
    replay_offset: int | None


@dataclass(frozen=True, slots=True)
class OwnedPartition:
    partition: int
    member_id: str | None
    held_by: str | None
    epoch: int
    committed: int | None
    position: int | None


@dataclass(frozen=True, slots=True)
class LeaseState:
    partition: int
    offset: int
    member_id: str | None
    attempt: int
    deadline_ms: int
    acked: bool


class GroupRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    @classmethod
    def from_session(cls, session: AsyncSession) -> Self:
        return cls(session)

    @property
    def _dialect(self) -> str:
        return self.session.get_bind().dialect.name

    def _greatest(self, column: Any, value: int) -> Any:
        # Never shorten an expiry a long poll in progress has set.
        return func.greatest(column, value) if self._dialect == "postgresql" else func.max(column, value)

    # groups ---------------------------------------------------------------------------------------

    async def get(self, topic_id: str, name: str, *, for_update: bool = False) -> ConsumerGroup | None:
        stmt = select(ConsumerGroup).where(ConsumerGroup.topic_id == topic_id, ConsumerGroup.name == name)
        if for_update:
            stmt = stmt.with_for_update()
        result = await self.session.execute(stmt.execution_options(populate_existing=True))
        return result.scalar_one_or_none()

    async def insert_if_absent(self, values: dict[str, Any]) -> None:
        """Create a group unless one of that name exists (a concurrent create is not an error)."""
        dialect = postgresql if self._dialect == "postgresql" else sqlite
        stmt = (
            dialect.insert(groups)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["topic_id", "name"])
        )
        await self.session.execute(stmt)

    async def all_ids(self) -> set[str]:
        result = await self.session.execute(select(groups.c.id))
        return set(result.scalars().all())

    async def list_for_topic(self, topic_id: str) -> Sequence[ConsumerGroup]:
        result = await self.session.execute(
            select(ConsumerGroup).where(ConsumerGroup.topic_id == topic_id).order_by(ConsumerGroup.name)
        )
        return result.scalars().all()

    async def all_partition_offsets(self) -> Sequence[Any]:
        """Every group's partitions with their topic (for metrics): one row per group and partition,
        ``(project_id, environment, topic_id, topic, group_id, group, partition, committed)``."""
        result = await self.session.execute(
            select(
                Topic.project_id,
                Topic.environment,
                Topic.id,
                Topic.name,
                ConsumerGroup.id,
                ConsumerGroup.name,
                GroupPartition.partition,
                GroupPartition.committed,
            )
            .join(ConsumerGroup, ConsumerGroup.topic_id == Topic.id)
            .join(GroupPartition, GroupPartition.group_id == ConsumerGroup.id)
        )
        return result.all()

    async def unacked_counts(self) -> dict[str, int]:
        """Unacked leases (messages in flight or waiting for a retry) per group id."""
        result = await self.session.execute(
            select(GroupLease.group_id, func.count())
            .where(GroupLease.acked.is_(False))
            .group_by(GroupLease.group_id)
        )
        return {group_id: int(count) for group_id, count in result.all()}

    async def set_generation(self, group_id: str, generation: int, partition_count: int) -> None:
        await self.session.execute(
            update(groups)
            .where(groups.c.id == group_id)
            .values(generation=generation, partition_count=partition_count)
        )

    async def remove(self, group_id: str) -> None:
        await self.session.execute(delete(groups).where(groups.c.id == group_id))

    async def caller_view(self, topic_id: str, name: str, member_id: str) -> CallerView | None:
        """The group, the calling member (if present) and the soonest member expiry, in one query."""
        others = members.alias("others")
        soonest = (
            select(func.min(others.c.expires_at_ms))
            .where(others.c.group_id == groups.c.id)
            .correlate(groups)
            .scalar_subquery()
        )
        stmt = (
            select(
                groups.c.id,
                groups.c.generation,
                groups.c.ack_timeout_ms,
                groups.c.partition_count,
                members.c.expires_at_ms,
                members.c.session_timeout_ms,
                soonest,
                groups.c.dead_letter,
            )
            .select_from(
                groups.outerjoin(members, and_(members.c.group_id == groups.c.id, members.c.id == member_id))
            )
            .where(groups.c.topic_id == topic_id, groups.c.name == name)
        )
        row = (await self.session.execute(stmt)).first()
        return CallerView(*row) if row else None

    # members --------------------------------------------------------------------------------------

    async def live_members(self, group_id: str, now_ms: int) -> list[str]:
        """Live members in join order (the order assignment breaks ties by)."""
        result = await self.session.execute(
            select(members.c.id)
            .where(members.c.group_id == group_id, members.c.expires_at_ms > now_ms)
            .order_by(members.c.joined_at, members.c.id)
        )
        return list(result.scalars().all())

    async def push_members(self, group_id: str, member_ids: Sequence[str]) -> set[str]:
        """Which of these members are push members (they keep leases in memory)."""
        if not member_ids:
            return set()
        result = await self.session.execute(
            select(members.c.id).where(
                members.c.group_id == group_id, members.c.id.in_(member_ids), members.c.push.is_(True)
            )
        )
        return set(result.scalars().all())

    async def live_member_counts(self, group_ids: Sequence[str], now_ms: int) -> dict[str, int]:
        if not group_ids:
            return {}
        result = await self.session.execute(
            select(members.c.group_id, func.count())
            .where(members.c.group_id.in_(group_ids), members.c.expires_at_ms > now_ms)
            .group_by(members.c.group_id)
        )
        return {gid: int(n) for gid, n in result.all()}

    async def remove_expired_members(self, group_id: str, now_ms: int) -> list[str]:
        result = await self.session.execute(
            delete(members)
            .where(members.c.group_id == group_id, members.c.expires_at_ms <= now_ms)
            .returning(members.c.id)
        )
        return list(result.scalars().all())

    async def get_member(self, group_id: str, member_id: str) -> GroupMember | None:
        result = await self.session.execute(
            select(GroupMember)
            .where(GroupMember.group_id == group_id, GroupMember.id == member_id)
            .execution_options(populate_existing=True)
        )
        return result.scalar_one_or_none()

    async def add_member(self, member: GroupMember) -> None:
        self.session.add(member)
        await self.session.flush()

    async def remove_member(self, group_id: str, member_id: str) -> bool:
        result = await self.session.execute(
            delete(members).where(members.c.group_id == group_id, members.c.id == member_id)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def touch_member(self, group_id: str, member_id: str, now_ms: int, expires_at_ms: int) -> bool:
        """Move a live member's expiry; False if it is gone or already expired."""
        result = await self.session.execute(
            update(members)
            .where(
                members.c.group_id == group_id, members.c.id == member_id, members.c.expires_at_ms > now_ms
            )
            .values(expires_at_ms=self._greatest(members.c.expires_at_ms, expires_at_ms))
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    # partitions -----------------------------------------------------------------------------------

    async def partitions(self, group_id: str) -> list[PartitionState]:
        result = await self.session.execute(
            select(
                partitions.c.partition, partitions.c.member_id, partitions.c.committed, partitions.c.position
            )
            .where(partitions.c.group_id == group_id)
            .order_by(partitions.c.partition)
        )
        return [PartitionState(*row) for row in result.all()]

    async def add_partitions(self, group_id: str, numbers: Iterable[int]) -> None:
        rows = [{"group_id": group_id, "partition": p} for p in numbers]
        if rows:
            await self.session.execute(insert(partitions), rows)

    async def lock_partitions(
        self, group_id: str, *, member_id: str | None = None, numbers: Sequence[int] | None = None
    ) -> list[PartitionState]:
        """Lock (Postgres) and read partition rows: those a member owns, or the numbered ones."""
        stmt = select(
            partitions.c.partition, partitions.c.member_id, partitions.c.committed, partitions.c.position
        ).where(partitions.c.group_id == group_id)
        if member_id is not None:
            # A partition still held by its previous (push) owner is not the new owner's to deliver yet.
            stmt = stmt.where(partitions.c.member_id == member_id, partitions.c.held_by.is_(None))
        if numbers is not None:
            stmt = stmt.where(partitions.c.partition.in_(numbers))
        result = await self.session.execute(stmt.order_by(partitions.c.partition).with_for_update())
        return [PartitionState(*row) for row in result.all()]

    async def set_owners(
        self, group_id: str, owners: dict[int, str | None], held: dict[int, str] | None = None
    ) -> None:
        """Give partitions new owners (bumping their epoch); ``held`` names, per partition, the push
        member that must release it first. A partition already held keeps its holder: that one has
        not written what it holds yet, whoever owns the partition meanwhile."""
        if owners:
            held = held or {}
            await self.session.execute(
                update(partitions)
                .where(partitions.c.group_id == group_id, partitions.c.partition == bindparam("p"))
                .values(
                    member_id=bindparam("m"),
                    held_by=func.coalesce(partitions.c.held_by, bindparam("h")),
                    # A held partition keeps the epoch its holder's release is checked against.
                    epoch=case(
                        (partitions.c.held_by.is_(None), partitions.c.epoch + 1), else_=partitions.c.epoch
                    ),
                ),
                [{"p": p, "m": m, "h": held.get(p)} for p, m in owners.items()],
            )

    async def clear_held(self, group_id: str, member_ids: Sequence[str]) -> None:
        """Members gone without releasing: their partitions' last checkpoint is what the new owners get."""
        if member_ids:
            await self.session.execute(
                update(partitions)
                .where(partitions.c.group_id == group_id, partitions.c.held_by.in_(member_ids))
                .values(held_by=None)
            )

    async def bump_epochs(self, group_id: str, numbers: Sequence[int]) -> None:
        """Offsets moved under the owners' feet (seek, reset): fence their in-memory checkpoints, and
        what a holder kept in memory is void (its release would undo the move)."""
        await self.session.execute(
            update(partitions)
            .where(partitions.c.group_id == group_id, partitions.c.partition.in_(numbers))
            .values(epoch=partitions.c.epoch + 1, held_by=None)
        )

    async def set_offsets(
        self, group_id: str, offsets: dict[int, int], *, position_only: bool = False
    ) -> None:
        """Set ``position`` (and, unless ``position_only``, ``committed``) of several partitions."""
        if not offsets:
            return
        values: dict[str, Any] = {"position": bindparam("o")}
        if not position_only:
            values["committed"] = bindparam("o")
        await self.session.execute(
            update(partitions)
            .where(partitions.c.group_id == group_id, partitions.c.partition == bindparam("p"))
            .values(**values),
            [{"p": p, "o": o} for p, o in offsets.items()],
        )

    async def advance_committed(self, group_id: str, numbers: Sequence[int]) -> None:
        """``committed`` := the lowest unacked leased offset, at most ``position``; drop acked leases
        below it."""
        await self.session.execute(
            update(partitions)
            .where(partitions.c.group_id == group_id, partitions.c.partition.in_(numbers))
            .values(committed=_committed_below(partitions.c.position))
        )
        await self.drop_acked_below_committed(group_id, numbers)

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

    # leases ---------------------------------------------------------------------------------------

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

    async def reschedule_leases(self, group_id: str, schedule: Sequence[tuple[int, int, int, str]]) -> None:
        """Failed attempts waiting for their retry: ``(partition, offset, due_ms, reason)``; no holder."""
        if schedule:
            await self.session.execute(
                update(leases)
                .where(
                    leases.c.group_id == group_id,
                    leases.c.partition == bindparam("p"),
                    leases.c.offset == bindparam("o"),
                )
                .values(member_id=None, deadline_ms=bindparam("d"), reason=bindparam("r")),
                [{"p": p, "o": o, "d": d, "r": r} for p, o, d, r in schedule],
            )

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
        """Replayed dead letters ``(partition, offset, dlq_offset)``: due at once, attempt back at 1, a
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
                    "replay_offset": dlq_offset,
                }
                for p, o, dlq_offset in replays
            ],
        )

    async def next_deadline(self, group_id: str, numbers: Sequence[int]) -> int | None:
        result = await self.session.execute(
            select(func.min(leases.c.deadline_ms)).where(
                leases.c.group_id == group_id, leases.c.partition.in_(numbers), leases.c.acked.is_(False)
            )
        )
        value = result.scalar_one_or_none()
        return int(value) if value is not None else None

    async def renew_leases(
        self, group_id: str, member_id: str, deadline_ms: int, keys: Sequence[tuple[int, int]]
    ) -> None:
        """Hand due leases to ``member_id`` for one more attempt (the caller holds their partitions)."""
        if keys:
            await self.session.execute(
                update(leases)
                .where(
                    leases.c.group_id == group_id,
                    leases.c.partition == bindparam("p"),
                    leases.c.offset == bindparam("o"),
                )
                .values(member_id=member_id, attempt=leases.c.attempt + 1, deadline_ms=deadline_ms),
                [{"p": p, "o": o} for p, o in keys],
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

    async def release_member_leases(self, group_id: str, member_ids: Sequence[str], now_ms: int) -> None:
        """Leases of members that are gone become due at once (for the partitions' new owners)."""
        if member_ids:
            await self.session.execute(
                update(leases)
                .where(
                    leases.c.group_id == group_id,
                    leases.c.member_id.in_(member_ids),
                    leases.c.acked.is_(False),
                )
                .values(member_id=None, deadline_ms=now_ms)
            )

    async def settle(
        self,
        group_id: str,
        member_id: str,
        now_ms: int,
        keys: Sequence[tuple[int, int]],
        values: dict[str, Any],
    ) -> set[tuple[int, int]]:
        """Update the member's live (unacked, deadline running) leases among ``keys``; which ones matched."""
        if not keys:
            return set()
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
            ).where(leases.c.group_id == group_id, tuple_(leases.c.partition, leases.c.offset).in_(keys))
        )
        return {(row[0], row[1]): LeaseState(*row) for row in result.all()}

    # push members' checkpoints ---------------------------------------------------------------------

    async def owned_partitions(self, group_id: str, member_id: str) -> list[OwnedPartition]:
        """The partitions a member owns or still holds, with what a push member needs to claim them."""
        result = await self.session.execute(
            select(
                partitions.c.partition,
                partitions.c.member_id,
                partitions.c.held_by,
                partitions.c.epoch,
                partitions.c.committed,
                partitions.c.position,
            )
            .where(
                partitions.c.group_id == group_id,
                or_(partitions.c.member_id == member_id, partitions.c.held_by == member_id),
            )
            .order_by(partitions.c.partition)
        )
        return [OwnedPartition(*row) for row in result.all()]

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

    async def checkpoint(
        self, group_id: str, member_id: str, partition: int, epoch: int, position: int, *, release: bool
    ) -> bool:
        """Write a push member's ``position`` (everything below is acked or has a lease row) and the
        committed offset it implies. Fenced: the member must still own the partition in ``epoch``, or,
        with ``release``, may also be the member that holds it for its new owner since the move that
        followed ``epoch`` (no seek or reset since; then it lets go)."""
        if not release:  # every exactly-once ack frame: a statement built (and cache-keyed) once
            result = await self.session.execute(
                _CHECKPOINT,
                {"g": group_id, "p": partition, "m": member_id, "e": epoch, "pos": position},
            )
            return bool(result.rowcount)  # type: ignore[attr-defined]
        owner = and_(
            partitions.c.member_id == member_id,
            partitions.c.held_by.is_(None),
            partitions.c.epoch == epoch,
        )
        values: dict[str, Any] = {"position": position, "committed": _committed_below(position)}
        if release:
            owner = or_(owner, and_(partitions.c.held_by == member_id, partitions.c.epoch == epoch + 1))
            values["held_by"] = None
        result = await self.session.execute(
            update(partitions)
            .where(partitions.c.group_id == group_id, partitions.c.partition == partition, owner)
            .values(**values)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def unhold(self, group_id: str, member_id: str, partition: int) -> bool:
        """Let go of a partition held for its new owner, at the stored position."""
        result = await self.session.execute(
            update(partitions)
            .where(
                partitions.c.group_id == group_id,
                partitions.c.partition == partition,
                partitions.c.held_by == member_id,
            )
            .values(held_by=None)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def lock_owned(self, group_id: str, member_id: str, partition: int, epoch: int) -> bool:
        """Lock a partition row if the member still owns it in ``epoch`` (and holds it for no one)."""
        result = await self.session.execute(
            select(partitions.c.partition)
            .where(
                partitions.c.group_id == group_id,
                partitions.c.partition == partition,
                partitions.c.member_id == member_id,
                partitions.c.held_by.is_(None),
                partitions.c.epoch == epoch,
            )
            .with_for_update()
        )
        return result.first() is not None

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
