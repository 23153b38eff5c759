"""Leases: pull delivery (poll), ack, nack, extend, and the committed offset they move.

Per group and partition the metadata store holds ``committed`` (everything below is acked), ``position``
(the next offset to read from the log) and one lease row per delivered offset in between that is not
committed yet: holder, attempt, deadline, acked. All of it is written before a call answers, so any API
process can serve any member's next call, and a restarted one loses nothing.

- **poll** locks the partitions the member owns, hands it the due leases first (a deadline passed: ack
  timeout, or a nack's delay) with ``attempt + 1``, then new records from ``position`` with ``attempt 1``,
  in offset order per partition (read by ``reader.BudgetedReader``, the push members' reader too). A
  message waiting for its retry holds no one up: the ones after it are read from ``position`` meanwhile. One ``UPDATE`` (executemany) renews, one multi-row ``INSERT`` leases,
  one ``UPDATE`` moves positions, whatever the number of messages. With nothing to deliver a long poll
  waits on ``LogEngine.wait_for`` (woken when data commits) or until the next lease falls due.
- **ack** marks the caller's live leases acked in one guarded ``UPDATE … RETURNING``, then moves
  ``committed`` up to the lowest unacked lease (or ``position``) and deletes the acked leases below it,
  all in the unit of work that answers: the ack is durable in the metadata store when it is answered
  (exactly-once). An ack after the deadline, or of a lease someone else now holds, is ``ACK_EXPIRED``.
- **nack** makes a lease due after ``delay``; **extend** moves its deadline. Both only touch the caller's
  own live leases. In a group with a DLQ a nack, and a timeout a poll finds, is a failed attempt: when
  it is retried, or dead-lettered instead, is ``retries.py``'s to say.

No double delivery: only the owner of a partition leases in it, under the lock of that partition's row;
a lease changes hands only once its deadline has passed (or its holder left the group); lease keys are a
primary key, so no offset is ever leased twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from app.broker import breaker, dead_letters, message_ids, pauses, topics
from app.broker.delivery import delays, flow, membership, retries, stream_wakeups
from app.broker.delivery.membership import MemberRef, committing_fences, member_not_found, stale_generation
from app.broker.delivery.reader import BudgetedReader, ReadCursor
from app.broker.errors import BrokerError, InvalidRequest, MemberNotFound, TopicNotFound
from app.broker.messages import render_message
from app.broker.topics import TopicRef
from app.kit.clock import SYSTEM_CLOCK, Clock, isoformat_ms
from app.stores.log.protocol import LogEngine, LogEngineError, Record
from app.stores.metadata.protocol import (
    CallerView,
    LeaseSettlement,
    MetadataStore,
    MetadataUnit,
    PartitionState,
)

MAX_MESSAGES = 1000
MAX_WAIT_SECONDS = 30
MAX_IDS = 1000
MAX_EXTEND_SECONDS = 12 * 3600
PAUSE_RECHECK_SECONDS = 0.5  # a long poll of a paused group looks again this often (resumed within 1 s)

Key = tuple[int, int]
# A step of an ack, nack or extend after the caller's leases were updated, in the same unit of work.
Then = Callable[[MetadataUnit, CallerView, set[Key], int], Awaitable[None]]


@dataclass(slots=True)
class PollResult:
    """One pass of a poll: the rendered messages (with their ids and ack deadline), where the member's
    partitions stand in the log, and when its next lease falls due (to wait on when nothing came)."""

    messages: list[bytes]
    positions: dict[int, int] = field(default_factory=dict)
    next_deadline_ms: int | None = None
    ids: list[str] = field(default_factory=list)
    deadline_ms: int = 0
    ack_timeout_ms: int | None = None  # the group's (None when the member owns no partition)
    flow: flow.FlowConfig = field(default_factory=flow.FlowConfig)  # the group's, as of this pass
    paused: bool = False  # the group is paused: nothing was delivered (``pauses.py``)
    paused_until_ms: int | None = None
    group_id: str = ""
    failed: int = 0  # ack timeouts this pass found (the DLQ breaker counts them)
    breaker: bool = False  # the group has a DLQ breaker (its outcomes are counted)


@dataclass(frozen=True, slots=True)
class Settlement:
    """The answer to ack, nack and extend: ids done, and the ones that failed with a code."""

    ids: list[str]
    failed: list[dict[str, str]]
    group_id: str = ""  # the group settled in (the DLQ breaker counts acks and nacks per group)
    breaker: bool = False  # the group has a DLQ breaker


async def _caller(
    uow: MetadataUnit,
    member: MemberRef,
    now: int,
    *,
    extra_ms: int = 0,
    maintain: bool = False,
    touch: bool = True,
) -> CallerView:
    """Check the member and its generation, and count the call as a heartbeat."""
    topic, group_name, member_id = member.topic, member.group_name, member.member_id
    view = await uow.groups.caller_view(topic.id, group_name, member_id)
    if view is None:
        raise member_not_found(member_id, group_name)
    expired = view.soonest_expiry_ms is not None and view.soonest_expiry_ms <= now
    if maintain and (expired or view.partition_count < topic.partitions):
        await membership.maintain(uow, topic, group_name, now)
        view = await uow.groups.caller_view(topic.id, group_name, member_id)
        assert view is not None
    if view.member_expires_at_ms is None or view.member_expires_at_ms <= now:
        raise member_not_found(member_id, group_name)
    if member.generation != view.generation:
        raise stale_generation(member.generation, view.generation)
    assert view.member_session_timeout_ms is not None
    if touch:
        await uow.groups.touch_member(
            view.group_id, member_id, now, now + view.member_session_timeout_ms + extra_ms
        )
    return view


def _validate_poll(max_messages: int, wait_seconds: float) -> None:
    if not 1 <= max_messages <= MAX_MESSAGES:
        raise InvalidRequest.field("maxMessages", f"must be between 1 and {MAX_MESSAGES}")
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise InvalidRequest.field("waitSeconds", f"must be between 0 and {MAX_WAIT_SECONDS}")


async def poll(
    metadata: MetadataStore,
    log: LogEngine,
    member: MemberRef,
    *,
    max_messages: int = 100,
    wait_seconds: float = 0,
    abandoned: asyncio.Event | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> list[bytes]:
    """Up to ``max_messages`` messages for the member, waiting up to ``wait_seconds`` for the first.
    Once ``abandoned`` is set (the caller went away) the wait ends and nothing more is leased: messages
    leased to a poll nobody reads would wait out their ack timeout. Deadlines are compared with
    ``clock``; the wait itself is real time."""
    _validate_poll(max_messages, wait_seconds)
    until = time.monotonic() + wait_seconds
    try:
        while True:
            remaining = max(0.0, until - time.monotonic())

            polled = await poll_once(
                metadata, log, member, max_messages, round(remaining * 1000), clock=clock
            )
            remaining = until - time.monotonic()
            if polled.messages or remaining <= 0:
                return polled.messages
            timeout = remaining
            if polled.next_deadline_ms is not None:
                timeout = min(timeout, max(0.0, (polled.next_deadline_ms - clock.now_ms()) / 1000) + 0.005)
            if polled.paused:  # a resume is seen by reading the group again, not by a wake-up
                timeout = min(timeout, PAUSE_RECHECK_SECONDS)
            await wait_for_data(log, member.topic, polled.positions, timeout, abandoned)
            if abandoned is not None and abandoned.is_set():
                return []
    except MemberNotFound:
        # A topic deleted under the poll takes its groups' members with it: that is a read meeting a
        # deleted topic (PRODUCT.md "Deletion races"), not an evicted member to join again.
        if not await topics.exists(metadata, member.topic.id):
            raise TopicNotFound(member.topic.name) from None
        raise


async def poll_once(
    metadata: MetadataStore,
    log: LogEngine,
    member: MemberRef,
    max_messages: int,
    wait_ms: int = 0,
    *,
    heartbeat: bool = True,
    fresh: bool = True,
    clock: Clock = SYSTEM_CLOCK,
) -> PollResult:
    """One unit of work of a poll (no waiting): what is due or new for the member, leased to it. It counts
    as the member's heartbeat unless ``heartbeat`` is False. Without ``fresh`` only due leases are
    delivered (a push member reads new records itself and keeps their leases in memory). ``clock`` says
    which leases are due (and when the new ones fall due)."""

    async def work(uow: MetadataUnit) -> PollResult:
        return await _poll_once(uow, log, member, max_messages, wait_ms, heartbeat, fresh, now=clock.now_ms())

    polled = await committing_fences(metadata, work)
    if polled.failed and polled.breaker:
        breaker.outcomes(metadata).record(polled.group_id, failed=polled.failed)
    return polled


async def wait_for_data(
    log: LogEngine,
    topic: TopicRef,
    positions: dict[int, int],
    timeout: float,
    abandoned: asyncio.Event | None = None,
) -> None:
    """Until a record commits at one of ``positions``, ``timeout``, or ``abandoned`` is set; no polling."""
    # One future and a watch per partition (no task each): the log resolves it from the commit.
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    cancels: list[Callable[[], None]] = []
    if abandoned is not None:
        if abandoned.is_set():
            return
        gone = asyncio.ensure_future(abandoned.wait())
        gone.add_done_callback(lambda _: wake())

        def stop_listening() -> None:
            gone.cancel()

        cancels.append(stop_listening)
    try:
        # Nothing assigned: nothing can arrive for this member meanwhile; only time or the caller ends it.
        for partition, offset in positions.items():
            cancels.append(log.watch(topic.id, partition, offset, wake))
        async with asyncio.timeout(timeout):
            await woken
    except (TimeoutError, LogEngineError):
        pass  # the time is up, or the topic or partition is gone: the next poll answers for it
    finally:
        for cancel in cancels:
            cancel()


async def _poll_once(
    uow: MetadataUnit,
    log: LogEngine,
    member: MemberRef,
    max_messages: int,
    wait_ms: int,
    heartbeat: bool = True,
    fresh: bool = True,
    *,
    now: int,
) -> PollResult:
    topic, member_id = member.topic, member.member_id
    view = await _caller(uow, member, now, extra_ms=wait_ms, maintain=True, touch=heartbeat)
    gates = flow.FlowConfig(view.max_in_flight, view.rate, view.filter)
    if pauses.holds(view.paused_reason, view.paused_until_ms, now):
        return PollResult(
            [],
            ack_timeout_ms=view.ack_timeout_ms,
            paused=True,
            paused_until_ms=view.paused_until_ms,
            breaker=breaker.configured(view.dead_letter),
            flow=gates,
        )
    # The group's maxInFlight (pull members; a push member's beat passes its own room as max_messages).
    room = await flow.pull_room(uow, view.group_id, member_id, view.max_in_flight, now) if fresh else None
    if room is not None and room[0] <= 0:  # no room: look again shortly (acks may come on any node)
        await flow.settle_pull_claim(uow, view.group_id, member_id, room[1])  # what it holds, no more
        return PollResult(
            [],
            {},
            now + flow.RECHECK_MS,
            ack_timeout_ms=view.ack_timeout_ms,
            flow=gates,
            group_id=view.group_id,
            breaker=breaker.configured(view.dead_letter),
        )
    if room is not None:
        max_messages = min(max_messages, room[0])
    owned = await uow.partitions.lock_partitions(view.group_id, member_id=member_id)
    if not owned:
        if room is not None:  # what it still holds (of partitions it had): no more
            await flow.settle_pull_claim(uow, view.group_id, member_id, room[1])
        return PollResult([], ack_timeout_ms=view.ack_timeout_ms, flow=gates)
    predicate = gates.predicate
    numbers = [s.partition for s in owned]
    deadline_ms = now + view.ack_timeout_ms
    delivered: list[tuple[int, int, int, Record]] = []  # partition, offset, attempt, record

    due = await uow.leases.due_leases(view.group_id, numbers, now, max_messages)
    found = await dead_letters.records_for(
        log, topic, view.group_id, [(d.partition, d.offset, d.replay_offset) for d in due]
    )
    retried = retries.Retries(dead_letters.Policy.of(view.dead_letter))  # timeouts: retry later, or the DLQ
    gate = delays.TimeGate(now)  # delays and TTL: what is not due yet, or no more
    renewed: list[Key] = []
    vanished: list[Key] = []
    for d in due:
        key = (d.partition, d.offset)
        record = found.get(key)
        if record is None or (predicate is not None and not predicate(record.key, record.headers)):
            vanished.append(key)  # gone with retention, or no longer matching the filter: settled
            continue
        if not gate.admit_again(d.partition, record, d.attempt, d.replay_offset is not None):
            continue  # expired: never delivered again
        # Its holder let the deadline pass: a failure, retried now, later, or dead-lettered.
        if retried.policy is not None and d.member_id is not None and not retried.timed_out(d, record, now):
            continue
        renewed.append(key)
        delivered.append((d.partition, d.offset, d.attempt + 1, record))

    fresh_records: list[tuple[int, Record]] = []
    moved: dict[int, int] = {}
    started: dict[int, int] = {}
    positions: dict[int, int] = {}
    reader: BudgetedReader[ReadCursor] | None = None
    if fresh:
        # Leases past a partition's position (a push member's checkpoint): already acked, or due on their own.
        ahead = await uow.leases.leases_from_position(view.group_id, numbers)
        cursors = [
            ReadCursor(s.partition, await _position_of(log, topic, s, started), ahead.get(s.partition, ()))
            for s in owned
        ]
        positions = {c.partition: c.position for c in cursors}

        async def lease(cursor: ReadCursor, records: list[Record], end: int) -> int:
            """Leased as rows below, in this unit of work (after the group's rate)."""
            p = cursor.partition
            fresh_records.extend(zip(repeat(p), records))
            moved[p] = positions[p] = end
            return len(records)

        reader = BudgetedReader(log, topic.id, gate, predicate, lease)
        await reader.read(cursors, max_messages - len(renewed))
    first: list[Key] = []
    filtered = reader.filtered if reader is not None else set()  # passed over by the filter: acked

    # The group's rate: tokens for what this pass would deliver; what gets none waits where it is.
    tokens = await flow.take(view.group_id, gates.rate, len(renewed) + len(fresh_records))
    throttled = tokens.granted < len(renewed) + len(fresh_records)
    if throttled:
        keep_due = min(len(renewed), tokens.granted)
        kept = set(renewed[:keep_due])
        renewed = renewed[:keep_due]
        delivered = [d for d in delivered if (d[0], d[1]) in kept]
        for p, record in fresh_records[tokens.granted - keep_due :]:  # not sent: read again next time
            moved[p] = positions[p] = min(moved[p], record.offset)
        for p, back_to in moved.items():  # what the gate found past there is found again next time
            gate.forget_from(p, back_to)
        fresh_records = fresh_records[: tokens.granted - keep_due]
    for p, record in fresh_records:
        first.append((p, record.offset))
        delivered.append((p, record.offset, 1, record))

    histories = retried.histories
    await uow.leases.renew_leases(
        view.group_id, member_id, deadline_ms, renewed, {k: histories[k] for k in renewed if k in histories}
    )
    await uow.leases.drop_leases(view.group_id, vanished)
    await uow.leases.reschedule_leases(view.group_id, retried.schedule, histories if histories else None)
    await dead_letters.dead_letter(uow, log, topic, view.group_id, retried.failures, now=now)
    expired = gate.expired_partitions()
    await gate.write(uow, log, topic, view.group_id, view.dead_letter)
    await uow.leases.add_leases(view.group_id, member_id, deadline_ms, first)
    await uow.partitions.set_offsets(view.group_id, started)
    await uow.partitions.set_offsets(view.group_id, moved, position_only=True)
    if vanished or filtered or expired:
        await uow.partitions.advance_committed(
            view.group_id, sorted({p for p, _ in vanished} | filtered | set(expired))
        )
    if room is not None:
        await flow.settle_pull_claim(uow, view.group_id, member_id, room[1] + len(delivered))

    if not delivered:
        next_deadline = await uow.leases.next_deadline(view.group_id, numbers)
        if throttled:  # records are there: wait for the next token, not for a commit
            positions = {}
            next_deadline = min(next_deadline or now + tokens.wait_ms, now + tokens.wait_ms)
        return PollResult(
            [],
            positions,
            next_deadline,
            ack_timeout_ms=view.ack_timeout_ms,
            flow=gates,
            group_id=view.group_id,
            failed=retried.timeouts,
            breaker=breaker.configured(view.dead_letter),
        )
    delivered.sort(key=lambda d: (d[0], d[1]))
    ack_deadline = isoformat_ms(deadline_ms)
    return PollResult(
        [
            render_message(
                topic.name, topic, topic.id, p, record, {"attempt": attempt, "ackDeadline": ack_deadline}
            )
            for p, _, attempt, record in delivered
        ],
        positions,
        ids=[message_ids.encode(topic.id, p, o, prefix=topic.id_prefix) for p, o, _, _ in delivered],
        deadline_ms=deadline_ms,
        ack_timeout_ms=view.ack_timeout_ms,
        next_deadline_ms=await uow.leases.next_deadline(view.group_id, numbers) if not fresh else None,
        flow=gates,
        group_id=view.group_id,
        failed=retried.timeouts,
        breaker=breaker.configured(view.dead_letter),
    )


async def _position_of(
    log: LogEngine, topic: TopicRef, state: PartitionState, started: dict[int, int]
) -> int:
    """Where to read a partition from; one never started (e.g. just added) starts at its earliest offset."""
    if state.position is not None:
        return state.position
    info = await log.partition_info(topic.id, state.partition)
    started[state.partition] = info.earliest_offset
    return info.earliest_offset


def _locate(topic: TopicRef, message_id: Any) -> tuple[Key | None, str | None]:
    """Where an id points in this topic, or the per-id error code."""
    if not isinstance(message_id, str):
        return None, "INVALID_REQUEST"
    try:
        where = message_ids.decode(message_id)
    except BrokerError:
        return None, "INVALID_REQUEST"
    if where.topic_id != topic.id or not 0 <= where.partition < topic.partitions:
        return None, "MESSAGE_NOT_FOUND"
    return (where.partition, where.offset), None


def validate_ids(ids: Any) -> list[Any]:
    """The ``ids`` of an ack or extend: a list of 1 to ``MAX_IDS`` message ids."""
    if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_IDS:
        raise InvalidRequest.field("ids", f"expected a list of 1 to {MAX_IDS} message ids")
    return ids


async def _settle_ids(
    metadata: MetadataStore,
    member: MemberRef,
    ids: list[Any],
    settlement_at: Callable[[int], LeaseSettlement],
    *,
    commit: bool,
    then: Then | None = None,
    heartbeat: bool = True,
    clock: Clock = SYSTEM_CLOCK,
) -> Settlement:
    """Write ``settlement_at(now)`` on the caller's live leases named by ``ids``; classify the others."""
    where = [(str(message_id), *_locate(member.topic, message_id)) for message_id in ids]
    located = {key for _, key, _ in where if key is not None}
    group: list[tuple[str, bool]] = []

    async def work(uow: MetadataUnit) -> tuple[set[Key], dict[Key, str]]:
        now = clock.now_ms()
        view = await _caller(uow, member, now, touch=heartbeat)
        group[:] = [(view.group_id, breaker.configured(view.dead_letter))]
        if not located:
            return set(), {}
        keys = sorted(located)
        numbers = sorted({p for p, _ in keys})
        # Locks the partitions an ack may move the committed offset of (ordered: no deadlocks).
        state = {s.partition: s for s in await uow.partitions.lock_partitions(view.group_id, numbers=numbers)}
        done = await uow.leases.settle(view.group_id, member.member_id, now, keys, settlement_at(now))
        rest = [k for k in keys if k not in done]
        known = await uow.leases.leases_among(view.group_id, rest)
        codes: dict[Key, str] = {}
        for key in rest:
            lease, part = known.get(key), state.get(key[0])
            already_acked = (lease is not None and lease.acked) or (
                lease is None and part is not None and part.committed is not None and key[1] < part.committed
            )
            if commit and already_acked:
                done.add(key)  # acks are idempotent
            elif lease is not None or (
                part is not None and part.position is not None and key[1] < part.position
            ):
                codes[key] = "ACK_EXPIRED"
            else:
                codes[key] = "MESSAGE_NOT_FOUND"
        if commit:
            await uow.partitions.advance_committed(view.group_id, numbers)
        if then is not None and done:
            await then(uow, view, done, now)
        return done, codes

    done, codes = await committing_fences(metadata, work)
    stream_wakeups.settled(member.member_id)  # its event stream on this process, if any, looks again
    ok: list[str] = []
    failed: list[dict[str, str]] = []
    for message_id, key, code in where:  # answered in the order asked
        if key is not None and key in done:
            ok.append(message_id)
        else:
            failed.append(
                {"id": message_id, "code": codes[key] if key is not None else code or "INVALID_REQUEST"}
            )
    group_id, counted = group[0] if group else ("", False)
    return Settlement(ok, failed, group_id, counted)


async def ack(
    metadata: MetadataStore,
    member: MemberRef,
    ids: Any,
    *,
    heartbeat: bool = True,
    clock: Clock = SYSTEM_CLOCK,
) -> Settlement:
    """Acknowledge messages; answered once the acks and the committed offset are durable. A lease whose
    deadline has passed on ``clock`` is ``ACK_EXPIRED``."""
    settled = await _settle_ids(
        metadata,
        member,
        validate_ids(ids),
        lambda now: LeaseSettlement(acked=True),
        commit=True,
        heartbeat=heartbeat,
        clock=clock,
    )
    if settled.ids and settled.breaker:
        breaker.outcomes(metadata).record(settled.group_id, acked=len(settled.ids))
    return settled


async def nack(
    metadata: MetadataStore,
    log: LogEngine,
    member: MemberRef,
    message_id: Any,
    delay_ms: int | None = None,
    reason: str | None = None,
    *,
    dead_letter: bool = False,
    clock: Clock = SYSTEM_CLOCK,
) -> Settlement:
    """Give a message back: it is redelivered (to the partition's owner) after ``delay_ms`` — at once by
    default, or, when the group has a DLQ, after the retry schedule's wait; a nack of the last allowed
    attempt moves the message to the DLQ instead, and so does one with ``dead_letter`` at once, whatever
    retries remain (400 ``INVALID_REQUEST`` on ``deadLetter`` when the group has no DLQ)."""
    if reason is not None and "\x00" in reason:  # stored with the lease: text a database can hold
        raise InvalidRequest.field("reason", "may not contain the NUL character")
    if not isinstance(dead_letter, bool):
        raise InvalidRequest.field("deadLetter", "expected true or false")
    why = (reason or dead_letters.NACK_REASON)[:1024]
    topic = member.topic

    async def then(uow: MetadataUnit, view: CallerView, done: set[Key], now: int) -> None:
        await retries.after_nack(
            uow, log, topic, view, done, now, delay_ms=delay_ms, why=why, dead_letter=dead_letter
        )

    settled = await _settle_ids(
        metadata,
        member,
        [message_id],
        lambda now: LeaseSettlement(deadline_ms=now + (delay_ms or 0), released=True, reason=why),
        commit=False,
        then=then,
        clock=clock,
    )
    if settled.ids and settled.breaker:
        breaker.outcomes(metadata).record(settled.group_id, failed=len(settled.ids))
    return settled


async def extend(
    metadata: MetadataStore, member: MemberRef, ids: Any, seconds: float, *, clock: Clock = SYSTEM_CLOCK
) -> Settlement:
    """Move the ack deadline of the caller's messages to ``seconds`` from now."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 1 <= seconds <= MAX_EXTEND_SECONDS
    ):
        raise InvalidRequest.field("seconds", f"must be a number between 1 and {MAX_EXTEND_SECONDS}")
    return await _settle_ids(
        metadata,
        member,
        validate_ids(ids),
        lambda now: LeaseSettlement(deadline_ms=now + round(seconds * 1000)),
        commit=False,
        clock=clock,
    )
