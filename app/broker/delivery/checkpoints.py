"""A push member's partitions: first-delivery leases kept in memory, checkpointed to the metadata store.

A push member (one WebSocket) delivers new records of the partitions it owns without a metadata write
per message: their leases (attempt 1, ack deadline) live in its ``HeldPartition``. What the metadata
store keeps of such a partition is a **checkpoint**:

- ``position`` = the member's *floor*: its lowest in-flight offset, or its read position when nothing is
  in flight. Everything below the floor is acked or has a lease row; ``committed`` follows from it (the
  lowest unacked lease row, else the floor).
- an acked lease row for each offset acked *above* the floor (acks out of order), so that a read from
  ``position`` after a crash skips it.

Exactly-once acks are answered once their checkpoint is written (one write per partition for however
many acks arrived meanwhile); at-least-once acks are answered at once and checkpointed shortly after
(``acks.py``). This module says *what* a checkpoint holds; *how* it is written (a dedicated commit
connection when only positions move) is the metadata store's decision (``checkpoint_writer``).
After a crash the next owner reads from the checkpoint: no acked message is delivered again, and every
unacked one is.

Anything that is not a first delivery goes through lease rows as for pull members (``leases``): a nack
or a timeout *materializes* the lease as a row (then the DLQ schedule applies), and redeliveries of rows
are leased by ``leases.poll_once(fresh=False)``.

**Hand-over.** Every write names the partition's ``epoch`` and owner, so a member that missed a
rebalance, a seek or its own eviction cannot overwrite what others did. A partition that a rebalance
takes from a live push member stays ``held_by`` it until it is **released**: its in-flight leases are
written as rows (still held by it, deadlines running, so its acks keep working and nobody else gets
them meanwhile), its acks above the floor as acked rows, ``position`` as its read position. Only then
does the new owner deliver from it. A member that is gone without releasing (a crash) leaves its last
checkpoint, which is what the new owner starts from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from app.broker.topics import TopicRef
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import (
    LeaseState,
    MetadataStore,
    MetadataUnit,
    OwnedPartition,
    PartitionCheckpoint,
)


@dataclass(slots=True)
class HeldPartition:
    """One partition a push member owns: its read position and the leases it holds in memory."""

    partition: int
    epoch: int
    position: int  # the next offset to read
    head: bytes  # the message-id prefix of the partition
    # offset -> ack deadline (ms) of first deliveries not yet acked; insertion order is offset order
    in_flight: dict[int, int] = field(default_factory=dict)
    acked: set[int] = field(default_factory=set)  # acked offsets not yet in a checkpoint
    skip: set[int] = field(default_factory=set)  # leased offsets past ``position`` (rows of an earlier owner)
    acked_row_max: int = -1  # the highest acked lease row written (-1: none left above committed)
    released: bool = False  # let go with its leases and acks written (``release``)
    releasing: bool = False  # being let go: nothing more is delivered from it
    # Claimed or kept at a (re)join: lease rows given back meanwhile (a member that left) may be due
    # below ``position``. Nothing new is read from it until the beat's poll has taken the due ones, so
    # the client sees them in offset order before what follows (``beat.Beat``).
    rows_first: bool = False

    @property
    def floor(self) -> int:
        """The lowest offset not settled by this member: its first in-flight one, or its position."""
        return next(iter(self.in_flight)) if self.in_flight else self.position

    def pending_acks(self, floor: int) -> list[int]:
        """Acked offsets a checkpoint at ``floor`` must write as acked rows (those above the floor)."""
        return sorted(o for o in self.acked if o >= floor)


@dataclass(frozen=True, slots=True)
class Claim:
    """What the metadata store says about a member's partitions, for ``reconcile``."""

    owned: list[OwnedPartition]
    ahead: dict[int, set[int]]


async def read_claim(uow: MetadataUnit, group_id: str, member_id: str) -> Claim:
    """The partitions a member owns or holds, with the leased offsets past their positions."""
    owned = await uow.partitions.owned_partitions(group_id, member_id)
    mine = [o.partition for o in owned if o.member_id == member_id and o.held_by is None]
    return Claim(owned, await uow.leases.leases_from_position(group_id, mine))


