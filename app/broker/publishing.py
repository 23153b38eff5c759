"""Publishing: validate the envelope, choose partitions, deduplicate, hand the engine whole batches.

The hot path never builds ORM or pydantic objects per message: the body is parsed once with orjson,
each message's ``data`` is kept as JSON bytes, and one ``LogEngine.append`` carries a whole request
(atomic across partitions, durable before it returns).

Records are laid out as ``app/broker/messages.py`` says (``data`` as the value, the key, and the user
headers and idempotency key together in the headers); topics are resolved by ``topics.TopicDirectory``.

Idempotency. A key (the ``Idempotency-Key`` header or a batch item's ``idempotencyKey``; one namespace
per topic) seen within the dedup window answers the original result and appends nothing. The index is
in memory, per topic, and is rebuilt after a restart from the records themselves (the key travels in
the record), so it survives restarts without a database write per publish. Concurrent duplicates in
this process wait for the first to finish and answer its result.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any, NamedTuple, cast

import orjson

from app.broker import message_ids, timing
from app.broker.errors import InvalidRequest, PayloadTooLarge
from app.broker.idempotency import SharedIdempotency
from app.broker.messages import decode_headers, encode_headers, idempotency_headers
from app.broker.partitioner import Partitioner
from app.broker.topics import Scope, TopicDirectory, TopicRef
from app.kit.clock import isoformat_ms, now_ms
from app.kit.json_limits import MAX_DEPTH, inexact_integer, may_hold_inexact_integer, too_deep
from app.stores.log.protocol import LogEngine, RecordIn, RecordTooLarge, ValueRecords

MAX_MESSAGE_BYTES = 256 * 1024
MAX_BATCH = 1000
MAX_KEY_BYTES = 4096
MAX_IDEMPOTENCY_KEY = 256
MAX_HEADERS = 64
MAX_HEADER_NAME_BYTES = 256
_SINGLE_FIELDS = frozenset({"data", "key", "headers", "partition"}) | timing.FIELDS
# Per-message tuples are built with tuple.__new__: half the cost of a NamedTuple's generated __new__.
_new = tuple.__new__
_BATCH_FIELDS = _SINGLE_FIELDS | {"idempotencyKey"}


class OutgoingMessage(NamedTuple):
    """One validated message on its way to the engine."""

    data: bytes
    key: str | None
    headers: dict[str, str] | None
    partition: int | None
    idempotency_key: str | None
    deliver_at_ms: int | None = None  # not delivered to groups before (``timing``)
    expires_at_ms: int | None = None  # never delivered from then on


class Receipt(NamedTuple):
    """Where a published message landed (a tuple: one is made per message on the hot path)."""

    partition: int
    offset: int
    timestamp_ms: int
    latency_ms: int
    deliver_at_ms: int | None = None
    expires_at_ms: int | None = None


_ENVELOPE_HINT = (
    'the message goes in "data": send {"data": <your JSON>} (with optional "key", "headers", "partition")'
)


def _field_error(field: str, issue: str, index: int | None) -> InvalidRequest:
    return InvalidRequest.field(field if index is None else f"messages[{index}].{field}", issue)


def _too_deep(index: int | None) -> InvalidRequest:
    return _field_error("data", f"nested deeper than {MAX_DEPTH} levels of arrays and objects", index)


def _dump(value: Any, index: int | None) -> bytes:
    """``data`` as JSON bytes; a value nested past what orjson writes (254 levels) is refused."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        raise _too_deep(index) from None


