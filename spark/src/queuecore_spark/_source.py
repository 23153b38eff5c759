"""``QueueCoreDataSource``: the PySpark Python Data Source ``queuecore`` (batch and streaming, read and write).

Reading: one Spark input partition per topic partition and offset range (ranges longer than
``maxRecordsPerPartition``, default 100,000, are split so they parallelise). A task follows the stream read's
``nextOffset`` in pages of 1,000 over one pooled HTTP client, decodes each page with orjson and hands Spark one
Arrow batch per page. Streaming keeps ``{"<partition>": offset}`` in Spark's checkpoint (no consumer group:
the query owns its position, as with Kafka).

Writing: rows are published in atomic batches of up to 1,000; every item carries an idempotency key
``spark:<write>:<batch>:<task partition>:<row position>``, where ``<write>`` is fixed when the write is planned
(batch) or is the streaming query's id (stable across restarts) and ``<batch>`` the micro-batch id. A retried
task sends the same rows with the same keys, so the service appends none of them twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
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
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from . import _options
from ._http import PAGE, Client, QueueCoreError, invalid_option
from ._options import EARLIEST, LATEST, Options

SCHEMA = (
    "id string, topic string, partition int, offset long, key string, data string, "
    "headers map<string,string>, timestamp timestamp"
)
MAX_BATCH = 1000


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
    """Offsets ``[start, end)`` of one topic partition: one Spark task."""

    partition: int
    start: int
    end: int


def split_ranges(
    ranges: Sequence[tuple[int, int, int]], split: int, min_partitions: int | None
) -> list[OffsetRange]:
    """Cut ``(partition, start, end)`` ranges into tasks of at most ``split`` records (fewer when
    ``minPartitions`` asks for more tasks than that gives)."""
    total = sum(end - start for _, start, end in ranges)
    if min_partitions and total:
        split = max(1, min(split, -(-total // min_partitions)))
    out: list[OffsetRange] = []
    for partition, start, end in ranges:
        at = start
        while at < end:
            out.append(OffsetRange(partition, at, min(end, at + split)))
            at += split
    return out


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def read_range(opts: Options, schema: StructType, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The messages of one range as Arrow batches, one per page (stateless: a fresh client per task)."""
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
            for state in _options.partition_states(client, self.opts):
                start = _options.resolve(client, self.opts, state, self.starting, timestamp=True)
                end = min(
                    _options.resolve(client, self.opts, state, self.ending, timestamp=False), state.latest
                )
                if isinstance(self.ending, dict) and self.ending.get(state.id, LATEST) >= 0:
                    _options.check_range(self.opts, state.id, start, end)
                ranges.append((state.id, start, max(start, end)))
        return split_ranges(ranges, self.opts.split, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # Spark's placeholder when there is nothing to read
            return iter(())
        return read_range(self.opts, self.schema, partition)


class StreamReader(DataSourceStreamReader):
    """``spark.readStream``: offsets ``{"<partition>": next offset}`` in the checkpoint; latest by default;
    ``maxOffsetsPerTrigger`` shared among partitions in proportion to their backlog (as Kafka's source);
    partitions added to the topic are read from their earliest offset."""

    def __init__(self, opts: Options, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.starting = _options.offsets_spec(opts.starting, LATEST, "startingOffsets")

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
        if isinstance(limit, ReadMaxRows):
            latest = _rate_limit(begin, latest, int(limit.max_rows))
        return {str(p): latest[p] for p in sorted(latest)}

    def reportLatestOffset(self) -> dict[str, int] | None:
        with self.opts.client() as client:
            return {str(s.id): s.latest for s in _options.partition_states(client, self.opts)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        ranges = [(int(p), int(start.get(p, 0)), int(e)) for p, e in end.items()]
        return split_ranges([r for r in ranges if r[2] > r[1]], self.opts.split, None)

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


# -- writing ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Published(WriterCommitMessage):
    count: int
    replayed: int


def _columns(schema: StructType) -> list[str]:
    names = [f.name for f in schema.fields]
    if "data" not in names:
        raise invalid_option("Writing to QueueCore needs a 'data' column (a JSON string).")
    return names


def publish_rows(opts: _options.WriteOptions, rows: Iterator[Any], prefix: str) -> Published:
    """Publish rows in atomic batches of up to 1,000, each item keyed ``<prefix>:<row position>``."""
    count = replayed = 0
    batch: list[bytes] = []
    with Client(opts.base_url, opts.api_key) as client:

        def flush() -> None:
            nonlocal replayed
            answer = client.publish_batch(opts.topic, b'{"messages":[' + b",".join(batch) + b"]}")
            replayed += sum(1 for m in answer["messages"] if m.get("replayed"))
            batch.clear()

        for position, row in enumerate(rows):
            batch.append(_item(row, f"{prefix}:{position}", position))
            count += 1
            if len(batch) == MAX_BATCH:
                flush()
        if batch:
            flush()
    return Published(count, replayed)


def _item(row: Any, key: str, position: int) -> bytes:
    fields = row.asDict() if hasattr(row, "asDict") else dict(row)
    data = fields.get("data")
    if data is None:
        raise invalid_option(f"Row {position}: 'data' is null; it must be a JSON string (e.g. 'null').")
    if isinstance(data, bytes | bytearray):
        data = bytes(data).decode()
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        raise invalid_option(f"Row {position}: 'data' is not valid JSON: {data[:80]!r}") from None
    item: dict[str, Any] = {"data": orjson.Fragment(data), "idempotencyKey": key}
    if fields.get("key") is not None:
        item["key"] = str(fields["key"])
    if fields.get("headers"):
        item["headers"] = {str(k): str(v) for k, v in dict(fields["headers"]).items()}
    if fields.get("partition") is not None:
        item["partition"] = int(fields["partition"])
    return orjson.dumps(item)


def _task() -> tuple[int, Any]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # not inside a Spark task
        return 0, None
    return context.partitionId(), context


class BatchWriter(DataSourceWriter):
    """``df.write.format("queuecore")``: the write's id is fixed here, on the driver, when it is planned."""

    def __init__(self, opts: _options.WriteOptions, schema: StructType) -> None:
        self.opts = opts
        _columns(schema)
        self.write_id = opts.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> Published:
        partition, _ = _task()
        return publish_rows(self.opts, iterator, f"spark:{self.write_id}:0:{partition}")


class StreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("queuecore")``: keys from the query id (kept in the checkpoint, so the same
    after a restart) and the micro-batch id, which Spark gives every task as local properties."""

    def __init__(self, opts: _options.WriteOptions, schema: StructType) -> None:
        self.opts = opts
        _columns(schema)

    def write(self, iterator: Iterator[Any]) -> Published:
        partition, context = _task()
        query = batch = None
        if context is not None:
            query = context.getLocalProperty("sql.streaming.queryId")
            batch = context.getLocalProperty("streaming.sql.batchId")
        if query is None or batch is None:
            raise QueueCoreError("INTERNAL_ERROR", "A streaming write ran without its query and batch ids.")
        return publish_rows(self.opts, iterator, f"spark:{self.opts.write_id or query}:{batch}:{partition}")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every batch was appended (atomically, idempotently) by its task: nothing is left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Batches already appended stay; a re-run of this micro-batch sends the same keys and adds none."""
