"""Reading a partition without a consumer group (stream mode: the JSON page and the bulk read of records),
and one message by id."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from app.broker import message_ids, timing
from app.broker.errors import InvalidRequest, MessageNotFound, OffsetOutOfRange
from app.broker.messages import render_message
from app.broker.topics import TopicRef
from app.kit.digits import is_ascii_digits
from app.stores.log.protocol import LogEngine, PartitionInfo, RecordColumns

MAX_READ = 1000
# The bulk read (``read_records``): a response of up to 50,000 records or about 16 MiB of payload, read from
# the engine in chunks of 5,000 records (one frame each on the wire).
MAX_BULK_READ = 50_000
DEFAULT_BULK_READ = 10_000
MAX_BULK_BYTES = 16 << 20
BULK_CHUNK = 5_000
BULK_CHUNK_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class StreamPage:
    messages: list[bytes]
    next_offset: int
    earliest_offset: int


def check_partition(topic: TopicRef, partition: int) -> None:
    if not 0 <= partition < topic.partitions:
        raise InvalidRequest.field("partition", f"the topic has partitions 0–{topic.partitions - 1}")


def parse_timestamp(value: str, field: str = "fromTimestamp") -> int:
    """ISO-8601 or epoch milliseconds → epoch milliseconds; a refusal names ``field`` (the caller's)."""
    if is_ascii_digits(value):  # any length: a timestamp past every record reads nothing
        return int(value)
    return timing.instant_ms(value, field)


async def read_partition(
    log: LogEngine,
    topic: TopicRef,
    partition: int,
    *,
    from_offset: int | None = None,
    from_timestamp: str | None = None,
    limit: int = 100,
) -> StreamPage:
    """Up to ``limit`` committed messages from an offset or a time; below the earliest starts there.
    At the end (``fromOffset`` = latest) the page is empty with ``next_offset`` = latest; beyond it the
    read is refused (``OffsetOutOfRange``), so a reader following ``next_offset`` never skips a message."""
    check_partition(topic, partition)
    if not 1 <= limit <= MAX_READ:
        raise InvalidRequest.field("limit", f"must be between 1 and {MAX_READ}")
    info, start = await _start(log, topic, partition, from_offset, from_timestamp)
    records = await log.read(topic.id, partition, start, max_records=limit, max_bytes=8 << 20)
    rendered = [render_message(topic.name, topic, topic.id, partition, r) for r in records]
    next_offset = records[-1].offset + 1 if records else min(start, info.latest_offset)
    return StreamPage(rendered, next_offset, info.earliest_offset)


async def _start(
    log: LogEngine, topic: TopicRef, partition: int, from_offset: int | None, from_timestamp: str | None
) -> tuple[PartitionInfo, int]:
    """Where a read of a partition starts (both reads: the JSON page and the bulk read), and the partition's
    extent; ``OffsetOutOfRange`` past the latest offset."""
    if from_offset is not None and from_offset < 0:
        raise InvalidRequest.field("fromOffset", "must be a non-negative integer")
    info = await log.partition_info(topic.id, partition)
    if from_timestamp is not None:
        start = await log.offset_for_time(topic.id, partition, parse_timestamp(from_timestamp))
        if from_offset is not None:
            start = max(start, from_offset)
    else:
        start = from_offset if from_offset is not None else info.earliest_offset
    if from_offset is not None and from_offset > info.latest_offset:
        raise OffsetOutOfRange("fromOffset", from_offset, info.earliest_offset, info.latest_offset)
    return info, max(start, info.earliest_offset)


@dataclass(frozen=True, slots=True)
class RecordRun:
    """What a bulk read found: the records in the engine's chunks as read (none empty), where the next read
    starts and the earliest retained offset; ``next_offset`` follows the JSON page's rule."""

    chunks: list[RecordColumns]
    next_offset: int
    earliest_offset: int


async def read_records(
    log: LogEngine,
    topic: TopicRef,
    partition: int,
    *,
    from_offset: int | None = None,
    from_timestamp: str | None = None,
    until_offset: int | None = None,
    limit: int = DEFAULT_BULK_READ,
    max_bytes: int = MAX_BULK_BYTES,
) -> RecordRun:
    """The records the JSON read would render, page after page, for a bulk read: from the same start, up
    to ``limit`` records, below ``until_offset`` (exclusive) when given, and stopping once ``max_bytes``
    of payload are read (the first chunk is always taken whole). Read in columns; nothing is rendered."""
    check_partition(topic, partition)
    if not 1 <= limit <= MAX_BULK_READ:
        raise InvalidRequest.field("limit", f"must be between 1 and {MAX_BULK_READ}")
    if until_offset is not None and until_offset < 0:
        raise InvalidRequest.field("untilOffset", "must be a non-negative integer")
    info, start = await _start(log, topic, partition, from_offset, from_timestamp)
    end = info.latest_offset if until_offset is None else min(until_offset, info.latest_offset)
    chunks: list[RecordColumns] = []
    at, left, size = start, limit, 0
    while left > 0 and at < end and size < max_bytes:
        columns = await log.read_columns(
            topic.id, partition, at, max_records=min(left, BULK_CHUNK, end - at), max_bytes=BULK_CHUNK_BYTES
        )
        if columns and columns.offsets[-1] >= end:  # below the earliest, the read starts later
            columns = columns.head(bisect_left(columns.offsets, end))
        if not columns:
            break
        chunks.append(columns)
        at = columns.offsets[-1] + 1
        left -= len(columns)
        size += len(columns.values)
    next_offset = at if chunks else min(start, info.latest_offset)
    return RecordRun(chunks, next_offset, info.earliest_offset)


async def get_message(log: LogEngine, topic: TopicRef, message_id: str) -> bytes:
    """One message by id; 404 when it is not (or no longer) in the topic."""
    where = message_ids.decode(message_id)
    if where.topic_id != topic.id or not 0 <= where.partition < topic.partitions:
        raise MessageNotFound(f"No message '{message_id}' in topic '{topic.name}'.")
    records = await log.read(topic.id, where.partition, where.offset, max_records=1, max_bytes=1)
    if not records or records[0].offset != where.offset:
        raise MessageNotFound(f"No message '{message_id}' in topic '{topic.name}'.")
    return render_message(topic.name, topic, topic.id, where.partition, records[0])
