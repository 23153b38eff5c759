"""Consumer groups: config (upsert with merge), list and describe with lag, delete.

A group exists from its first config ``PUT`` or its first join (or WebSocket consume); creating one counts
against the topic's groups quota (``quotas.py``). Its config durations are kept as the strings given
(``"30s"``) and echoed back; ``deadLetter`` is stored with its defaults filled in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.broker import breaker, dead_letter_logs, durations, filters, pauses, push_groups, quotas
from app.broker.errors import GroupActive, GroupNotFound, InvalidRequest
from app.broker.quotas import Quota
from app.broker.topics import TopicRef
from app.kit.clock import now_ms, utcnow
from app.kit.ids import new_id
from app.stores.log.protocol import LogEngine, LogEngineError
from app.stores.metadata.protocol import GroupConfig, GroupRow, MetadataStore, MetadataUnit, PartitionState

DEFAULT_ACK_TIMEOUT = "30s"
DEFAULT_SESSION_TIMEOUT = "10s"
DEAD_LETTER_DEFAULTS: dict[str, Any] = {"maxRetries": 5, "retryDelay": "30s", "alertThreshold": 100}
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,248}$")
_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class PartitionLag:
    partition: int
    consumer: str | None
    current: int
    latest: int
    matching: int | None = None  # with a filter: the messages from ``current`` on that match it

    @property
    def lag(self) -> int:
        if self.matching is not None:
            return self.matching
        return max(0, self.latest - self.current)


@dataclass(frozen=True, slots=True)
class GroupSummary:
    name: str
    consumers: int
    lag: int


@dataclass(frozen=True, slots=True)
class GroupDetail:
    name: str
    topic: str
    consumers: int
    partitions: list[PartitionLag]
    config: dict[str, Any]
    pause: pauses.PauseState = field(default_factory=lambda: pauses.PauseState(False))
    expired: int = 0  # messages whose TTL passed before delivery, since the group's creation


def validate_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise InvalidRequest.field(
            "group", "1–249 chars of letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def config_of(group: GroupRow) -> dict[str, Any]:
    return {
        "ackTimeout": group.ack_timeout,
        "sessionTimeout": group.session_timeout,
        "deadLetter": _with_breaker(group.dead_letter),
        "maxInFlight": group.max_in_flight,
        "rate": group.rate,
        "filter": group.filter,
    }


def _with_breaker(dead_letter: dict[str, Any] | None) -> dict[str, Any] | None:
    # A DLQ configured before breakers existed has the default one (``breaker.BreakerConfig.of``).
    if dead_letter is None or "breaker" in dead_letter:
        return dead_letter
    return {**dead_letter, "breaker": dict(breaker.DEFAULTS)}


MAX_IN_FLIGHT = 100_000


def parse_max_in_flight(value: Any) -> int | None:
    """``maxInFlight`` of a config PUT: None removes it."""
    if value is not None and (type(value) is not int or not 1 <= value <= MAX_IN_FLIGHT):
        raise InvalidRequest.field("maxInFlight", f"must be an integer between 1 and {MAX_IN_FLIGHT} or null")
    return value


def parse_rate(value: Any) -> float | None:
    """``rate`` of a config PUT (messages per second, > 0): None removes it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1_000_000:
        raise InvalidRequest.field(
            "rate", "must be a number of messages per second above 0 (at most 1000000) or null"
        )
    return float(value)


