"""Group offsets: read (``current``, ``latest``, ``lag``), seek and reset.

``current`` is the group's committed offset of a partition (everything below it is acked), ``latest``
the next offset to be written. Seek and the live reset (``offsets/reset``) work while members consume:
the partition's in-flight leases are dropped and delivery resumes at the new offset. The stopped-group
reset (``reset-offsets``) refuses while members are connected. Targets are clamped to what is retained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.broker import groups
from app.broker.errors import InvalidRequest
from app.broker.reading import check_partition, parse_timestamp
from app.broker.topics import TopicRef
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import MetadataUnit


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
    uow: MetadataUnit, log: LogEngine, topic: TopicRef, name: str, partition: int | None = None
) -> list[groups.PartitionLag]:
    """``current``/``latest``/``lag`` of one partition, or of every partition."""
    if partition is not None:
        check_partition(topic, partition)
    group = await groups.get_group(uow, topic, name)
    lags = await groups.partition_lags(uow, log, topic, group.id, group.filter)
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
    uow: MetadataUnit,
    log: LogEngine,
    topic: TopicRef,
    group_id: str,
    targets: dict[int, str | int],
) -> list[Position]:
    """Set committed and position of partitions and drop their in-flight leases."""
    numbers = sorted(targets)
    partitions = uow.partitions
    have = {s.partition for s in await partitions.lock_partitions(group_id, numbers=numbers)}
    await partitions.add_partitions(group_id, [p for p in numbers if p not in have])
    offsets = {p: await _resolve(log, topic, p, targets[p]) for p in numbers}
    await partitions.set_offsets(group_id, offsets)
    await partitions.bump_epochs(group_id, numbers)  # a push owner drops what it holds in memory there
    await uow.leases.drop_partition_leases(group_id, numbers)
    return [Position(p, o) for p, o in offsets.items()]


async def seek(
    uow: MetadataUnit,
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
    group = await groups.get_group(uow, topic, name, for_update=True)
    (moved,) = await _move(uow, log, topic, group.id, {partition: target})
    return moved


async def reset_live(
    uow: MetadataUnit,
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
    group = await groups.get_group(uow, topic, name, for_update=True)  # the lock order, as in seek
    numbers: Sequence[int] = [partition] if partition is not None else range(topic.partitions)
    return await _move(uow, log, topic, group.id, {p: target for p in numbers})


async def reset_stopped(
    uow: MetadataUnit, log: LogEngine, topic: TopicRef, name: str, to: object
) -> list[Position]:
    """``reset-offsets``: every partition to earliest, latest or an offset; 409 while members are connected."""
    target = parse_target(to, allow_offset=True)
    group = await groups.get_group(uow, topic, name, for_update=True)
    await groups.require_stopped(uow, group, "resetting its offsets")
    return await _move(uow, log, topic, group.id, {p: target for p in range(topic.partitions)})
