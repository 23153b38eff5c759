"""Group offsets: read (``current``, ``latest``, ``lag``), seek and reset.

``current`` is the group's committed offset of a partition (everything below it is acked), ``latest``
the next offset to be written. Seek and the live reset (``offsets/reset``) work while members consume:
the partition's in-flight leases are dropped and delivery resumes at the new offset. The stopped-group
reset (``reset-offsets``) refuses while members are connected. Targets are clamped to what is retained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from app.broker import groups
from app.broker.errors import InvalidRequest
from app.broker.reading import check_partition, parse_timestamp
from app.broker.topics import TopicRef
from app.stores.log.protocol import LogEngine
from app.stores.metadata.group_repositories import GroupRepository
from app.stores.metadata.lease_repositories import LeaseRepository
from app.stores.metadata.models import ConsumerGroup
from app.stores.metadata.partition_repositories import PartitionRepository


@dataclass(frozen=True, slots=True)
class Position:
    partition: int
    current: int


def parse_target(value: object, *, allow_offset: bool, field: str = "to") -> str | int:
    """``earliest``, ``latest`` or (where allowed) a non-negative offset."""
    if value in ("earliest", "latest"):
        return str(value)
    if allow_offset and type(value) is int and value >= 0:
        return value
    allowed = "'earliest', 'latest' or an offset" if allow_offset else "'earliest' or 'latest'"
    raise InvalidRequest.field(field, f"must be {allowed}")


async def get_offsets(
    session: AsyncSession, log: LogEngine, topic: TopicRef, name: str, partition: int | None = None
) -> list[groups.PartitionLag]:
    """``current``/``latest``/``lag`` of one partition, or of every partition."""
    if partition is not None:
        check_partition(topic, partition)
    group = await groups.get_group(session, topic, name)
    lags = await groups.partition_lags(session, log, topic, group.id, group.filter)
    return [lag for lag in lags if partition is None or lag.partition == partition]


async def _resolve(log: LogEngine, topic: TopicRef, partition: int, target: str | int) -> int:
    info = await log.partition_info(topic.id, partition)
    if target == "earliest":
        return info.earliest_offset
    if target == "latest":
        return info.latest_offset
    assert isinstance(target, int)
    return min(max(target, info.earliest_offset), info.latest_offset)


async def _move(
    session: AsyncSession,
    log: LogEngine,
    topic: TopicRef,
    group: ConsumerGroup,
    targets: dict[int, str | int],
) -> list[Position]:
    """Set committed and position of partitions and drop their in-flight leases."""
    numbers = sorted(targets)
    repo = PartitionRepository.from_session(session)
    have = {s.partition for s in await repo.lock_partitions(group.id, numbers=numbers)}
    await repo.add_partitions(group.id, [p for p in numbers if p not in have])
    offsets = {p: await _resolve(log, topic, p, targets[p]) for p in numbers}
    await repo.set_offsets(group.id, offsets)
    await repo.bump_epochs(group.id, numbers)  # a push owner drops what it holds in memory there
    await LeaseRepository.from_session(session).drop_partition_leases(group.id, numbers)
    return [Position(p, o) for p, o in offsets.items()]


async def seek(
    session: AsyncSession,
    log: LogEngine,
    topic: TopicRef,
    name: str,
    partition: int,
    *,
    offset: int | None = None,
    timestamp: str | int | None = None,
) -> Position:
    """Move one partition of a live or stopped group to an offset, or to the first offset at a time."""
    check_partition(topic, partition)
    if (offset is None) == (timestamp is None):
        raise InvalidRequest.field("offset", "give exactly one of 'offset' or 'timestamp'")
    if offset is not None and (type(offset) is not int or offset < 0):
        raise InvalidRequest.field("offset", "must be a non-negative integer")
    target: int
    if timestamp is not None:
        if type(timestamp) is int and timestamp >= 0:
            at_ms = timestamp
        elif isinstance(timestamp, str):
            at_ms = parse_timestamp(timestamp, field="timestamp")
        else:
            raise InvalidRequest.field("timestamp", "expected ISO-8601 or epoch milliseconds")
        target = await log.offset_for_time(topic.id, partition, at_ms)
    else:
        assert offset is not None
        target = offset
    # The group row first, as every writer of a group's partitions takes it: one lock order, no deadlock.
    group = await groups.get_group(session, topic, name, for_update=True)
    (moved,) = await _move(session, log, topic, group, {partition: target})
    return moved


async def reset_live(
    session: AsyncSession,
    log: LogEngine,
    topic: TopicRef,
    name: str,
    to: object,
    partition: int | None = None,
) -> list[Position]:
    """``offsets/reset``: every partition (or one) to earliest or latest, while consuming."""
    target = parse_target(to, allow_offset=False)
    if partition is not None:
        check_partition(topic, partition)
    group = await groups.get_group(session, topic, name, for_update=True)  # the lock order, as in seek
    numbers: Sequence[int] = [partition] if partition is not None else range(topic.partitions)
    return await _move(session, log, topic, group, {p: target for p in numbers})


async def reset_stopped(
    session: AsyncSession, log: LogEngine, topic: TopicRef, name: str, to: object
) -> list[Position]:
    """``reset-offsets``: every partition to earliest, latest or an offset; 409 while members are connected."""
    target = parse_target(to, allow_offset=True)
    repo = GroupRepository.from_session(session)
    group = await groups.get_group(session, topic, name, for_update=True)
    await groups.require_stopped(repo, group, "resetting its offsets")
    return await _move(session, log, topic, group, {p: target for p in range(topic.partitions)})
