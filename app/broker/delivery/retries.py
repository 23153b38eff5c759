"""Retries: when a failed delivery is tried again, and when it goes to the dead-letter queue instead.

A delivery fails by a nack or by its ack deadline passing (``failures.py`` says what counts). What
happens next is decided here, on lease rows (an in-memory lease of a push member is made a row first:
``checkpoints.materialize``), in the unit of work that found the failure:

- **without a DLQ** a nacked message is due again after the nack's ``delay`` (at once by default) and a
  timed-out one at once; neither is counted.
- **with a DLQ** (``dead_letters.Policy``) each failure is a failed attempt, kept in the row's history
  (``failures.with_failure``). The failure of the last allowed attempt (``Policy.exhausted``: past
  ``maxRetries``), or a nack with ``deadLetter``, moves the message to the DLQ (``dead_letters.dead_letter``);
  any other is due again after the retry schedule's wait (``dead_letters.retry_delay_ms``: ``retryDelay``
  doubling per retry, jittered, capped), counted from the nack, or from the deadline that passed. A
  nack's own ``delay`` overrides the schedule's wait.

A rescheduled row has no holder until it is due: the partition's owner (pull or push) leases it again
then, with ``attempt + 1`` (``leases.poll_once``). Two entry points: ``Retries.timed_out`` for the due
leases a poll finds (timeouts), ``after_nack`` for a nack.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.broker import dead_letters
from app.broker.delivery import failures as failed_attempts
from app.broker.errors import InvalidRequest
from app.broker.topics import TopicRef
from app.stores.log.protocol import LogEngine, Record
from app.stores.metadata.protocol import CallerView, DueLease, LeaseState, MetadataUnit

Key = tuple[int, int]
Schedule = list[tuple[int, int, int, str]]  # (partition, offset, due ms, reason): rows waiting for a retry


@dataclass(slots=True)
class Retries:
    """The timeouts one poll found, in a group with a DLQ (``policy``): the leases to try again later,
    the failed-attempt histories to write, and the messages for the DLQ; written by the poll."""

    policy: dead_letters.Policy | None
    schedule: Schedule = field(default_factory=list)
    histories: dict[Key, str] = field(default_factory=dict)  # of the timeouts kept for a retry
    failures: list[dead_letters.Failure] = field(default_factory=list)  # exhausted: for the DLQ
    timeouts: int = 0  # ack timeouts found (the DLQ breaker counts them)

    def timed_out(self, lease: DueLease, record: Record, now: int) -> bool:
        """A due lease whose holder let its deadline pass: a failed attempt. True when it is delivered
        again now; False when it goes to the DLQ (its last attempt) or waits for its retry."""
        assert self.policy is not None
        self.timeouts += 1
        if self.policy.exhausted(lease.attempt):
            self.failures.append(
                dead_letters.Failure(
                    lease.partition, lease.offset, record, dead_letters.TIMEOUT_REASON, lease.attempt - 1
                )
            )
            return False
        key = (lease.partition, lease.offset)
        self.histories[key] = failed_attempts.with_failure(
            lease.failures, lease.deadline_ms, dead_letters.TIMEOUT_REASON
        )
        due_at = lease.deadline_ms + dead_letters.retry_delay_ms(self.policy, lease.attempt)
        if due_at > now:
            self.schedule.append((lease.partition, lease.offset, due_at, dead_letters.TIMEOUT_REASON))
            return False
        return True


async def after_nack(
    uow: MetadataUnit,
    log: LogEngine,
    topic: TopicRef,
    view: CallerView,
    done: set[Key],
    now: int,
    *,
    delay_ms: int | None,
    why: str,
    dead_letter: bool,
) -> None:
    """The nacked leases ``done`` (already given back, due after ``delay_ms``) in a group with a DLQ:
    each to its retry (the schedule's wait unless the nack named a ``delay``) or, on its last attempt or
    with ``dead_letter``, to the DLQ. Without a DLQ nothing more is done, and ``dead_letter`` is refused
    (400), which rolls the nack back with it: the message stays the caller's."""
    policy = dead_letters.Policy.of(view.dead_letter)
    if policy is None:
        if dead_letter:  # rolls the nack back with it: the message stays the caller's
            raise InvalidRequest.field("deadLetter", "the group has no dead-letter queue")
        return
    nacked = await uow.leases.leases_among(view.group_id, sorted(done))
    exhausted: list[LeaseState] = []
    schedule: Schedule = []
    histories: dict[Key, str] = {}
    for (p, o), lease in nacked.items():
        if dead_letter or policy.exhausted(lease.attempt):
            exhausted.append(lease)
            continue
        histories[(p, o)] = failed_attempts.with_failure(lease.failures, now, why)
        wait = delay_ms if delay_ms is not None else dead_letters.retry_delay_ms(policy, lease.attempt)
        schedule.append((p, o, now + wait, why))
    await uow.leases.reschedule_leases(view.group_id, schedule, histories)
    if exhausted:
        replays = await uow.leases.replay_offsets(view.group_id, [(x.partition, x.offset) for x in exhausted])
        found = await dead_letters.records_for(
            log,
            topic,
            view.group_id,
            [(x.partition, x.offset, replays.get((x.partition, x.offset))) for x in exhausted],
        )
        failures = [
            dead_letters.Failure(x.partition, x.offset, found[(x.partition, x.offset)], why, x.attempt - 1)
            for x in exhausted
            if (x.partition, x.offset) in found
        ]
        gone = [(x.partition, x.offset) for x in exhausted if (x.partition, x.offset) not in found]
        await dead_letters.dead_letter(uow, log, topic, view.group_id, failures, now=now)
        if gone:  # retention removed it meanwhile: nothing to keep
            await uow.leases.drop_leases(view.group_id, gone)
            await uow.partitions.advance_committed(view.group_id, sorted({p for p, _ in gone}))
