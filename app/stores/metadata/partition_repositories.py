"""SQL of a group's partitions: who owns each, its offsets, and push members' checkpoints.

A poll locks the ``group_partitions`` rows its member owns (``FOR UPDATE … WHERE member_id = me``; on
Postgres the owner test is re-checked after the lock), so only the current owner leases in a partition.
Offsets move in one statement for a whole call (``executemany``), never an ORM object per message. A push
member's checkpoint is fenced by the partition's ``epoch`` (bumped by every move, seek or reset).

The lock order is group → members → partitions → leases everywhere (``group_repositories``,
``partition_repositories``, ``lease_repositories``), so rebalances, polls and acks cannot deadlock. SQLite runs every
write unit of work under ``BEGIN IMMEDIATE``, which serialises them; ``FOR UPDATE`` is simply not rendered there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, case, func, insert, or_, select, update

from app.stores.metadata.base import Repository
from app.stores.metadata.lease_repositories import LeaseRepository
from app.stores.metadata.models import ConsumerGroup, GroupLease, GroupPartition, Topic
from app.stores.metadata.protocol import OwnedPartition, PartitionState

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


# A push member's checkpoint of one partition, not releasing (``PartitionRepository.checkpoint``); also run
# on the store's commit connection (``checkpoint_writer``), several partitions per transaction.
CHECKPOINT = (
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


class PartitionRepository(Repository):
    """Partition ownership and offsets of consumer groups."""

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
        await LeaseRepository(self.session).drop_acked_below_committed(group_id, numbers)

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

    async def checkpoint(
        self, group_id: str, member_id: str, partition: int, epoch: int, position: int, *, release: bool
    ) -> bool:
        """Write a push member's ``position`` (everything below is acked or has a lease row) and the
        committed offset it implies. Fenced: the member must still own the partition in ``epoch``, or,
        with ``release``, may also be the member that holds it for its new owner since the move that
        followed ``epoch`` (no seek or reset since; then it lets go)."""
        if not release:  # every exactly-once ack frame: a statement built (and cache-keyed) once
            result = await self.session.execute(
                CHECKPOINT,
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