def parse_dead_letter(value: Any) -> dict[str, Any] | None:
    """``deadLetter`` of a config PUT: None removes it; omitted fields take their defaults."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest.field("deadLetter", "expected an object or null")
    unknown = set(value) - set(DEAD_LETTER_DEFAULTS) - {"breaker"}
    if unknown:
        raise InvalidRequest.field(f"deadLetter.{min(unknown)}", "unknown field")
    merged = {**DEAD_LETTER_DEFAULTS, **{k: v for k, v in value.items() if v is not None}}
    # ``breaker: null`` turns the breaker off; omitted, it takes its defaults.
    merged["breaker"] = breaker.parse(value["breaker"]) if "breaker" in value else dict(breaker.DEFAULTS)
    retries, threshold = merged["maxRetries"], merged["alertThreshold"]
    if type(retries) is not int or not 0 <= retries <= 100:
        raise InvalidRequest.field("deadLetter.maxRetries", "must be an integer between 0 and 100")
    if type(threshold) is not int or not 1 <= threshold <= 1_000_000:
        raise InvalidRequest.field("deadLetter.alertThreshold", "must be an integer between 1 and 1000000")
    durations.parse(merged["retryDelay"], "deadLetter.retryDelay", durations.RETRY_DELAY)
    return merged


async def ensure_group(uow: MetadataUnit, topic: TopicRef, name: str) -> GroupRow:
    """The group, created with the default config if it does not exist; its row locked for this unit of work.

    Creating one counts against the topic's groups quota (403 ``QUOTA_EXCEEDED``, nothing made): the
    topic row is locked first, so concurrent creators of groups of one topic count each other's."""
    repo = uow.groups
    group = await repo.get(topic.id, name, for_update=True)
    if group is not None:
        return group
    limits = await quotas.lock_topic(uow, topic.id, topic.name)
    # A creator we waited for may have made this very group: then it is not one more.
    group = await repo.get(topic.id, name, for_update=True)
    if group is not None:
        return group
    quotas.check(Quota.groups, limits, await repo.count_for_topic(topic.id))
    now = utcnow()
    group_id = new_id("grp")
    await repo.insert_if_absent(
        GroupRow(
            id=group_id,
            topic_id=topic.id,
            name=name,
            generation=0,
            partition_count=topic.partitions,
            ack_timeout=DEFAULT_ACK_TIMEOUT,
            ack_timeout_ms=durations.parse(DEFAULT_ACK_TIMEOUT, "ackTimeout", durations.ACK_TIMEOUT),
            session_timeout=DEFAULT_SESSION_TIMEOUT,
            session_timeout_ms=durations.parse(
                DEFAULT_SESSION_TIMEOUT, "sessionTimeout", durations.SESSION_TIMEOUT
            ),
            dead_letter=None,
            created_at=now,
            updated_at=now,
        )
    )
    group = await repo.get(topic.id, name, for_update=True)
    assert group is not None
    if group.id == group_id:  # ours, not a concurrent creator's
        await uow.partitions.add_partitions(group.id, range(topic.partitions))
    return group


class KnownGroups:
    """Groups this process saw exist within the last ``ttl`` seconds, by topic id and name.

    A WebSocket consume makes its group before the upgrade (``ensure_exists``); a consumer reconnecting to
    a group seen meanwhile then costs no metadata read there (push connects come in bursts, while the
    pool is busy with their members' joins). A group deleted within ``ttl`` is made again by the join
    after the upgrade, where a quota refusal is an ``error`` frame instead of the HTTP 403."""

    def __init__(self, ttl: float = 5.0) -> None:
        self._ttl = ttl
        self._seen: dict[tuple[str, str], float] = {}

    def __contains__(self, key: tuple[str, str]) -> bool:
        at = self._seen.get(key)
        return at is not None and time.monotonic() - at < self._ttl

    def add(self, key: tuple[str, str]) -> None:
        if len(self._seen) > 50_000:
            self._seen.clear()
        self._seen[key] = time.monotonic()


async def ensure_exists(
    metadata: MetadataStore, topic: TopicRef, name: str, known: KnownGroups | None = None
) -> None:
    """Create the group (default config) unless it exists, in a unit of work of its own: how a WebSocket
    consume makes its group before the upgrade, so a quota refusal is an HTTP answer, not a frame."""
    if known is not None and (topic.id, name) in known:
        return
    async with metadata.unit(readonly=True) as uow:
        exists = await uow.groups.get(topic.id, name) is not None
    if not exists:
        async with metadata.unit() as uow:
            await ensure_group(uow, topic, name)
    if known is not None:
        known.add((topic.id, name))


async def get_group(uow: MetadataUnit, topic: TopicRef, name: str, *, for_update: bool = False) -> GroupRow:
    group = await uow.groups.get(topic.id, name, for_update=for_update)
    if group is None:
        raise GroupNotFound(f"No consumer group '{name}' on topic '{topic.name}'.")
    return group


async def current_filter(uow: MetadataUnit, topic: TopicRef, name: str) -> str | None:
    """The group's filter now (None also when the group does not exist yet)."""
    group = await uow.groups.get(topic.id, name)
    return group.filter if group is not None else None