def parse_message(
    item: Any, *, index: int | None = None, allow_idempotency_key: bool = False
) -> OutgoingMessage:
    """Validate one message object of a publish body; ``data`` is kept as JSON bytes.

    ``data`` may nest at most ``MAX_DEPTH`` levels; ``data``, ``key`` and ``headers`` together may take
    ``MAX_MESSAGE_BYTES`` (413 past it); at most ``MAX_HEADERS`` headers, names of 1–256 bytes."""
    if type(item) is dict and len(item) == 1 and "data" in item:
        # The common case, a bare {"data": ...}: nothing else to check.
        data = _dump(item["data"], index)
        if len(data) <= MAX_MESSAGE_BYTES and not too_deep(data):
            return _new(OutgoingMessage, (data, None, None, None, None, None, None))
    if not isinstance(item, dict):
        raise InvalidRequest.field(
            "body" if index is None else f"messages[{index}]", "expected a JSON object"
        )
    unknown = item.keys() - (_BATCH_FIELDS if allow_idempotency_key else _SINGLE_FIELDS)
    if unknown:
        if "data" not in item:  # the message itself sent as the body: say where it goes
            raise _field_error(min(unknown), f"unknown field; {_ENVELOPE_HINT}", index)
        raise _field_error(min(unknown), "unknown field", index)
    if "data" not in item:
        raise _field_error("data", "required", index)
    data = _dump(item["data"], index)
    where = "" if index is None else f" (messages[{index}])"
    if len(data) > MAX_MESSAGE_BYTES:
        raise PayloadTooLarge(f"A message's data exceeds 256 KiB{where}.")
    if too_deep(data):
        raise _too_deep(index)
    size = len(data)
    key = item.get("key")
    if key is not None:
        if not isinstance(key, str) or len(key.encode()) > MAX_KEY_BYTES:
            raise _field_error("key", f"must be a string of at most {MAX_KEY_BYTES} bytes", index)
        size += len(key.encode())
    headers = item.get("headers")
    if headers is not None:
        size += _headers_size(headers, index)
    if size > MAX_MESSAGE_BYTES:
        raise PayloadTooLarge(f"A message's data, key and headers together exceed 256 KiB{where}.")
    partition = item.get("partition")
    if not _is_partition(partition):
        raise _field_error("partition", "must be a non-negative integer", index)
    idem = item.get("idempotencyKey") if allow_idempotency_key else None
    if idem is not None:
        validate_idempotency_key(
            idem, "idempotencyKey" if index is None else f"messages[{index}].idempotencyKey"
        )
    deliver_at = expires_at = None
    if not item.keys().isdisjoint(timing.FIELDS):
        deliver_at, expires_at = timing.parse(item, now_ms(), index)
    return OutgoingMessage(data, key, headers or None, partition, idem, deliver_at, expires_at)


def _headers_size(headers: Any, index: int | None) -> int:
    """The bytes a message's headers take (names and values, UTF-8), once they are found valid."""
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise _field_error("headers", "must be an object of string values", index)
    if len(headers) > MAX_HEADERS:
        raise _field_error("headers", f"at most {MAX_HEADERS} headers (got {len(headers)})", index)
    size = 0
    for name, value in headers.items():
        name_bytes = len(name.encode())
        if not 1 <= name_bytes <= MAX_HEADER_NAME_BYTES:
            raise _field_error(
                "headers", f"a header name must be 1–{MAX_HEADER_NAME_BYTES} bytes of UTF-8", index
            )
        size += name_bytes + len(value.encode())
    return size


def with_trace_context(message: OutgoingMessage, context: Mapping[str, str]) -> OutgoingMessage:
    """The message with the publish request's trace context (``traceparent``, ``tracestate``) as
    headers, unless it carries a ``traceparent`` of its own (then its own context wins whole)."""
    headers = message.headers
    if headers is not None and "traceparent" in headers:
        return message
    merged = {**(headers or {}), **context}
    if len(merged) > MAX_HEADERS:
        return message  # no room: the message as sent is kept, not refused for what it did not send
    return message._replace(headers=merged)


