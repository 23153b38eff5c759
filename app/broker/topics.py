"""Topics: named, partitioned, retained logs in one project environment.

The metadata row is the truth about a topic; its messages live in the log engine under the topic's id.
Creation writes the engine's logs before the row commits, and deletion removes the row before the logs,
so a failure in between leaves at worst orphan files (swept at startup), never a topic without a log.

Callers outside the domain see a topic as one of two frozen values: a ``TopicView`` (the store's
``TopicRow``: what the topic calls answer and the dashboard shows) or a ``TopicRef`` (what publishing,
reading and delivery need, resolved by name through the ``TopicDirectory`` without a metadata read per
request).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import enum
import re
import time
from dataclasses import dataclass

from app.broker import dead_letter_logs, message_ids, quotas
from app.broker.errors import InvalidRequest, TopicAlreadyExists, TopicNotFound
from app.broker.quotas import Quota
from app.kit.clock import utcnow
from app.kit.ids import new_id
from app.kit.singleflight import SingleFlight
from app.stores.errors import AlreadyExists
from app.stores.log.protocol import (
    LogEngine,
    LogEngineError,
    PartitionInfo,
    ReplicasUnavailable,
    TopicLogConfig,
)
from app.stores.metadata.protocol import MetadataStore, MetadataUnit, TopicRow

MAX_PARTITIONS = 256
# Replica counts a topic may ask for (a quorum of an odd count survives losing a minority); the engine
# in use may offer fewer (``LogEngine.replica_choices``).
REPLICA_COUNTS = (1, 3, 5)
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,248}$")
_RETENTION = re.compile(r"^([1-9][0-9]{0,6})(m|h|d)$")
UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}
RETENTION_MIN_MS = 60_000
RETENTION_MAX_MS = 365 * 86_400_000


class Delivery(enum.StrEnum):
    exactly_once = "exactly-once"
    at_least_once = "at-least-once"


@dataclass(frozen=True, slots=True)
class Scope:
    """The project environment a caller acts in; nothing crosses it."""

    project_id: str
    environment: str


@dataclass(frozen=True, slots=True)
class TopicRef:
    """What the hot path needs of a topic, cached briefly."""

    id: str
    name: str
    partitions: int
    delivery: str
    id_prefix: bytes
    replicas: int  # copies the engine keeps: what a publish answer's ``durability`` promises


# A topic as its calls answer it and the dashboard shows it: the store's frozen value, as it was read.
TopicView = TopicRow


class TopicDirectory:
    """Resolves a topic name in a scope without a metadata read per request.

    Answers are cached for ``ttl`` seconds (a partition increase or delete made by another process is
    seen within that time) and dropped at once when this process changes the topic.
    """

    def __init__(self, metadata: MetadataStore, ttl: float = 1.0) -> None:
        self._metadata = metadata
        self._ttl = ttl
        self._cache: dict[tuple[str, str, str], tuple[float, TopicRef | None]] = {}
        # One metadata read per topic per TTL, however many requests arrive together.
        self._loading: SingleFlight[tuple[str, str, str], TopicRef | None] = SingleFlight()

    async def resolve(self, scope: Scope, name: str) -> TopicRef:
        key = (scope.project_id, scope.environment, name)
        hit = self._cache.get(key)
        if hit is not None and hit[0] > time.monotonic():
            ref = hit[1]
        else:
            ref = await self._loading.do(key, lambda: self._refresh(key))
        if ref is None:
            raise TopicNotFound(name)
        return ref

    async def _refresh(self, key: tuple[str, str, str]) -> TopicRef | None:
        async with self._metadata.unit(readonly=True) as uow:
            row = await uow.topics.get_by_name(*key)
        ref = (
            TopicRef(
                row.id, row.name, row.partitions, row.delivery, message_ids.topic_prefix(row.id), row.replicas
            )
            if row
            else None
        )
        if len(self._cache) > 50_000:
            self._cache.clear()
        self._cache[key] = (time.monotonic() + self._ttl, ref)
        return ref

    def forget(self, scope: Scope, name: str) -> None:
        self._cache.pop((scope.project_id, scope.environment, name), None)


def validate_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise InvalidRequest.field(
            "name", "1–249 chars of a-z, 0-9, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def parse_retention(value: str) -> int:
    """``<n>m|h|d`` between 1m and 365d → milliseconds."""
    match = _RETENTION.fullmatch(value)
    ms = int(match.group(1)) * UNIT_MS[match.group(2)] if match else 0
    if not match or not RETENTION_MIN_MS <= ms <= RETENTION_MAX_MS:
        raise InvalidRequest.field("retention", 'expected <n>m, <n>h or <n>d between 1m and 365d, e.g. "7d"')
    return ms


def validate_partitions(value: int) -> int:
    if not 1 <= value <= MAX_PARTITIONS:
        raise InvalidRequest.field("partitions", f"must be between 1 and {MAX_PARTITIONS}")
    return value


def validate_replicas(value: int, offered: tuple[int, ...]) -> int:
    """1, 3 or 5, and one the log engine in use offers (the refusal says which it does)."""
    if type(value) is not int:  # True == 1, but a bool is not a count
        raise InvalidRequest.field("replicas", "must be 1, 3 or 5")
    if value in REPLICA_COUNTS and value in offered:
        return value
    if offered == (1,):
        raise InvalidRequest.field(
            "replicas", "this server's log engine keeps one copy of each message, so replicas must be 1"
        )
    if all(c in offered for c in REPLICA_COUNTS):
        raise InvalidRequest.field("replicas", "must be 1, 3 or 5")
    names = [str(c) for c in REPLICA_COUNTS if c in offered]
    choices = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)
    raise InvalidRequest.field("replicas", f"must be {choices} on this server's log engine")


def parse_delivery(value: str) -> Delivery:
    try:
        return Delivery(value)
    except ValueError:
        raise InvalidRequest.field("delivery", "must be 'exactly-once' or 'at-least-once'") from None


def encode_cursor(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        name = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidRequest.field("cursor", "not a cursor returned by this API") from None
    if not NAME.fullmatch(name):
        raise InvalidRequest.field("cursor", "not a cursor returned by this API")
    return name


def log_config(topic: TopicRow) -> TopicLogConfig:
    return TopicLogConfig(retention_ms=topic.retention_ms, replicas=topic.replicas)


async def create_topic(
    uow: MetadataUnit,
    log: LogEngine,
    scope: Scope,
    name: str,
    *,
    retention: str = "7d",
    delivery: str = "exactly-once",
    partitions: int = 3,
    replicas: int | None = None,
) -> TopicView:
    """Create a topic and its empty partition logs; 409 if the name is taken in this environment, 403
    ``QUOTA_EXCEEDED`` (nothing made) past the environment's topics or partitions quota.

    ``replicas`` left out takes the engine's default (``LogEngine.default_replicas``)."""
    validate_name(name)
    retention_ms = parse_retention(retention)
    mode = parse_delivery(delivery)
    validate_partitions(partitions)
    copies = validate_replicas(log.default_replicas if replicas is None else replicas, log.replica_choices)
    # The project stays locked until this unit of work commits: the next creator counts this topic.
    limits = await quotas.lock_project(uow, scope.project_id)
    topics = uow.topics
    if await topics.get_by_name(scope.project_id, scope.environment, name):
        raise TopicAlreadyExists(name)
    quotas.check(Quota.topics, limits, await topics.count(scope.project_id, scope.environment))
    quotas.check(
        Quota.partitions, limits, await topics.partition_sum(scope.project_id, scope.environment), partitions
    )
    now = utcnow()
    topic = TopicRow(
        id=new_id("top"),
        project_id=scope.project_id,
        environment=scope.environment,
        name=name,
        partitions=partitions,
        retention=retention,
        retention_ms=retention_ms,
        delivery=mode.value,
        replicas=copies,
        status="active",
        created_at=now,
        updated_at=now,
    )
    try:
        await topics.add(topic)
    except AlreadyExists:
        # A concurrent create of the same name won the race.
        raise TopicAlreadyExists(name) from None
    try:
        await log.create_topic(topic.id, partitions, log_config(topic))
    except ReplicasUnavailable as exc:  # offered in general, but not by this cluster (too few servers)
        raise InvalidRequest.field("replicas", str(exc)) from None
    return topic


