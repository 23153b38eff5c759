"""What a push member holds: its partitions with their in-memory leases, one object its parts share.

A push member (``push.PushMember``) is put together from parts that each own one concern: its loops
(``push.py``), ack settlement (``acks.py``: the client's ``ack`` / ``nack`` / ``extend`` frames) and flow
control (``push_flow.py``). They all read and write the same state, which is this object, handed to each
by constructor (no part reaches into another's fields):

- ``parts`` — the partitions the member claimed, each a ``checkpoints.HeldPartition`` (its read position,
  the leases it holds in memory, the acks not yet in a checkpoint);
- ``held`` — message id → (partition, offset) of every in-memory lease (an ack finds its lease here);
- ``in_flight`` — every message the connection holds → its ack deadline (ms): in-memory leases and lease
  rows alike; what flow control counts;
- ``writing`` — the lock under which checkpoints, releases and materializations run, one at a time: no
  ack is settled against a partition half released.

It also keeps them in step with what the metadata store says the member owns: ``reconcile`` (at a
join, a rejoin, each beat, after a fenced checkpoint) releases the partitions the member lost
(``checkpoints.release``), claims the ones it owns anew, and forgets the ones it holds no more; and
``expire`` turns in-memory leases past their ack deadline into lease rows (``checkpoints.materialize``),
as ``write_gated`` does with records held back for a delay or found expired (``delays``).

Invariants, between two awaits: every id in ``held`` names an offset in the ``in_flight`` of a partition
in ``parts``, and is in ``in_flight`` here too; a partition dropped from ``parts`` (``forget``) takes its
ids out of ``held`` (a released one's leases are rows the member still holds, so they stay
``in_flight``). Not thread-safe: everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from app.broker import message_ids
from app.broker.delivery import checkpoints, delays
from app.broker.delivery.checkpoints import HeldPartition
from app.broker.topics import TopicRef
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import MetadataStore, OwnedPartition


class Holdings:
    """The partitions one push member holds and the leases it keeps of them in memory."""

    def __init__(self, topic_id: str) -> None:
        self.topic_id = topic_id
        # Whose they are: set at the member's join (a rejoin keeps both).
        self.group_id = ""
        self.member_id = ""
        self.parts: dict[int, HeldPartition] = {}  # partitions claimed: in-memory leases
        self.held: dict[str, tuple[int, int]] = {}  # id -> (partition, offset) of in-memory leases
        self.in_flight: dict[str, int] = {}  # every message this connection holds -> ack deadline (ms)
        self.writing = asyncio.Lock()  # checkpoints, releases and materializations, one at a time

    def is_held(self, message_id: Any) -> bool:
        """An id of an in-memory lease (anything else is a lease row's, or no message's)."""
        return isinstance(message_id, str) and message_id in self.held

    def message_id(self, part: HeldPartition, offset: int) -> str:
        """The id of the message at ``offset`` of a held partition."""
        return message_ids.encode(self.topic_id, part.partition, offset, head=part.head)

    def forget(self, partition: int, *, released: bool = False) -> None:
        """Drop a partition's in-memory state. Released: its leases are rows the member still holds
        (acks take the lease-row path); otherwise they are void and no longer held."""
        part = self.parts.pop(partition, None)
        if part is None:
            return
        part.released = released
        for offset in part.in_flight:
            message_id = self.message_id(part, offset)
            self.held.pop(message_id, None)
            if not released:
                self.in_flight.pop(message_id, None)

    async def expire(
        self,
        metadata: MetadataStore,
        now: int,
        *,
        fenced: Callable[[], Awaitable[object]],
        rows_due: Callable[[], None],
    ) -> None:
        """Deliveries past their deadline stop counting as held. In-memory leases among them become
        lease rows: the retry schedule (and the DLQ) apply to them from the next due-lease scan, exactly
        as to a pull member's; lease rows are due already, maybe for this member again. A partition
        found another's meanwhile calls ``fenced`` (the member reconciles); each one with rows written
        calls ``rows_due``."""
        for message_id in [i for i, d in self.in_flight.items() if d <= now and i not in self.held]:
            del self.in_flight[message_id]
        for part in list(self.parts.values()):
            offsets = checkpoints.expired(part, now)
            if not offsets:
                continue
            async with self.writing:
                if self.parts.get(part.partition) is not part:
                    continue
                ok = await checkpoints.materialize(metadata, self.group_id, self.member_id, part, offsets)
            for offset in offsets:
                message_id = self.message_id(part, offset)
                self.held.pop(message_id, None)
                self.in_flight.pop(message_id, None)
            if not ok:
                await fenced()
            rows_due()

    async def write_gated(
        self,
        metadata: MetadataStore,
        log: LogEngine,
        topic: TopicRef,
        part: HeldPartition,
        gate: delays.TimeGate,
        *,
        fenced: Callable[[], None],
    ) -> bool:
        """Write what ``gate`` held back or found expired in ``part`` as lease rows (``delays``), fenced
        like a checkpoint, before the member's position moves past them. False, with nothing written and
        ``gate`` emptied, when the partition is no longer held or is being let go, or when the write was
        fenced (then ``fenced`` is called: the member reconciles at a beat, now)."""
        expired = [x.offset for x in gate.expired]
        async with self.writing:
            if self.parts.get(part.partition) is not part or part.releasing:
                gate.held.clear()
                gate.expired.clear()
                return False
            ok = await delays.write_for_push(
                metadata, log, topic, self.group_id, self.member_id, part.partition, part.epoch, gate
            )
        if not ok:
            gate.held.clear()
            gate.expired.clear()
            fenced()
            return False
        if expired:  # acked rows above the floor: the next checkpoint drops them once below it
            part.acked_row_max = max(part.acked_row_max, *expired)
        return True

    async def reconcile(
        self,
        metadata: MetadataStore,
        log: LogEngine,
        topic: TopicRef,
        *,
        leaving: bool,
        confirmed: bool,
        beat_now: Callable[[], None],
        rows_due: Callable[[], None],
    ) -> set[int]:
        """Release the partitions this member lost (every one when ``leaving``), claim the ones it owns
        and may deliver from, forget the ones it holds no more; answers the partitions it released.

        ``confirmed``: the member's generation was found current just before (a join, a rejoin, a beat).
        Otherwise (a fenced checkpoint found the change) a partition it owns anew, or at a new epoch,
        starts only at the beat this asks for (``beat_now``): the epoch may have moved in a rebalance this
        member has not rejoined yet, and its client must hear of that (``rebalance``) before any message
        of the new generation, not after messages from the new owner's position. A partition claimed
        calls ``rows_due``: an earlier owner's lease rows may be due."""
        async with self.writing:
            async with metadata.unit(readonly=True) as uow:
                claim = await checkpoints.read_claim(uow, self.group_id, self.member_id)
            releasing = [o for o in claim.owned if self._must_release(o, leaving)]
            for owned in releasing:  # from now on the delivery loop sends nothing more from them
                part = self.parts.get(owned.partition)
                if part is not None:
                    part.releasing = True
            released: set[int] = set()
            if releasing:  # the only writes; a beat with nothing to release stays a plain read
                async with metadata.unit() as uow:
                    for owned in releasing:
                        part = self.parts.get(owned.partition)
                        if await checkpoints.release(uow, self.group_id, self.member_id, part, owned):
                            released.add(owned.partition)
            current: set[int] = set()
            for owned in claim.owned:
                p = owned.partition
                if leaving or owned.held_by is not None:
                    continue  # released above, or ours once its previous owner has released it
                current.add(p)
                part = self.parts.get(p)
                if part is not None and part.epoch == owned.epoch:
                    continue
                if part is not None:  # a seek or reset moved it: what was in flight there is dropped
                    self.forget(p)
                if not confirmed:  # the beat, asked for now, confirms the generation and starts it
                    beat_now()
                    continue
                self.parts[p] = HeldPartition(
                    p,
                    owned.epoch,
                    await checkpoints.start_position(log, topic, owned),
                    message_ids.partition_prefix(topic.id, p, prefix=topic.id_prefix),
                    skip=claim.ahead.get(p, set()),
                    rows_first=True,
                )
                rows_due()  # an earlier owner's lease rows may be due
        for p in list(self.parts):
            if p not in current:
                self.forget(p, released=p in released)
        return released

    def _must_release(self, owned: OwnedPartition, leaving: bool) -> bool:
        """Held for its new owner, or (leaving) owned and held for no one."""
        if owned.held_by == self.member_id:
            return True
        return leaving and owned.member_id == self.member_id and owned.held_by is None
