"""Delays and TTL at delivery: the gate every delivery pass puts records through.

A record carries its due time and expiry (``timing``). A delivery pass (a poll's ``_poll_once``, a push
member's ``_deliver_new``, both reading through ``reader.BudgetedReader``) asks a ``TimeGate`` about each
record it is about to deliver (the reader reads on past what the gate keeps, up to ``reader.SCAN_LIMIT``
records of a partition per pass: each is a lease row the pass writes):

- **not due yet** (a first delivery before ``deliverAt``): it is not sent; it becomes a lease row with no
  holder, attempt 0, due at ``deliverAt``. The lease rows are already the due-time index of retries: the
  pull path's due-lease scan (and a push member's beat) delivers it as attempt 1 when due, and the
  partition's position moves past it, so later records are not held back. The committed offset stops
  at the lowest unacked lease row, so it never passes a message not yet delivered; a restart, a crash
  or a new owner finds the row where it was.
- **expired** (``expiresAt`` passed before a delivery, first or retry): it is never delivered. With a
  DLQ it moves there with reason ``"expired"`` (``dead_letters.dead_letter``); without one it counts as acked.
  Either way the partition's ``expired`` count grows, one ``UPDATE`` per pass, not per message.
- anything else, including every record without a due time or an expiry (told apart without parsing):
  delivered as before.

A replayed dead letter is delivered whatever its expiry: replaying it is the user's explicit wish.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from app.broker import dead_letters, timing
from app.broker.topics import TopicRef
from app.stores.log.protocol import LogEngine, Record
from app.stores.metadata.protocol import LeaseState, MetadataStore, MetadataUnit

EXPIRED_REASON = "expired"
# A push member's beat scans for due lease rows at most this often (ms): rows falling due a millisecond
# apart are delivered a few per metadata round trip, at the cost of up to this much lateness.
COALESCE_MS = 20


@dataclass(slots=True)
class _Expiry:
    partition: int
    offset: int
    record: Record
    attempt: int  # the attempts made so far (0: never delivered)
    has_row: bool  # a lease row exists (a redelivery) or not (a first delivery)


@dataclass(slots=True)
class TimeGate:
    """What one delivery pass held back (not due yet) and found expired, written by ``write``."""

    now: int
    held: list[tuple[int, int, int]] = field(default_factory=list)  # partition, offset, deliverAt
    expired: list[_Expiry] = field(default_factory=list)

    def admit(self, partition: int, record: Record) -> bool:
        """Whether a first delivery of ``record`` may go now; if not, it is held or expired here."""
        if not timing.is_timed(record.headers):
            return True
        deliver_at, expires_at = timing.of_record(record.headers)
        if expires_at is not None and expires_at <= self.now:
            self.expired.append(_Expiry(partition, record.offset, record, 0, False))
            return False
        if deliver_at is not None and deliver_at > self.now:
            self.held.append((partition, record.offset, deliver_at))
            return False
        return True

    def admit_again(self, partition: int, record: Record, attempt: int, replayed: bool) -> bool:
        """Whether a lease row that fell due (``attempt`` made so far) may be delivered; not once expired."""
        if replayed or not timing.is_timed(record.headers):
            return True
        _, expires_at = timing.of_record(record.headers)
        if expires_at is not None and expires_at <= self.now:
            self.expired.append(_Expiry(partition, record.offset, record, attempt, True))
            return False
        return True

    def forget_from(self, partition: int, offset: int) -> None:
        """Drop what this pass found at or past ``offset`` of ``partition``: the pass will not move its
        position past them (the group's rate sent nothing there), so the next pass reads them again."""
        self.held = [h for h in self.held if h[0] != partition or h[1] < offset]
        self.expired = [x for x in self.expired if x.partition != partition or x.offset < offset or x.has_row]

    @property
    def count(self) -> int:
        """Records held back or expired so far."""
        return len(self.held) + len(self.expired)

    @property
    def pending(self) -> bool:
        """Whether ``write`` has anything to write."""
        return bool(self.held or self.expired)

    @property
    def next_due(self) -> int | None:
        """The earliest ``deliverAt`` held back by this pass."""
        return min((d for _, _, d in self.held), default=None)

    async def write(
        self,
        uow: MetadataUnit,
        log: LogEngine,
        topic: TopicRef,
        group_id: str,
        dead_letter: dict[str, Any] | None,
    ) -> None:
        """In the pass's unit of work (its partitions locked): held records as lease rows due at their
        ``deliverAt``; expired ones to the DLQ (``dead_letter`` is the group's config) or acked; the
        partitions' ``expired`` counts. Call before the pass moves its positions past them."""
        if not self.pending:
            return
        rows = [LeaseState(p, o, None, 0, due, False) for p, o, due in self.held]
        fresh = [x for x in self.expired if not x.has_row]
        if dead_letter is not None:
            # A row to dead-letter (``dead_letters.dead_letter`` acks it, which lets the committed offset pass).
            rows += [LeaseState(x.partition, x.offset, None, 0, self.now, False) for x in fresh]
        else:
            rows += [LeaseState(x.partition, x.offset, None, 0, 0, True) for x in fresh]
        await uow.leases.put_leases(group_id, rows)
        if self.expired:
            if dead_letter is not None:
                await dead_letters.dead_letter(
                    uow,
                    log,
                    topic,
                    group_id,
                    [
                        dead_letters.Failure(
                            x.partition, x.offset, x.record, EXPIRED_REASON, max(0, x.attempt - 1)
                        )
                        for x in self.expired
                    ],
                    now=self.now,
                )
            else:
                await uow.leases.mark_acked(
                    group_id, [(x.partition, x.offset) for x in self.expired if x.has_row]
                )
            counts = Counter(x.partition for x in self.expired)
            await uow.expiry.add_expired(group_id, counts)
        self.held.clear()
        self.expired.clear()

    def expired_partitions(self) -> list[int]:
        """Partitions where this pass found expired messages (their committed offset may move)."""
        return sorted({x.partition for x in self.expired})


async def write_for_push(
    metadata: MetadataStore,
    log: LogEngine,
    topic: TopicRef,
    group_id: str,
    member_id: str,
    partition: int,
    epoch: int,
    gate: TimeGate,
) -> bool:
    """A push member's pass: ``gate.write`` for one partition it holds in memory, fenced like its
    checkpoints (the member must still own it in ``epoch``); False when fenced (nothing written)."""
    async with metadata.unit() as uow:
        if not await uow.partitions.lock_owned(group_id, member_id, partition, epoch):
            return False
        config = await uow.expiry.dead_letter_config(group_id) if gate.expired else None
        expired = bool(gate.expired)
        await gate.write(uow, log, topic, group_id, config)
        if expired:
            await uow.partitions.advance_committed(group_id, [partition])
    return True
