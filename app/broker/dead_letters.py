"""Dead-letter queues: the retry schedule, dead-lettering, and inspect / replay / delete / audit.

A group has a DLQ once its config sets ``deadLetter``. Every failed attempt (a nack, or an ack timeout)
is then retried after ``retryDelay × 2^(n−1)`` for the n-th retry (±10 % jitter, capped at one hour; a
nack's own ``delay`` overrides); the schedule is the lease row's deadline, so it survives restarts and
crashes. After ``maxRetries`` retries the next failure moves the message to the DLQ:

- its copy is appended to the group's DLQ log (engine topic ``dlq_<group id>``): the original data, key,
  timestamp and headers, and in the record's metadata the failure — topic, partition, offset, reason,
  retry count, time, and every failed attempt (``attempts``: the history its lease row kept, then this
  last one; ``delivery/failures.py``);
- then one metadata transaction inserts the ``dead_letters`` row (what makes it a member of the DLQ) and
  acks the lease, which moves the group's committed offset past it.

A crash between the two leaves an unreferenced copy in the DLQ log and the lease pending: the message is
retried and dead-lettered again, never both pending and in the DLQ. A replay removes the row and gives the
group a fresh lease (attempt back at 1, a fresh retry budget) in one transaction; the copy stays behind as
the source to deliver from if retention removed the original. Only the failing group sees a replay.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.broker import alerts, durations, message_ids
from app.broker.dead_letter_logs import log_id
from app.broker.delivery import failures as failed_attempts
from app.broker.errors import InvalidRequest, MessageNotFound
from app.broker.groups import get_group
from app.broker.messages import decode_headers
from app.broker.topics import TopicRef, decode_cursor, encode_cursor
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.kit.digits import is_ascii_digits
from app.stores.log.protocol import LogEngine, Record, RecordIn, TopicLogConfig
from app.stores.metadata.protocol import DeadLetterAuditRow, DeadLetterRow, MetadataStore, MetadataUnit

TIMEOUT_REASON = "ack timeout"
NACK_REASON = "nack"
RETRY_CAP_MS = 3_600_000
JITTER = 0.10
MAX_PAGE = 1000
REPLAY_CHUNK = 500
MAX_REPLAY_RATE = 100_000
_READ_BYTES = 8 << 20

Key = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Policy:
    """A group's ``deadLetter`` config, parsed."""

    max_retries: int
    retry_delay_ms: int
    alert_threshold: int

    @classmethod
    def of(cls, config: dict[str, Any] | None) -> Policy | None:
        if config is None:
            return None
        return cls(
            int(config["maxRetries"]),
            durations.parse(config["retryDelay"], "deadLetter.retryDelay", durations.RETRY_DELAY),
            int(config["alertThreshold"]),
        )

    def exhausted(self, attempt: int) -> bool:
        """Whether a failure of delivery ``attempt`` is the last one: ``attempt − 1`` retries were made."""
        return attempt - 1 >= self.max_retries


def retry_delay_ms(policy: Policy, retry: int, rng: Callable[[], float] = random.random) -> int:
    """The wait before the ``retry``-th retry: ``retryDelay × 2^(retry−1)``, ±10 % jitter, at most 1 h."""
    base = min(policy.retry_delay_ms * (1 << min(max(retry - 1, 0), 32)), 2 * RETRY_CAP_MS)
    return min(RETRY_CAP_MS, round(base * (1 + JITTER * (2 * rng() - 1))))


@dataclass(frozen=True, slots=True)
class Failure:
    """A message whose last allowed attempt failed, on its way to the DLQ."""

    partition: int
    offset: int
    record: Record
    reason: str
    retry_count: int


@dataclass(frozen=True, slots=True)
class Actor:
    """Who replays or deletes: an API key or a dashboard user."""

    type: str
    id: str


async def read_offsets(
    log: LogEngine, topic_id: str, partition: int, offsets: Sequence[int]
) -> dict[int, Record]:
    """The records at ``offsets`` (ascending) of one partition, read as one range when it is compact."""
    found: dict[int, Record] = {}
    if not offsets:
        return found
    lo, hi = offsets[0], offsets[-1]
    if hi - lo < 4 * MAX_PAGE:
        records = await log.read(topic_id, partition, lo, max_records=hi - lo + 1, max_bytes=_READ_BYTES)
        wanted = set(offsets)
        for record in records:
            if record.offset in wanted:
                found[record.offset] = record
        last = records[-1].offset if records else lo - 1
        missing = [o for o in offsets if o not in found and o > last]
    else:
        missing = list(offsets)
    for offset in missing:
        one = await log.read(topic_id, partition, offset, max_records=1, max_bytes=1)
        if one and one[0].offset == offset:
            found[offset] = one[0]
    return found