async def get_topic(uow: MetadataUnit, scope: Scope, name: str) -> TopicView:
    """The topic of this name in the scope; ``TopicNotFound`` if there is none."""
    return await _get_row(uow, scope, name)


async def _get_row(uow: MetadataUnit, scope: Scope, name: str) -> TopicRow:
    topic = await uow.topics.get_by_name(scope.project_id, scope.environment, name)
    if topic is None:
        raise TopicNotFound(name)
    return topic


async def list_topics(
    uow: MetadataUnit, scope: Scope, *, limit: int = 50, cursor: str | None = None
) -> tuple[list[TopicView], str | None]:
    """One page of topics by name, and the cursor of the next page (None on the last)."""
    if not 1 <= limit <= 1000:
        raise InvalidRequest.field("limit", "must be between 1 and 1000")
    after = decode_cursor(cursor) if cursor else None
    rows = await uow.topics.page(scope.project_id, scope.environment, after, limit + 1)
    page = [row for row in rows[:limit]]
    return page, encode_cursor(page[-1].name) if len(rows) > limit else None


async def partition_details(log: LogEngine, topic: TopicView | TopicRef) -> list[PartitionInfo]:
    """Per-partition offsets, sizes and where the copies live (servers, zones, the leader), straight from
    the engine, which asks for every partition at once."""
    return await log.describe_partitions(topic.id, topic.partitions)