def check_integers(raw: bytes | str, datas: Sequence[bytes], *, batch: bool) -> None:
    """Refuse a body whose messages hold an integer 64 bits cannot keep (it would be stored changed, as
    a float). ``raw`` is the body as sent, ``datas`` its messages' ``data`` as parsed and rewritten."""
    if not may_hold_inexact_integer(b"".join(datas)):
        return
    literal = inexact_integer(raw)
    if literal is None:
        return
    field = "data"
    if batch:  # name the message: its data holds the float the literal became
        written = orjson.dumps(float(int(literal)))
        index = next((i for i, data in enumerate(datas) if written in data), None)
        field = "messages[].data" if index is None else f"messages[{index}].data"
    shown = literal if len(literal) <= 40 else literal[:37] + "..."
    raise InvalidRequest.field(
        field,
        f"the integer {shown} does not fit in 64 bits and would not be kept exactly; send it as a string",
    )


def validate_idempotency_key(value: Any, field: str = "Idempotency-Key") -> str:
    if not _is_idempotency_key(value):
        raise InvalidRequest.field(field, f"must be 1–{MAX_IDEMPOTENCY_KEY} printable characters")
    return cast(str, value)


def _is_idempotency_key(value: Any) -> bool:
    return type(value) is str and 1 <= len(value) <= MAX_IDEMPOTENCY_KEY and value.isprintable()


def _is_partition(value: Any) -> bool:
    """None (the service places the message), or a non-negative integer (not a bool)."""
    return value is None or (type(value) is int and value >= 0)


def parse_batch(body: Any) -> list[OutgoingMessage]:
    if not isinstance(body, dict):
        raise InvalidRequest.field("body", "expected a JSON object with 'messages'")
    unknown = body.keys() - {"messages"}
    if unknown:
        raise InvalidRequest.field(min(unknown), "unknown field")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest.field("messages", "required: a list of 1–1000 messages")
    if not 1 <= len(messages) <= MAX_BATCH:
        raise InvalidRequest.field("messages", f"must hold 1–{MAX_BATCH} messages (got {len(messages)})")
    out = []
    dumps = orjson.dumps
    for i, m in enumerate(messages):
        # parse_message's fast paths, inlined (a call per message costs more than the checks): a bare
        # {"data"}, and {"data", "idempotencyKey"} with or without "partition" (an SDK's or Spark's item).
        # What they do not take whole is parse_message's, which says what is wrong.
        idem = partition = None
        if (
            type(m) is dict
            and "data" in m
            and (
                len(m) == 1
                or (
                    2 <= len(m) <= 3
                    and _is_idempotency_key(idem := m.get("idempotencyKey"))
                    and (len(m) == 2 or ("partition" in m and _is_partition(partition := m["partition"])))
                )
            )
        ):
            try:
                data = dumps(m["data"])
            except orjson.JSONEncodeError:
                raise _too_deep(i) from None
            if len(data) <= MAX_MESSAGE_BYTES and (len(data) <= 2 * MAX_DEPTH or not too_deep(data)):
                out.append(_new(OutgoingMessage, (data, None, None, partition, idem, None, None)))
                continue
        out.append(parse_message(m, index=i, allow_idempotency_key=True))
    return out


def plain_batch(body: Any) -> list[bytes] | None:
    """The common batch, ``{"messages": [{"data": …}, …]}`` with 1–1000 bare messages within the size
    limit: each message's ``data`` as JSON bytes. None for any other body (``parse_batch`` then checks it
    and says what is wrong)."""
    if type(body) is not dict or len(body) != 1:
        return None
    messages = body.get("messages")
    if type(messages) is not list or not 1 <= len(messages) <= MAX_BATCH:
        return None
    datas = [m["data"] for m in messages if type(m) is dict and len(m) == 1 and "data" in m]
    if len(datas) != len(messages):
        return None
    try:
        values = list(map(orjson.dumps, datas))
    except orjson.JSONEncodeError:
        return None  # nested too deep: parse_batch names the message
    if max(map(len, values)) > MAX_MESSAGE_BYTES:
        return None
    # Nesting past MAX_DEPTH needs 2 × MAX_DEPTH + 2 bytes of brackets: shorter values are never checked.
    if any(too_deep(value) for value in values if len(value) > 2 * MAX_DEPTH):
        return None
    return values