async def upsert_config(
    uow: MetadataUnit,
    topic: TopicRef,
    name: str,
    *,
    ack_timeout: str | None = None,
    session_timeout: str | None = None,
    dead_letter: Any = _UNSET,
    max_in_flight: Any = _UNSET,
    rate: Any = _UNSET,
    filter: Any = _UNSET,
) -> GroupRow:
    """Create the group or merge the given fields into its config (``dead_letter=None`` removes the DLQ;
    ``max_in_flight``, ``rate`` and ``filter`` likewise remove theirs with None)."""
    validate_name(name)
    ack_ms = (
        durations.parse(ack_timeout, "ackTimeout", durations.ACK_TIMEOUT) if ack_timeout is not None else None
    )
    session_ms = (
        durations.parse(session_timeout, "sessionTimeout", durations.SESSION_TIMEOUT)
        if session_timeout is not None
        else None
    )
    letter = parse_dead_letter(dead_letter) if dead_letter is not _UNSET else _UNSET
    flow_fields: dict[str, Any] = {}
    if max_in_flight is not _UNSET:
        flow_fields["max_in_flight"] = parse_max_in_flight(max_in_flight)
    if rate is not _UNSET:
        flow_fields["rate"] = parse_rate(rate)
    if filter is not _UNSET:
        flow_fields["filter"] = None if filter is None else filters.validate(filter)
    group = await ensure_group(uow, topic, name)
    changes: dict[str, Any] = dict(flow_fields)
    if ack_timeout is not None and ack_ms is not None:
        changes.update(ack_timeout=ack_timeout, ack_timeout_ms=ack_ms)
    if session_timeout is not None and session_ms is not None:
        changes.update(session_timeout=session_timeout, session_timeout_ms=session_ms)
    if letter is not _UNSET:
        changes["dead_letter"] = letter
    group = dataclasses.replace(group, **changes, updated_at=utcnow())
    config = GroupConfig(**{f.name: getattr(group, f.name) for f in dataclasses.fields(GroupConfig)})
    await uow.groups.set_config(group.id, config, group.updated_at)
    return group


LAG_SCAN_LIMIT = 10_000  # records of a partition a filtered group's lag reads; the rest is estimated
_LAG_SCAN_BYTES = 8 << 20


async def matching_lag(
    log: LogEngine, topic: TopicRef, partition: int, current: int, latest: int, predicate: filters.Predicate
) -> int:
    """The messages in ``[current, latest)`` that match a group's filter: counted over the first
    ``LAG_SCAN_LIMIT`` of them (and 8 MiB per read), the rest estimated at the ratio found there."""
    counted = matched = 0
    offset = current
    while offset < latest and counted < LAG_SCAN_LIMIT:
        records = await log.read(
            topic.id,
            partition,
            offset,
            max_records=min(1000, LAG_SCAN_LIMIT - counted),
            max_bytes=_LAG_SCAN_BYTES,
        )
        if not records:
            break
        counted += len(records)
        matched += sum(1 for r in records if predicate(r.key, r.headers))
        offset = records[-1].offset + 1
    rest = max(0, latest - offset)
    if rest and counted:
        matched += round(rest * matched / counted)
    return matched


async def partition_lags(
    uow: MetadataUnit, log: LogEngine, topic: TopicRef, group_id: str, filter: str | None = None
) -> list[PartitionLag]:
    """Per partition: live owner, ``current`` (the earliest retained offset while nothing is committed), lag
    (with a ``filter``: only the messages matching it, see ``matching_lag``)."""
    predicate = filters.predicate_of(filter)
    partitions = await uow.partitions.partitions(group_id)
    state: dict[int, PartitionState] = {s.partition: s for s in partitions}
    live = set(await uow.groups.live_members(group_id, now_ms()))
    out = []
    for p in range(topic.partitions):
        info = await log.partition_info(topic.id, p)
        row = state.get(p)
        committed = row.committed if row is not None and row.committed is not None else info.earliest_offset
        current = max(committed, info.earliest_offset)
        out.append(
            PartitionLag(
                p,
                row.member_id if row is not None and row.member_id in live else None,
                current,
                info.latest_offset,
                None
                if predicate is None
                else await matching_lag(log, topic, p, current, info.latest_offset, predicate),
            )
        )
    return out


async def read_positions(
    uow: MetadataUnit, log: LogEngine, topic: TopicRef, group_id: str
) -> list[tuple[int, int]]:
    """Per partition, where the group reads next (a partition never started: its earliest offset): where
    a filter changed now starts to decide (``filterAppliesFrom`` of the config PUT)."""
    state = {s.partition: s for s in await uow.partitions.partitions(group_id)}
    out = []
    for p in range(topic.partitions):
        row = state.get(p)
        if row is not None and row.position is not None:
            out.append((p, row.position))
        else:
            out.append((p, (await log.partition_info(topic.id, p)).earliest_offset))
    return out