async def start_position(log: LogEngine, topic: TopicRef, owned: OwnedPartition) -> int:
    """Where a partition without a position starts (one added to the topic later): its earliest offset."""
    if owned.position is not None:
        return owned.position
    return (await log.partition_info(topic.id, owned.partition)).earliest_offset


async def checkpoint(
    metadata: MetadataStore, group_id: str, member_id: str, parts: Iterable[HeldPartition]
) -> set[int]:
    """Ask the store to checkpoint ``parts`` (those with acks not yet written) in one unit of work (how
    is the store's choice: ``checkpoint_writer``); answers the partitions it was fenced from (another
    owner, another epoch: the member must reconcile)."""
    work = [(part, part.floor) for part in parts]
    written = {part.partition: part.pending_acks(floor) for part, floor in work}
    fenced = await metadata.checkpoint_writer.write(
        group_id,
        member_id,
        [
            # Acked rows written earlier may lie below the new floor: the store drops them.
            PartitionCheckpoint(p.partition, p.epoch, floor, written[p.partition], p.acked_row_max >= 0)
            for p, floor in work
        ],
    )
    for part, floor in work:
        if part.partition not in fenced:
            # Written: as rows, or below the new position. Acks that came meanwhile stay for the next one.
            rows = written[part.partition]
            part.acked_row_max = max([part.acked_row_max, *rows])
            part.acked = {o for o in part.acked if o >= floor} - set(rows)
            if part.acked_row_max < floor:
                part.acked_row_max = -1
    return fenced


async def release(
    uow: MetadataUnit, group_id: str, member_id: str, part: HeldPartition | None, owned: OwnedPartition
) -> bool:
    """Let go of a partition: its in-flight leases become rows held by the member (deadlines running),
    acks above the floor acked rows, ``position`` the member's read position. Fenced like ``checkpoint``;
    with no memory of the partition (``part`` None) it only lets go at the stored position."""
    if part is None:
        return await uow.partitions.unhold(group_id, member_id, owned.partition)
    if not await uow.partitions.checkpoint(
        group_id, member_id, part.partition, part.epoch, part.position, release=True
    ):
        return False
    rows = [LeaseState(part.partition, o, member_id, 1, d, False) for o, d in part.in_flight.items()]
    rows += [_acked_row(part.partition, o) for o in part.pending_acks(part.floor)]
    await uow.leases.put_leases(group_id, rows)
    # The checkpoint computed ``committed`` before these rows existed: once more, with them.
    await uow.partitions.advance_committed(group_id, [part.partition])
    return True


async def materialize(
    metadata: MetadataStore, group_id: str, member_id: str, part: HeldPartition, offsets: Sequence[int]
) -> bool:
    """Turn in-flight leases of ``part`` into lease rows held by the member (a nack, a timeout: the
    retry schedule and the DLQ work on rows). False when fenced (the partition is not the member's)."""
    rows = [LeaseState(part.partition, o, member_id, 1, part.in_flight[o], False) for o in offsets]
    gone = set(offsets)
    # The floor once these are rows: the checkpoint moves to it in the same unit of work, so that an ack
    # of the row later commits past it even if nothing else is acked meanwhile.
    floor = next((o for o in part.in_flight if o not in gone), part.position)
    async with metadata.unit() as uow:
        if not await uow.partitions.lock_owned(group_id, member_id, part.partition, part.epoch):
            return False
        await uow.leases.put_leases(group_id, rows)
        await uow.partitions.checkpoint(group_id, member_id, part.partition, part.epoch, floor, release=False)
    for offset in offsets:
        del part.in_flight[offset]
    return True


def expired(part: HeldPartition, now: int) -> list[int]:
    """In-flight offsets whose ack deadline has passed."""
    return [o for o, deadline in part.in_flight.items() if deadline <= now]


def _acked_row(partition: int, offset: int) -> LeaseState:
    return LeaseState(partition, offset, None, 1, 0, True)