async def records_for(
    log: LogEngine, topic: TopicRef, group_id: str, wanted: Sequence[tuple[int, int, int | None]]
) -> dict[Key, Record]:
    """The records of ``(partition, offset, replay_offset)``: from the topic's log, else (a replayed dead
    letter whose original retention removed) from its copy in the DLQ log, under its original offset."""
    by_partition: dict[int, list[int]] = defaultdict(list)
    for p, o, _ in wanted:
        by_partition[p].append(o)
    found: dict[Key, Record] = {}
    for p, offsets in by_partition.items():
        for o, record in (await read_offsets(log, topic.id, p, sorted(offsets))).items():
            found[(p, o)] = record
    copies = {d: (p, o) for p, o, d in wanted if (p, o) not in found and d is not None}
    if copies:
        try:
            read = await read_offsets(log, log_id(group_id), 0, sorted(copies))
        except Exception:  # noqa: BLE001 - no DLQ log any more: nothing left to deliver
            read = {}
        for d, record in read.items():
            p, o = copies[d]
            found[(p, o)] = record._replace(offset=o)
    return found


def _copy_of(
    topic: TopicRef, failure: Failure, failed_at_ms: int, attempts: Sequence[tuple[int, str]] = ()
) -> RecordIn:
    headers, _ = decode_headers(failure.record.headers)
    meta = {
        "h": headers,
        "dlq": {
            "topicId": topic.id,
            "topic": topic.name,
            "partition": failure.partition,
            "offset": failure.offset,
            "messageId": message_ids.encode(
                topic.id, failure.partition, failure.offset, prefix=topic.id_prefix
            ),
            "reason": failure.reason,
            "retryCount": failure.retry_count,
            "failedAt": failed_at_ms,
            "attempts": list(attempts) or [(failed_at_ms, failure.reason)],
        },
    }
    return RecordIn(failure.record.value, failure.record.key, orjson.dumps(meta), failure.record.timestamp_ms)


async def dead_letter(
    uow: MetadataUnit,
    log: LogEngine,
    topic: TopicRef,
    group_id: str,
    failures: Sequence[Failure],
    *,
    now: int | None = None,
) -> None:
    """Move messages to the group's DLQ, in the caller's unit of work (see the module docstring).
    ``now`` is when they failed: the caller's time of the decision (default: the system clock)."""
    if not failures:
        return
    now = now_ms() if now is None else now
    dead_letter_log = log_id(group_id)
    # One read for the batch (dead-lettering is no hot path): the failed attempts the lease rows kept.
    kept = await uow.leases.failures_of(group_id, [(f.partition, f.offset) for f in failures])
    copies = [
        _copy_of(
            topic, f, now, [*failed_attempts.history(kept.get((f.partition, f.offset))), (now, f.reason)]
        )
        for f in failures
    ]
    await log.create_topic(dead_letter_log, 1, TopicLogConfig())
    first = (await log.append(dead_letter_log, {0: copies}))[0]
    await uow.dead_letters.add(
        group_id,
        [
            DeadLetterRow(f.partition, f.offset, first + i, f.reason, f.retry_count, now)
            for i, f in enumerate(failures)
        ],
    )
    await uow.leases.mark_acked(group_id, [(f.partition, f.offset) for f in failures])
    await uow.partitions.advance_committed(group_id, sorted({f.partition for f in failures}))
    await _check_alert(uow, group_id)


async def _check_alert(uow: MetadataUnit, group_id: str) -> None:
    """One alert per crossing of ``alertThreshold``; re-armed once the depth falls below it."""
    repo = uow.dead_letters
    armed, config, project_id, environment, topic_name, group_name = await repo.alert_state(group_id)
    policy = Policy.of(config)
    if policy is None:
        return
    depth = await repo.depth(group_id)
    if armed and depth >= policy.alert_threshold:
        await repo.set_alert_armed(group_id, False)
        await _raise_alert(
            uow,
            project_id,
            environment,
            {"topic": topic_name, "group": group_name, "depth": depth, "threshold": policy.alert_threshold},
        )
    elif not armed and depth < policy.alert_threshold:
        await repo.set_alert_armed(group_id, True)


