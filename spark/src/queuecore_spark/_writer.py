"""Publishing a DataFrame: ``df.write`` and ``df.writeStream`` with format ``queuecore``.

A task gets its rows as Arrow batches (no Spark ``Row`` objects) and turns each row into one message item.
Rows are grouped by the partition they will land on — the ``partition`` column, else the key's hash
(``_partitioner``, the service's own rule), else round robin starting at the task's own partition id — into
requests of up to 1,000 items for one partition each, so every request is a single-partition append.

Requests are pipelined in *lanes*: partition ``p`` uses lane ``p % lanes``; a lane is one sender thread
that sends its requests one after the other, in the order the task made them; ``maxInFlight`` lanes
(default: the topic's partition count, at most 8) send at once while the task goes on encoding rows.
Ordering: a partition receives one task's rows in the task's order (the messages of a key keep their
order), as before. Back pressure: a lane holds at most one request waiting behind the one in flight; the
task waits for the lane's oldest request before it queues another, so a task holds at most about
``2 × lanes × 1,000`` items, and an error answered to any request fails the task at its next request.

Exactly once per row: every item carries the idempotency key
``spark:<write>:<batch>:<task partition>:<row position>``, where ``<write>`` is fixed when the write is
planned (batch) or is the streaming query's id (stable across restarts) and ``<batch>`` the micro-batch
id. Lanes run independently, so a failed attempt may have landed any subset of its requests; the retried
task sends every row again with the same keys, and the service answers the rows that landed as replays
and appends only the others (within the topic's deduplication window).
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ._http import Client, QueueCoreError, invalid_option
from ._options import WriteOptions
from ._partitioner import partition_for_key

MAX_BATCH = 1000  # the service's largest batch
MAX_LANES = 8  # the client's connection pool


@dataclass(frozen=True)
class Published(WriterCommitMessage):
    count: int
    replayed: int


def check_columns(schema: StructType) -> None:
    if "data" not in [f.name for f in schema.fields]:
        raise invalid_option("Writing to QueueCore needs a 'data' column (a JSON string).")


class _Lanes:
    """Up to ``lanes`` requests in flight, one per lane; a partition's requests keep their order."""

    DEPTH = 2  # per lane: the request in flight and one waiting behind it

    def __init__(self, client: Client, topic: str, lanes: int) -> None:
        self._client = client
        self._topic = topic
        self._senders = [ThreadPoolExecutor(1, thread_name_prefix="queuecore-write") for _ in range(lanes)]
        self._queued: list[deque[Future[dict[str, Any]]]] = [deque() for _ in range(lanes)]
        self.replayed = 0

    def send(self, partition: int, items: list[bytes]) -> None:
        lane = partition % len(self._senders)
        queued = self._queued[lane]
        while len(queued) >= self.DEPTH:
            self._settle(queued.popleft())
        body = b'{"messages":[' + b",".join(items) + b"]}"
        queued.append(self._senders[lane].submit(self._client.publish_batch, self._topic, body))

    def drain(self) -> None:
        """Wait for every request; the first error answered is raised."""
        for queued in self._queued:
            while queued:
                self._settle(queued.popleft())

    def close(self) -> None:
        """Wait until every request handed to a lane was answered (at most two per lane), also when the
        task fails: no request of this attempt is still travelling when Spark retries the task."""
        for sender in self._senders:
            sender.shutdown(wait=True)

    def _settle(self, future: Future[dict[str, Any]]) -> None:
        answer = future.result()
        self.replayed += sum(1 for m in answer["messages"] if m.get("replayed"))