class _DedupIndex:
    """Idempotency keys of one topic seen within the window → where the message landed."""

    def __init__(self) -> None:
        self.entries: OrderedDict[str, Receipt] = OrderedDict()
        # Keys being written: the future of their write's receipts, and the key's place among them.
        self.inflight: dict[str, tuple[asyncio.Future[list[Receipt]], int]] = {}
        self.loaded = False
        self.lock = asyncio.Lock()

    def prune(self, horizon_ms: int) -> None:
        while self.entries:
            key, placed = next(iter(self.entries.items()))
            if placed.timestamp_ms >= horizon_ms:
                break
            del self.entries[key]


class Publisher:
    """Appends messages to topics: partitioning, validation, idempotency, atomic batches."""

    def __init__(
        self,
        log: LogEngine,
        topics: TopicDirectory,
        *,
        dedup_window_ms: int = 86_400_000,
        shared: SharedIdempotency | None = None,
    ) -> None:
        self.log = log
        self.topics = topics
        self.dedup_window_ms = dedup_window_ms
        self.partitioner = Partitioner()
        self._dedup: dict[str, _DedupIndex] = {}
        # Several API nodes (the JetStream engine): keys live where every node sees them, not in _dedup.
        self.shared = shared

    def message_id(self, topic: TopicRef, partition: int, offset: int) -> str:
        return message_ids.encode(topic.id, partition, offset, prefix=topic.id_prefix)

    def result(self, topic: TopicRef, placed: Receipt) -> dict[str, Any]:
        """The wire answer for one placed message: ``{id, offset, partition, timestamp, deliverAt,
        expiresAt}``."""
        partition, offset, timestamp_ms, _, deliver_at, expires_at = placed
        return {
            "id": message_ids.encode(topic.id, partition, offset, prefix=topic.id_prefix),
            "offset": offset,
            "partition": partition,
            "timestamp": isoformat_ms(timestamp_ms),
            "deliverAt": isoformat_ms(deliver_at) if deliver_at is not None else None,
            "expiresAt": isoformat_ms(expires_at) if expires_at is not None else None,
        }

    def results_json(
        self, topic: TopicRef, placed: Sequence[Receipt], replayed: Sequence[bool] | None = None
    ) -> bytes:
        """``result`` of each, as one JSON array; a replay's item ends with ``"replayed":true``. The ids of
        consecutive offsets of a partition are made as runs (``message_ids.encode_run``), a batch shares
        one timestamp (formatted once), and an item with no due time or expiry is rendered from a
        template: no dict per message."""
        ids = self._ids(topic, placed)
        stamps: dict[int, bytes] = {}
        items: list[bytes] = []
        again = replayed or [False] * len(placed)
        for receipt, message_id, replay in zip(placed, ids, again, strict=True):
            partition, offset, timestamp_ms, _, deliver_at, expires_at = receipt
            if deliver_at is not None or expires_at is not None:
                item = self.result(topic, receipt)
                if replay:
                    item["replayed"] = True
                items.append(orjson.dumps(item))
                continue
            stamp = stamps.get(timestamp_ms)
            if stamp is None:
                stamp = stamps[timestamp_ms] = isoformat_ms(timestamp_ms).encode()
            items.append(
                b'{"id":"%s","offset":%d,"partition":%d,"timestamp":"%s","deliverAt":null,"expiresAt":null%s}'
                % (message_id, offset, partition, stamp, b',"replayed":true' if replay else b"")
            )
        return b"[" + b",".join(items) + b"]"

    @staticmethod
    def _ids(topic: TopicRef, placed: Sequence[Receipt]) -> list[bytes]:
        """The message id of each receipt, as ASCII bytes."""
        by_partition: dict[int, list[int]] = {}
        for i, receipt in enumerate(placed):
            at = by_partition.get(receipt.partition)
            if at is None:
                at = by_partition[receipt.partition] = []
            at.append(i)
        ids: list[bytes] = [b""] * len(placed)
        for partition, indexes in by_partition.items():
            offsets = [placed[i].offset for i in indexes]
            first = offsets[0]
            if offsets == list(range(first, first + len(offsets))):
                run = message_ids.encode_run(topic.id, partition, first, len(offsets), prefix=topic.id_prefix)
            else:  # replays, or a key repeated in the batch: offsets in any order
                head = message_ids.partition_prefix(topic.id, partition, prefix=topic.id_prefix)
                run = [message_ids.encode(topic.id, partition, o, head=head).encode() for o in offsets]
            for i, message_id in zip(indexes, run, strict=True):
                ids[i] = message_id
        return ids

    async def publish(
        self, scope: Scope, topic_name: str, message: OutgoingMessage, idempotency_key: str | None = None
    ) -> tuple[TopicRef, Receipt, bool]:
        """Append one message; returns where it is and whether this was a replay."""
        topic = await self.topics.resolve(scope, topic_name)
        if idempotency_key is not None:
            message = message._replace(idempotency_key=idempotency_key)
        placed, replayed = await self._append(topic, [message])
        return topic, placed[0], replayed[0]

    async def publish_batch(
        self, scope: Scope, topic_name: str, messages: Sequence[OutgoingMessage]
    ) -> tuple[TopicRef, list[Receipt], list[bool]]:
        """Append a batch atomically; items already seen are answered as replays and not appended."""
        topic = await self.topics.resolve(scope, topic_name)
        placed, replayed = await self._append(topic, messages)
        return topic, placed, replayed

    async def publish_plain(
        self, scope: Scope, topic_name: str, values: Sequence[bytes]
    ) -> tuple[TopicRef, bytes]:
        """Append a batch of bare messages (``plain_batch``) atomically, spread round robin. Answers the
        topic and what ``results`` says of each message as one JSON array, rendered from the base
        offsets: no tuple or dict per message."""
        topic = await self.topics.resolve(scope, topic_name)
        partitions = topic.partitions
        first = self.partitioner.spread(partitions, len(values))
        timestamp = now_ms()
        # Message i is record i // partitions of partition (first + i) % partitions.
        runs = [
            ((first + k) % partitions, values[k::partitions]) for k in range(min(partitions, len(values)))
        ]
        bases = await self._log_append(topic.id, {p: ValueRecords(run, timestamp) for p, run in runs})
        stamp = isoformat_ms(timestamp).encode()
        items: list[bytes] = [b""] * len(values)
        for k, (p, run) in enumerate(runs):
            items[k::partitions] = self._items(topic, p, bases[p], len(run), stamp)
        return topic, b"[" + b",".join(items) + b"]"

    def _items(self, topic: TopicRef, partition: int, base: int, count: int, stamp: bytes) -> list[bytes]:
        """``results`` of ``count`` messages at consecutive offsets of one partition, as JSON."""
        template = (
            b'{"id":"%s","offset":%d,"partition":'
            + b"%d" % partition
            + b',"timestamp":"'
            + stamp
            + b'","deliverAt":null,"expiresAt":null}'
        )
        ids = message_ids.encode_run(topic.id, partition, base, count, prefix=topic.id_prefix)
        return list(map(template.__mod__, zip(ids, range(base, base + count), strict=True)))

    async def _append(
        self, topic: TopicRef, messages: Sequence[OutgoingMessage]
    ) -> tuple[list[Receipt], list[bool]]:
        for i, m in enumerate(messages):
            if m.partition is not None and m.partition >= topic.partitions:
                field = (
                    "partition"
                    if len(messages) == 1 and m.idempotency_key is None
                    else f"messages[{i}].partition"
                )
                raise InvalidRequest.field(field, f"the topic has partitions 0–{topic.partitions - 1}")
        keys = [m.idempotency_key for m in messages]
        if keys.count(None) == len(keys):
            return await self._write(topic, messages), [False] * len(messages)
        return await self._append_idempotent(topic, messages, keys)

    async def _append_idempotent(
        self, topic: TopicRef, messages: Sequence[OutgoingMessage], keys: list[str | None]
    ) -> tuple[list[Receipt], list[bool]]:
        """Append the messages whose keys (``keys``, each message's or None) are new; answer the others as
        replays of where theirs landed."""
        if self.shared is not None:

            async def write(indexes: list[int]) -> list[Receipt]:
                return await self._write(topic, [messages[i] for i in indexes])

            landed, again = await self.shared.append(
                topic.id,
                topic.partitions,
                keys,
                write,
                Receipt,
                lambda record: decode_headers(record.headers)[1],
            )
            return await self._timed_replays(topic, landed, again), again
        index = await self._index(topic)
        index.prune(now_ms() - self.dedup_window_ms)
        if (
            None not in keys
            and index.entries.keys().isdisjoint(keys)
            and index.inflight.keys().isdisjoint(keys)
            and len(set(keys)) == len(keys)
        ):
            # Every message keyed, every key new (a batch of an SDK or of Spark, the common case): no
            # message to sort out one by one.
            new = cast(list[str], keys)  # None is not among them
            written = await self._write_keyed(topic, messages, new, range(len(new)), index)
            return written, [False] * len(messages)
        results: list[Receipt | None] = [None] * len(messages)
        replayed = [False] * len(messages)
        waits: list[tuple[int, asyncio.Future[list[Receipt]], int]] = []  # on another request's write
        repeats: list[tuple[int, int]] = []  # (message, the place of its key's first message in ours)
        fresh: list[int] = []  # the messages this call writes
        ours: dict[str, int] = {}  # the keys it writes, at their message's place among them
        for i, key in enumerate(keys):
            if key is None:
                fresh.append(i)
            elif (placed := index.entries.get(key)) is not None:
                results[i], replayed[i] = placed, True
            elif (waiting := index.inflight.get(key)) is not None:
                waits.append((i, *waiting))
            elif (at := ours.get(key)) is not None:
                repeats.append((i, at))
            else:
                ours[key] = len(fresh)
                fresh.append(i)
        written = []
        if fresh:
            written = await self._write_keyed(
                topic, [messages[i] for i in fresh], list(ours), list(ours.values()), index
            )
        for i, placed in zip(fresh, written, strict=True):
            results[i] = placed
        for i, at in repeats:
            results[i], replayed[i] = written[at], True
        for i, future, at in waits:
            results[i], replayed[i] = (await asyncio.shield(future))[at], True
        return [r for r in results if r is not None], replayed

    async def _write_keyed(
        self,
        topic: TopicRef,
        messages: Sequence[OutgoingMessage],
        keys: list[str],
        places: Sequence[int],
        index: _DedupIndex,
    ) -> list[Receipt]:
        """Write ``messages``; ``keys[j]`` (new, distinct) is the key of message ``places[j]``. Meanwhile the
        keys are in flight: a request sending one waits for this write's receipts (one future for all)."""
        inflight = index.inflight
        writing: asyncio.Future[list[Receipt]] = asyncio.get_running_loop().create_future()
        inflight.update(zip(keys, zip(repeat(writing, len(keys)), places, strict=True), strict=True))
        try:
            written = await self._write(topic, messages)
        except BaseException as exc:
            deque(map(inflight.pop, keys), maxlen=0)
            writing.set_exception(exc)
            writing.exception()  # retrieved: a call with no waiter must not log it as lost
            raise
        index.entries.update(zip(keys, map(written.__getitem__, places), strict=True))
        deque(map(inflight.pop, keys), maxlen=0)
        writing.set_result(written)
        return written

    async def _write(self, topic: TopicRef, messages: Sequence[OutgoingMessage]) -> list[Receipt]:
        started = time.perf_counter()
        timestamp = now_ms()
        by_partition: dict[int, list[RecordIn]] = {}
        slots: list[tuple[int, int]] = []
        for m, p in zip(messages, self.partitioner.assign(topic.partitions, messages), strict=True):
            records = by_partition.get(p)
            if records is None:
                records = by_partition[p] = []
            slots.append((p, len(records)))
            if m.key is None and m.headers is None and m.deliver_at_ms is None and m.expires_at_ms is None:
                # Bare, or with an idempotency key alone (an SDK's or Spark's batch item): no dict to encode.
                idem = m.idempotency_key
                headers = None if idem is None else idempotency_headers(idem)
                records.append(_new(RecordIn, (m.data, None, headers, timestamp, idem)))
                continue
            key = m.key.encode() if m.key is not None else None
            headers = encode_headers(m.headers, m.idempotency_key, m.deliver_at_ms, m.expires_at_ms)
            records.append(_new(RecordIn, (m.data, key, headers, timestamp, m.idempotency_key)))
        bases = await self._log_append(topic.id, by_partition)
        latency = round((time.perf_counter() - started) * 1000)
        return [
            _new(Receipt, (p, bases[p] + i, timestamp, latency, m.deliver_at_ms, m.expires_at_ms))
            for (p, i), m in zip(slots, messages, strict=True)
        ]

    async def _timed_replays(
        self, topic: TopicRef, placed: list[Receipt], replayed: list[bool]
    ) -> list[Receipt]:
        """Replays answered from the shared idempotency records carry where the message landed only: its
        due time and expiry are read back from the record (a rare path), so the answer is the original's."""
        out = list(placed)
        for i, again in enumerate(replayed):
            if not again:
                continue
            at = out[i]
            records = await self.log.read(topic.id, at.partition, at.offset, max_records=1, max_bytes=1)
            if records and records[0].offset == at.offset:
                deliver_at, expires_at = timing.of_record(records[0].headers)
                out[i] = at._replace(deliver_at_ms=deliver_at, expires_at_ms=expires_at)
        return out

    async def _log_append(self, topic_id: str, records: Mapping[int, Sequence[RecordIn]]) -> dict[int, int]:
        try:
            return await self.log.append(topic_id, records)
        except RecordTooLarge as exc:  # headers past what the engine stores; nothing was appended
            raise PayloadTooLarge(f"A message is larger than the log stores ({exc}).") from None

    async def _index(self, topic: TopicRef) -> _DedupIndex:
        index = self._dedup.get(topic.id)
        if index is None:
            index = self._dedup[topic.id] = _DedupIndex()
        if not index.loaded:
            async with index.lock:
                if not index.loaded:
                    await self._rebuild(topic, index)
                    index.loaded = True
        return index

    async def _rebuild(self, topic: TopicRef, index: _DedupIndex) -> None:
        """Recover the keys of the window from the records themselves (after a restart)."""
        horizon = now_ms() - self.dedup_window_ms
        found: list[tuple[int, str, Receipt]] = []
        for partition in range(topic.partitions):
            offset = await self.log.offset_for_time(topic.id, partition, horizon)
            while True:
                batch = await self.log.read(topic.id, partition, offset, max_records=1000, max_bytes=4 << 20)
                if not batch:
                    break
                for record in batch:
                    _, key = decode_headers(record.headers)
                    if key is not None:
                        found.append(
                            (
                                record.timestamp_ms,
                                key,
                                Receipt(
                                    partition,
                                    record.offset,
                                    record.timestamp_ms,
                                    0,
                                    *timing.of_record(record.headers),
                                ),
                            )
                        )
                offset = batch[-1].offset + 1
        for _, key, placed in sorted(found, key=lambda f: f[0]):
            index.entries.setdefault(key, placed)

    def topic_changed(self, scope: Scope, name: str) -> None:
        """Forget this process's cached answer for ``name`` after it was created or changed here (others see
        the change within the directory's TTL)."""
        self.topics.forget(scope, name)

    def topic_deleted(self, scope: Scope, name: str, topic_id: str) -> None:
        """Forget all this process holds of a topic deleted here: its name's answer and its dedup index."""
        self.topics.forget(scope, name)
        self._dedup.pop(topic_id, None)