async def list_groups(uow: MetadataUnit, log: LogEngine, topic: TopicRef) -> list[GroupSummary]:
    rows = await uow.groups.list_for_topic(topic.id)
    counts = await uow.groups.live_member_counts([g.id for g in rows], now_ms())
    out = []
    for group in rows:
        lags = await partition_lags(uow, log, topic, group.id, group.filter)
        out.append(GroupSummary(group.name, counts.get(group.id, 0), sum(p.lag for p in lags)))
    return out


async def describe_group(uow: MetadataUnit, log: LogEngine, topic: TopicRef, name: str) -> GroupDetail:
    group = await get_group(uow, topic, name)
    counts = await uow.groups.live_member_counts([group.id], now_ms())
    lags = await partition_lags(uow, log, topic, group.id, group.filter)
    expired = await uow.expiry.expired(group.id)
    return GroupDetail(
        group.name,
        topic.name,
        counts.get(group.id, 0),
        lags,
        config_of(group),
        pauses.state_of(group),
        expired,
    )


async def require_stopped(uow: MetadataUnit, group: GroupRow, what: str) -> None:
    # A push group's URL workers are the service's own members, not connected consumers.
    live = [m for m in await uow.groups.live_members(group.id, now_ms()) if not push_groups.is_worker(m)]
    if live:
        raise GroupActive(
            f"Group '{group.name}' has {len(live)} connected member{'s' if len(live) != 1 else ''}; "
            f"stop them before {what}."
        )


async def delete_group(uow: MetadataUnit, topic: TopicRef, name: str) -> str:
    """Delete a stopped group with its offsets, leases and DLQ rows; 409 ``GROUP_ACTIVE`` while members
    are connected. Returns its id: the caller removes its DLQ log once this unit of work committed."""
    group = await get_group(uow, topic, name, for_update=True)
    await require_stopped(uow, group, "deleting it")
    await uow.groups.remove(group.id)
    return group.id


async def delete_group_and_dead_letters(
    metadata: MetadataStore, log: LogEngine, topic: TopicRef, name: str
) -> None:
    """``delete_group``, then (committed) its DLQ log; a crash between leaves the log to the startup sweep."""
    async with metadata.unit() as uow:
        group_id = await delete_group(uow, topic, name)
    with contextlib.suppress(LogEngineError):
        await log.delete_topic(dead_letter_logs.log_id(group_id))


@dataclass(slots=True)
class GroupStats:
    """What ``/metrics`` exports per group: lag, age of the oldest unacked message, messages in flight."""

    project_id: str
    environment: str
    topic: str
    group: str
    lag: int = 0
    oldest_unacked_seconds: float = 0.0
    in_flight: int = 0
    dead_letter_depth: int = 0
    expired: int = 0  # messages whose TTL passed before delivery, since the group's creation


async def delivery_stats(
    uow: MetadataUnit, log: LogEngine, in_memory: Mapping[str, int] | None = None
) -> list[GroupStats]:
    """Every group's stats, from two aggregate metadata queries and the log's partition ends.
    ``in_memory``: leases push members of this process hold in memory, per group id.

    The oldest unacked message of a partition is the one at the group's ``current`` offset (everything
    below is acked); its age is read from that one record's timestamp, once per lagging partition.
    """
    rows = await uow.partitions.all_partition_offsets()
    in_flight = await uow.leases.unacked_counts()
    depths = await uow.dead_letters.depths()
    expired = await uow.expiry.expired_by_group()
    now = now_ms()
    stats: dict[str, GroupStats] = {}
    for project_id, environment, topic_id, topic, group_id, group, partition, committed in rows:
        entry = stats.get(group_id)
        if entry is None:
            entry = stats[group_id] = GroupStats(
                project_id,
                environment,
                topic,
                group,
                in_flight=in_flight.get(group_id, 0) + (in_memory or {}).get(group_id, 0),
                dead_letter_depth=depths.get(group_id, 0),
                expired=expired.get(group_id, 0),
            )
        try:
            info = await log.partition_info(topic_id, partition)
        except LogEngineError:  # a topic being deleted: its logs may be gone already
            continue
        current = max(committed if committed is not None else info.earliest_offset, info.earliest_offset)
        if current >= info.latest_offset:
            continue
        entry.lag += info.latest_offset - current
        oldest = await log.read(topic_id, partition, current, max_records=1, max_bytes=1)
        if oldest:
            age = max(0.0, (now - oldest[0].timestamp_ms) / 1000)
            entry.oldest_unacked_seconds = max(entry.oldest_unacked_seconds, age)
    return list(stats.values())