class _Encoder:
    """Rows of Arrow batches → message items, grouped by the partition they land on."""

    def __init__(self, schema: pa.Schema, prefix: str, partitions: int, task: int) -> None:
        names = schema.names
        self._data = names.index("data")
        self._key = names.index("key") if "key" in names else None
        self._headers = names.index("headers") if "headers" in names else None
        self._partition = names.index("partition") if "partition" in names else None
        self._prefix = orjson.dumps(prefix)[:-1] + b":"  # the opening quote and the escaped prefix
        self._partitions = partitions
        self._next = task % partitions  # the round robin of keyless rows starts at the task's own partition
        self.position = 0

    def items(self, batch: pa.RecordBatch) -> Iterator[tuple[int, bytes]]:
        """(partition, item JSON) of every row of the batch, in order."""
        n = batch.num_rows
        datas = batch.column(self._data).to_pylist()
        keys = batch.column(self._key).to_pylist() if self._key is not None else [None] * n
        headers = batch.column(self._headers).to_pylist() if self._headers is not None else [None] * n
        explicit = batch.column(self._partition).to_pylist() if self._partition is not None else [None] * n
        partitions = self._partitions
        for data, key, header, partition in zip(datas, keys, headers, explicit, strict=True):
            position = self.position
            self.position += 1
            raw = _data(data, position)
            item = b'{"data":%s,"idempotencyKey":%s%d"' % (raw, self._prefix, position)
            if key is not None:
                key = str(key)
                item += b',"key":' + orjson.dumps(key)
            if header:
                item += b',"headers":' + orjson.dumps({str(k): str(v) for k, v in _pairs(header)})
            if partition is not None:
                partition = int(partition)
                item += b',"partition":%d}' % partition
            elif key is not None:
                partition = partition_for_key(key, partitions)  # the service places it: no explicit partition
                item += b"}"
            else:
                partition = self._next
                self._next = (partition + 1) % partitions
                item += b',"partition":%d}' % partition
            yield partition, item


def _data(data: Any, position: int) -> bytes:
    """The row's ``data`` as checked JSON text (checked, so a row cannot add fields or items of its own)."""
    if data is None:
        raise invalid_option(f"Row {position}: 'data' is null; it must be a JSON string (e.g. 'null').")
    if isinstance(data, str):
        raw = data.encode()
    elif isinstance(data, bytes | bytearray):
        raw = bytes(data)
    else:
        raise invalid_option(f"Row {position}: 'data' must be a JSON string, got a {type(data).__name__}.")
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise invalid_option(f"Row {position}: 'data' is not valid JSON: {raw[:80]!r}") from None
    return raw


def _pairs(header: Any) -> Iterator[tuple[Any, Any]]:
    return iter(header.items()) if isinstance(header, dict) else iter(header)  # Arrow maps are pair lists


def publish(opts: WriteOptions, batches: Iterator[pa.RecordBatch], prefix: str, task: int) -> Published:
    """Publish the rows of ``batches``, item ``i`` keyed ``<prefix>:<i>`` (see the module's docstring)."""
    with Client(opts.base_url, opts.api_key) as client:
        described = client.describe_topic(opts.topic)
        partitions = max(1, int(described.get("partitions") or len(described.get("partitionDetails") or [])))
        lanes = _Lanes(client, opts.topic, min(opts.max_in_flight or partitions, partitions, MAX_LANES))
        try:
            encoder: _Encoder | None = None
            pending: dict[int, list[bytes]] = {}
            for batch in batches:
                if encoder is None:
                    encoder = _Encoder(batch.schema, prefix, partitions, task)
                for partition, item in encoder.items(batch):
                    waiting = pending.get(partition)
                    if waiting is None:
                        waiting = pending[partition] = []
                    waiting.append(item)
                    if len(waiting) == MAX_BATCH:
                        lanes.send(partition, waiting)
                        pending[partition] = []
            for partition in sorted(pending):
                if pending[partition]:
                    lanes.send(partition, pending[partition])
            lanes.drain()
        finally:
            lanes.close()
    return Published(encoder.position if encoder is not None else 0, lanes.replayed)


def _task() -> tuple[int, Any]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # not inside a Spark task
        return 0, None
    return context.partitionId(), context


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("queuecore")``: the write's id is fixed here, on the driver, when it is planned."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        check_columns(schema)
        self.write_id = opts.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        partition, _ = _task()
        return publish(self.opts, iterator, f"spark:{self.write_id}:0:{partition}", partition)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("queuecore")``: keys from the query id (kept in the checkpoint, so the same
    after a restart) and the micro-batch id, which Spark gives every task as local properties."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        check_columns(schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        partition, context = _task()
        query = batch = None
        if context is not None:
            query = context.getLocalProperty("sql.streaming.queryId")
            batch = context.getLocalProperty("streaming.sql.batchId")
        if query is None or batch is None:
            raise QueueCoreError("INTERNAL_ERROR", "A streaming write ran without its query and batch ids.")
        prefix = f"spark:{self.opts.write_id or query}:{batch}:{partition}"
        return publish(self.opts, iterator, prefix, partition)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every batch was appended (atomically, idempotently) by its task: nothing is left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Batches already appended stay; a re-run of this micro-batch sends the same keys and adds none."""
