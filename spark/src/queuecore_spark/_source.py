"""``QueueCoreDataSource``: the PySpark Python Data Source ``queuecore`` (batch and streaming, read and write).

Reading: one Spark input partition per topic partition and offset range (ranges longer than
``maxRecordsPerPartition``, default 100,000, are split so they parallelise). A task reads its range with
bulk reads over one pooled HTTP client (``application/vnd.queuecore.records``: windows of 20,000 offsets,
the next one under way while Spark takes the last, each answer checked by CRC and decoded into Arrow without a loop per record,
``_records``); ``readFormat=json`` reads the stream read's JSON pages of 1,000 instead, decoded with orjson
(the path before bulk reads). Streaming keeps ``{"<partition>": offset}`` in Spark's checkpoint (no consumer
group: the query owns its position, as with Kafka).

A server without bulk reads (older than them; ``_http.BulkReadUnsupported``) is read through the JSON pages:
a reader decides it once, on the driver, with an empty bulk read before it plans its first tasks, and
hands the decision to them in their ``OffsetRange``; a task that still meets such a server (an API process
of an older version behind the same address) switches to the JSON pages for the rest of its range, from
the first offset it has not yielded. Each decision is logged once, at WARNING, and not retried.

Writing: ``_writer`` (pipelined single-partition batches, an idempotency key per row).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from . import _options
from ._http import BULK_PAGE, PAGE, BulkReadUnsupported, Client, invalid_option
from ._options import EARLIEST, LATEST, Options, PartitionState
from ._records import Decoded, decode
from ._writer import BatchWriter, StreamWriter

SCHEMA = (
    "id string, topic string, partition int, offset long, key string, data string, "
    "headers map<string,string>, timestamp timestamp"
)
# Windows of a task read ahead while Spark takes the last one's batches. One: more in flight measured no
# faster on either engine (the server and NATS share the machine's CPUs with Spark), and each holds memory.
BULK_AHEAD = 1

logger = logging.getLogger("queuecore_spark")


class QueueCoreDataSource(DataSource):
    """``spark.read.format("queuecore")``, ``spark.readStream``, ``df.write`` and ``df.writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "queuecore"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(_options.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(_options.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(_options.parse_write(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(_options.parse_write(self.options), schema)


# -- reading ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one topic partition: one Spark task, read as ``read_format`` says (the
    reader's decision: ``json`` when the option says so or the server has no bulk read)."""

    partition: int
    start: int
    end: int
    read_format: str = "records"


def split_ranges(
    ranges: Sequence[tuple[int, int, int]],
    split: int,
    min_partitions: int | None,
    read_format: str = "records",
) -> list[OffsetRange]:
    """Cut ``(partition, start, end)`` ranges into tasks of at most ``split`` records (fewer when
    ``minPartitions`` asks for more tasks than that gives), each to be read as ``read_format``."""
    total = sum(end - start for _, start, end in ranges)
    if min_partitions and total:
        split = max(1, min(split, -(-total // min_partitions)))
    out: list[OffsetRange] = []
    for partition, start, end in ranges:
        at = start
        while at < end:
            out.append(OffsetRange(partition, at, min(end, at + split), read_format))
            at += split
    return out


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def choose_read_format(client: Client, opts: Options, states: Sequence[PartitionState]) -> str:
    """How a reader's tasks read: ``json`` when ``readFormat`` says so, or when the server answers an
    empty bulk read of the first selected partition with ``BulkReadUnsupported`` (logged once here);
    ``records`` otherwise. Errors of any other kind are the job's, as they would be in its tasks."""
    if opts.read_format == "json" or not states:
        return opts.read_format
    probe = states[0]
    try:
        client.read_records(
            opts.topic, probe.id, from_offset=probe.earliest, until_offset=probe.earliest, limit=1
        )
    except BulkReadUnsupported as unsupported:
        logger.warning(
            "QueueCore at %s has no bulk read (%s): topic '%s' is read through the JSON pages",
            opts.base_url,
            unsupported,
            opts.topic,
        )
        return "json"
    return "records"


def read_range(opts: Options, schema: StructType, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The messages of one range as Arrow batches (stateless: a fresh client per task): by bulk reads
    unless ``readFormat`` is ``json`` or the reader found the server without them."""
    if opts.read_format == "json" or part.read_format == "json":
        return read_range_json(opts, schema, part)
    return read_range_records(opts, schema, part)


def read_range_records(opts: Options, schema: StructType, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The range by bulk reads (``application/vnd.queuecore.records``): one Arrow batch per frame, decoded
    without a loop per record; a damaged answer raises ``CorruptResponse`` and fails the task.

    The range is cut into windows of ``BULK_PAGE`` offsets, each read up to its end (``untilOffset``), so
    windows never overlap; the next ``BULK_AHEAD`` travel while Spark takes the batches of the current one,
    in order. A window below the earliest retained offset comes back empty or starting there.

    A window answered ``BulkReadUnsupported`` has yielded nothing (a window's batches are yielded only once
    all its calls are in), so the rest of the range, from that window's start, is read through the JSON
    pages; no later window is asked for by bulk read."""
    arrow = _arrow_schema(schema)
    windows = [(at, min(part.end, at + BULK_PAGE)) for at in range(part.start, part.end, BULK_PAGE)]
    fallback: tuple[int, BulkReadUnsupported] | None = None  # where the JSON pages take over, and why
    with Client(opts.base_url, opts.api_key) as client, ThreadPoolExecutor(BULK_AHEAD) as fetcher:

        def fetch(start: int, end: int) -> list[Decoded]:
            answers: list[Decoded] = []
            at = start
            while at < end:  # more than one call when the server stops a read at its byte bound
                body = client.read_records(
                    opts.topic, part.partition, from_offset=at, until_offset=end, limit=end - at
                )
                answers.append(decode(body, opts.topic, part.partition, arrow))
                if not answers[-1].batches:
                    break  # nothing left below the end: retention removed it, or the range was planned past it
                at = answers[-1].next_offset
            return answers

        pending = deque(fetcher.submit(fetch, *w) for w in windows[:BULK_AHEAD])
        queued = len(pending)
        for window_start, _ in windows:
            try:
                answers = pending.popleft().result()
            except BulkReadUnsupported as unsupported:
                for later in pending:
                    later.cancel()
                fallback = (window_start, unsupported)
                break
            if queued < len(windows):
                pending.append(fetcher.submit(fetch, *windows[queued]))
                queued += 1
            for answer in answers:
                yield from answer.batches
    if fallback is None:
        return
    at, refusal = fallback
    logger.warning(
        "QueueCore at %s answered a bulk read of '%s' partition %d with %s: offsets %d to %d are read "
        "through the JSON pages",
        opts.base_url,
        opts.topic,
        part.partition,
        refusal,
        at,
        part.end,
    )
    yield from read_range_json(opts, schema, replace(part, start=at, read_format="json"))


def read_range_json(opts: Options, schema: StructType, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The range by JSON pages of the stream read, one Arrow batch per page."""
    arrow = _arrow_schema(schema)
    headers_type = arrow.field("headers").type
    ts_type = arrow.field("timestamp").type
    with Client(opts.base_url, opts.api_key) as client, ThreadPoolExecutor(1) as fetcher:

        def fetch(at: int) -> dict[str, Any]:
            return client.read_page(
                opts.topic, part.partition, from_offset=at, limit=min(PAGE, part.end - at)
            )

        # One page ahead: the next page travels while this one is decoded.
        pending: Future[dict[str, Any]] | None = fetcher.submit(fetch, part.start)
        while pending is not None:
            page = pending.result()
            messages = [m for m in page["data"] if m["offset"] < part.end]
            if not messages:
                break  # below the end but nothing left: retention removed it, or the range was planned past it
            at = int(page["nextOffset"])
            pending = fetcher.submit(fetch, at) if at < part.end else None
            n = len(messages)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([m["id"] for m in messages], pa.string()),
                    pa.array([opts.topic] * n, pa.string()),
                    pa.array([part.partition] * n, pa.int32()),
                    pa.array([m["offset"] for m in messages], pa.int64()),
                    pa.array([m["key"] for m in messages], pa.string()),
                    pa.array([orjson.dumps(m["data"]).decode() for m in messages], pa.string()),
                    pa.array([list((m["headers"] or {}).items()) for m in messages], headers_type),
                    pa.array([_epoch_us(m["timestamp"]) for m in messages], pa.int64()).cast(ts_type),
                ],
                schema=arrow,
            )


def _epoch_us(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000) * 1000


class BatchReader(DataSourceReader):
    """``spark.read``: earliest → latest by default."""

    def __init__(self, opts: Options, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.starting = _options.offsets_spec(opts.starting, EARLIEST, "startingOffsets")
        self.ending = _options.offsets_spec(opts.ending, LATEST, "endingOffsets")
        if self.starting == LATEST:
            raise invalid_option("'startingOffsets' cannot be 'latest' for a batch query (it reads nothing).")
        if self.ending == EARLIEST:
            raise invalid_option("'endingOffsets' cannot be 'earliest' for a batch query.")

    def partitions(self) -> Sequence[InputPartition]:
        ranges = []
        with self.opts.client() as client:
            states = _options.partition_states(client, self.opts)
            for state in states:
                start = _options.resolve(client, self.opts, state, self.starting, timestamp=True)
                end = min(
                    _options.resolve(client, self.opts, state, self.ending, timestamp=False), state.latest
                )
                if isinstance(self.ending, dict) and self.ending.get(state.id, LATEST) >= 0:
                    _options.check_range(self.opts, state.id, start, end)
                ranges.append((state.id, start, max(start, end)))
            how = (
                choose_read_format(client, self.opts, states)
                if any(e > s for _, s, e in ranges)
                else self.opts.read_format
            )
        return split_ranges(ranges, self.opts.split, self.opts.min_partitions, how)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # Spark's placeholder when there is nothing to read
            return iter(())
        return read_range(self.opts, self.schema, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: offsets ``{"<partition>": next offset}`` in the checkpoint; latest by default;
    ``maxOffsetsPerTrigger`` shared among partitions in proportion to their backlog (as Kafka's source);
    partitions added to the topic are read from their earliest offset. Under ``Trigger.AvailableNow`` the
    run ends at the offsets of its start, in micro-batches of at most ``maxOffsetsPerTrigger``."""

    def __init__(self, opts: Options, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.starting = _options.offsets_spec(opts.starting, LATEST, "startingOffsets")
        self.target: dict[int, int] | None = None  # Trigger.AvailableNow: where this run ends
        # How this query's tasks read (``choose_read_format``), decided at its first micro-batch with data to read.
        self.read_format: str | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the run's end at the partitions' latest offsets now: messages published later, and
        partitions added later, wait for the next run (Spark calls this once, on the driver)."""
        with self.opts.client() as client:
            self.target = {s.id: s.latest for s in _options.partition_states(client, self.opts)}

    def initialOffset(self) -> dict[str, int]:
        with self.opts.client() as client:
            return {
                str(s.id): _options.resolve(client, self.opts, s, self.starting, timestamp=True)
                for s in _options.partition_states(client, self.opts)
            }

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.opts.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_offsets_per_trigger)

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        with self.opts.client() as client:
            states = _options.partition_states(client, self.opts)
        begin = {s.id: max(int(start.get(str(s.id), s.earliest)), s.earliest) for s in states}
        latest = {s.id: s.latest for s in states}
        if self.target is not None:
            target = self.target
            latest = {p: max(begin[p], min(end, target.get(p, begin[p]))) for p, end in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = _rate_limit(begin, latest, int(limit.max_rows))
        return {str(p): latest[p] for p in sorted(latest)}

    def reportLatestOffset(self) -> dict[str, int] | None:
        with self.opts.client() as client:
            return {str(s.id): s.latest for s in _options.partition_states(client, self.opts)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        ranges = [(int(p), int(start.get(p, 0)), int(e)) for p, e in end.items()]
        ranges = [r for r in ranges if r[2] > r[1]]
        if ranges and self.read_format is None:
            with self.opts.client() as client:
                self.read_format = choose_read_format(
                    client, self.opts, _options.partition_states(client, self.opts)
                )
        return split_ranges(ranges, self.opts.split, None, self.read_format or "records")

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # Spark's placeholder when there is nothing to read
            return iter(())
        return read_range(self.opts, self.schema, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the position lives in Spark's checkpoint, not in QueueCore."""


def _rate_limit(begin: dict[int, int], latest: dict[int, int], limit: int) -> dict[int, int]:
    """Share ``limit`` offsets among partitions in proportion to their backlog (Kafka's rateLimit)."""
    backlog = {p: max(0, latest[p] - begin[p]) for p in latest}
    total = sum(backlog.values())
    if total <= limit:
        return latest
    out = {}
    given = 0
    for p in sorted(backlog):
        share = backlog[p] * limit // total
        out[p] = begin[p] + share
        given += share
    for p in sorted(backlog):  # hand out what integer division left over, so progress is never zero
        if given >= limit:
            break
        if out[p] < latest[p]:
            out[p] += 1
            given += 1
    return out