async def _raise_alert(uow: MetadataUnit, project_id: str, environment: str, data: dict[str, Any]) -> None:
    """Queue the ``dlq.threshold_reached`` event for the topic's environment's endpoint (same unit of
    work)."""
    await alerts.enqueue(
        uow,
        project_id=project_id,
        environment=environment,
        event_type="dlq.threshold_reached",
        data=data,
    )


# the API ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    entries: list[bytes]
    total: int
    next_cursor: str | None

    def render(self) -> bytes:
        cursor = orjson.dumps(self.next_cursor)
        return (
            b'{"data":['
            + b",".join(self.entries)
            + b'],"total":'
            + str(self.total).encode()
            + b',"nextCursor":'
            + cursor
            + b"}"
        )


def _attempts_of(record: Record | None, row: DeadLetterRow) -> list[tuple[int, str]]:
    """The failed attempts a dead letter's copy holds; a copy from before histories knows only the last."""
    kept: Any = None
    if record is not None and record.headers:
        kept = (orjson.loads(record.headers).get("dlq") or {}).get("attempts")
    if not kept:
        return [(row.failed_at_ms, row.reason)]
    return [(int(at), str(reason)) for at, reason in kept]


def _entry(topic: TopicRef, row: DeadLetterRow, record: Record | None) -> bytes:
    headers: dict[str, str] = {}
    if record is not None:
        headers, _ = decode_headers(record.headers)
    attempts = _attempts_of(record, row)
    head = {
        "messageId": message_ids.encode(topic.id, row.partition, row.offset, prefix=topic.id_prefix),
        "key": record.key.decode() if record is not None and record.key is not None else None,
        "headers": headers,
        "partition": row.partition,
        "offset": row.offset,
        "reason": row.reason,
        "retryCount": row.retry_count,
        "failedAt": isoformat_ms(row.failed_at_ms),
        "firstFailedAt": isoformat_ms(attempts[0][0]),
        "attempts": failed_attempts.render(attempts),
    }
    value = record.value if record is not None else b"null"
    return orjson.dumps(head)[:-1] + b',"data":' + value + b"}"


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest.field("limit", f"must be between 1 and {MAX_PAGE}")


def _after(cursor: str | None) -> int | None:
    if not cursor:
        return None
    value = decode_cursor(cursor)
    if not is_ascii_digits(value):
        raise InvalidRequest.field("cursor", "not a cursor returned by this API")
    return int(value)