async def update_topic(
    uow: MetadataUnit,
    log: LogEngine,
    scope: Scope,
    name: str,
    *,
    partitions: int | None = None,
    retention: str | None = None,
) -> TopicView:
    """Grow partitions (never shrink; 403 ``QUOTA_EXCEEDED`` past the environment's partitions quota)
    and/or change retention."""
    # A partition change counts against the environment's quota: lock the project before reading.
    limits = await quotas.lock_project(uow, scope.project_id) if partitions is not None else None
    topic = await _get_row(uow, scope, name)
    if partitions is not None:
        validate_partitions(partitions)
        if partitions < topic.partitions:
            raise InvalidRequest.field(
                "partitions", f"can only be increased (the topic has {topic.partitions})"
            )
        if limits is not None and partitions > topic.partitions:
            used = await uow.topics.partition_sum(scope.project_id, scope.environment)
            quotas.check(Quota.partitions, limits, used, partitions - topic.partitions)
    retention_ms = parse_retention(retention) if retention is not None else None
    grown: int | None = None
    if partitions is not None and partitions > topic.partitions:
        await log.add_partitions(topic.id, partitions)
        grown = partitions
        topic = dataclasses.replace(topic, partitions=partitions)
    if retention is not None and retention_ms is not None:
        topic = dataclasses.replace(topic, retention=retention, retention_ms=retention_ms)
        await log.update_config(topic.id, log_config(topic))
    topic = dataclasses.replace(topic, updated_at=utcnow())
    await uow.topics.update(
        topic.id,
        updated_at=topic.updated_at,
        partitions=grown,
        retention=(topic.retention, topic.retention_ms) if retention_ms is not None else None,
    )
    return topic


async def delete_topic(metadata: MetadataStore, log: LogEngine, scope: Scope, name: str) -> str:
    """Delete a topic: the row first (committed), then its logs, groups and DLQs with it; returns its id."""
    async with metadata.unit() as uow:
        topic = await _get_row(uow, scope, name)
        group_ids = [g.id for g in await uow.groups.list_for_topic(topic.id)]
        await uow.topics.remove(topic.id)
    await log.delete_topic(topic.id)
    for group_id in group_ids:  # their DLQs (a crash meanwhile leaves them to the startup sweep)
        with contextlib.suppress(LogEngineError):
            await log.delete_topic(dead_letter_logs.log_id(group_id))
    return topic.id


async def exists(metadata: MetadataStore, topic_id: str) -> bool:
    """Whether the topic with this id still exists (a long-lived consumer asks after a failure)."""
    async with metadata.unit() as uow:
        return await uow.topics.exists(topic_id)


async def sweep_orphan_logs(uow: MetadataUnit, log: LogEngine, log_topic_ids: set[str]) -> int:
    """Delete engine logs whose topic row no longer exists (a crash between commit and file removal)."""
    known = await uow.topics.all_ids()
    orphans = {t for t in log_topic_ids if t.startswith("top_")} - known
    # A group's DLQ log is named after the group (``dlq_grp_…``): orphaned once the group is gone.
    groups = await uow.groups.all_ids()
    orphans |= {
        t for t in log_topic_ids if (g := dead_letter_logs.group_of(t)) is not None and g not in groups
    }
    for topic_id in orphans:
        await log.delete_topic(topic_id)
    return len(orphans)