async def inspect(
    uow: MetadataUnit,
    log: LogEngine,
    topic: TopicRef,
    group_name: str,
    *,
    limit: int = 50,
    cursor: str | None = None,
) -> DeadLetterPage:
    """One page of the DLQ, oldest dead letter first, with the DLQ's depth."""
    _check_limit(limit)
    after = _after(cursor)
    group = await get_group(uow, topic, group_name)
    rows = await uow.dead_letters.page(group.id, after, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    total = await uow.dead_letters.depth(group.id)
    copies: dict[int, Record] = {}
    if rows:
        try:
            copies = await read_offsets(log, log_id(group.id), 0, [r.dead_letter_offset for r in rows])
        except Exception:  # noqa: BLE001 - a DLQ log lost with the disk: list what the rows know
            copies = {}
    entries = [_entry(topic, row, copies.get(row.dead_letter_offset)) for row in rows]
    next_cursor = encode_cursor(str(rows[-1].dead_letter_offset)) if more and rows else None
    return DeadLetterPage(entries, total, next_cursor)


def _key_of(topic: TopicRef, message_id: str) -> Key:
    where = message_ids.decode(message_id)  # malformed: INVALID_REQUEST
    if where.topic_id != topic.id:
        raise MessageNotFound(f"Message '{message_id}' is not in this topic's DLQ.")
    if not 0 <= where.partition < topic.partitions:
        raise InvalidRequest.field("messageId", f"the topic has partitions 0–{topic.partitions - 1}")
    return where.partition, where.offset


def _audit_id() -> str:
    # Sortable by time (hex milliseconds), then random: the audit list pages newest first by id.
    return f"aud_{now_ms():012x}{random.getrandbits(40):010x}"


async def _record(
    uow: MetadataUnit,
    group_id: str,
    action: str,
    actor: Actor,
    *,
    message_id: str | None = None,
    count: int | None = None,
) -> None:
    await uow.dead_letters.record(
        DeadLetterAuditRow(
            id=_audit_id(),
            group_id=group_id,
            action=action,
            message_id=message_id,
            count=count,
            actor_type=actor.type,
            actor_id=actor.id,
            at=utcnow(),
        )
    )


async def _requeue(uow: MetadataUnit, group_id: str, rows: Sequence[DeadLetterRow]) -> None:
    """Dead letters taken out of the DLQ go back to the group: a fresh lease, due now, attempt 1 next."""
    await uow.leases.add_replayed_leases(
        group_id, now_ms(), [(r.partition, r.offset, r.dead_letter_offset) for r in rows]
    )
    await uow.partitions.advance_committed(group_id, sorted({r.partition for r in rows}))


async def _take_one(
    metadata: MetadataStore,
    topic: TopicRef,
    group_name: str,
    message_id: str,
    actor: Actor,
    action: str,
) -> None:
    """Take one message out of the group's DLQ (``replay``: back to the group), with its audit entry."""
    key = _key_of(topic, message_id)
    async with metadata.unit() as uow:
        group = await get_group(uow, topic, group_name, for_update=True)
        taken = await uow.dead_letters.take(group.id, [key])
        if not taken:
            raise MessageNotFound(f"Message '{message_id}' is not in the DLQ of group '{group_name}'.")
        if action == "replay":
            await _requeue(uow, group.id, taken)
        await _record(uow, group.id, action, actor, message_id=message_id)
        await _check_alert(uow, group.id)


async def replay(
    metadata: MetadataStore, topic: TopicRef, group_name: str, message_id: str, actor: Actor
) -> str:
    """Send one dead letter back to the failing group, under its original id; recorded in the audit."""
    await _take_one(metadata, topic, group_name, message_id, actor, "replay")
    return message_id


async def delete(
    metadata: MetadataStore, topic: TopicRef, group_name: str, message_id: str, actor: Actor
) -> None:
    """Drop one dead letter for good (its group's committed offset already moved past it)."""
    await _take_one(metadata, topic, group_name, message_id, actor, "delete")


def validate_rate(rate: Any) -> float | None:
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= MAX_REPLAY_RATE:
        raise InvalidRequest.field(
            "rate", f"must be a number of messages per second, above 0 and at most {MAX_REPLAY_RATE}"
        )
    return float(rate)


async def replay_all(
    metadata: MetadataStore, topic: TopicRef, group_name: str, actor: Actor, *, rate: float | None = None
) -> int:
    """Send every dead letter present when the call starts back to the group, in chunks (never the whole
    DLQ in memory), at most ``rate`` per second when given; the count replayed."""
    async with metadata.unit(readonly=True) as uow:
        group = await get_group(uow, topic, group_name)
        group_id = group.id
        last = await uow.dead_letters.max_dead_letter_offset(group_id)
    replayed = 0
    chunk = REPLAY_CHUNK if rate is None else max(1, min(REPLAY_CHUNK, int(rate)))
    started = time.monotonic()
    after: int | None = None
    while last is not None:
        async with metadata.unit() as uow:
            rows = [
                r for r in await uow.dead_letters.page(group_id, after, chunk) if r.dead_letter_offset <= last
            ]
            if not rows:
                break
            taken = await uow.dead_letters.take(group_id, [(r.partition, r.offset) for r in rows])
            await _requeue(uow, group_id, taken)
            await _check_alert(uow, group_id)
        replayed += len(taken)
        after = rows[-1].dead_letter_offset
        if rate is not None:  # throttle: never ahead of ``rate`` messages per second
            ahead = replayed / rate - (time.monotonic() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)
    async with metadata.unit() as uow:
        await _record(uow, group_id, "replay_all", actor, count=replayed)
    return replayed


@dataclass(frozen=True, slots=True)
class AuditPage:
    entries: list[dict[str, Any]]
    next_cursor: str | None


async def audit(
    uow: MetadataUnit, topic: TopicRef, group_name: str, *, limit: int = 50, cursor: str | None = None
) -> AuditPage:
    """The replays and deletes of a group's DLQ, newest first."""
    _check_limit(limit)
    before = decode_cursor(cursor) if cursor else None
    group = await get_group(uow, topic, group_name)
    rows = await uow.dead_letters.audit_page(group.id, before, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    entries = []
    for row in rows:
        entry: dict[str, Any] = {"id": row.id, "action": row.action}
        if row.message_id is not None:
            entry["messageId"] = row.message_id
        if row.count is not None:
            entry["count"] = row.count
        entry["actor"] = {"type": row.actor_type, "id": row.actor_id}
        entry["at"] = isoformat_ms(row.at)
        entries.append(entry)
    return AuditPage(entries, encode_cursor(rows[-1].id) if more and rows else None)
