"""How QueueCore's logs and records are spelled in JetStream: stream and subject names, the record frame,
and the chunks of a transaction's commit record.

A record travels as the payload of one JetStream message, framed so that no NATS header carries user bytes
(header values may not hold CR/LF, and every header is parsed by every reader)::

    >q timestamp_ms | >i key length (-1: none) | >i headers length (-1: none) | key | headers | value

A commit record (see ``transactions``) is an atomic batch of chunks; a chunk holds records of one partition::

    >H topic id length | topic id | >I partition | >I count | count × (>I frame length | frame)
"""

from __future__ import annotations

import hashlib
import re
import struct
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

from app.kit.arrays import from_bytes
from app.stores.log.protocol import Record, RecordColumns, RecordIn, TopicLogConfig

_FRAME = struct.Struct(">qii")
FRAME_BYTES = _FRAME.size  # a frame's head: what a record's frame adds to its key, headers and value
_LENGTH = struct.Struct(">I")
_CHUNK_HEAD = struct.Struct(">I I")
_SAFE = re.compile(r"[A-Za-z0-9_]+")

STREAM_PREFIX = "QC_"
SUBJECT_PREFIX = "qc.log."
TXN_STREAM = "QC__TXN"
TXN_SUBJECT_PREFIX = "qc.txn."
# A commit record's chunks stay well under the cluster's max_payload (2 MiB in infra/nats_cluster.py;
# NATS's default is 1 MiB): a chunk is cut once it passes this, so one holds at least one record.
CHUNK_BYTES = 512 * 1024


def token(topic_id: str) -> str:
    """A topic id as one subject token and part of a stream name (``t<id>``, or ``x<hex>`` when the id has
    characters neither may hold)."""
    if _SAFE.fullmatch(topic_id):
        return "t" + topic_id
    return "x" + topic_id.encode().hex()


def topic_of_token(value: str) -> str:
    return value[1:] if value.startswith("t") else bytes.fromhex(value[1:]).decode()


def stream_name(topic_id: str, partition: int) -> str:
    return f"{STREAM_PREFIX}{token(topic_id)}_{partition}"


def subject(topic_id: str, partition: int) -> str:
    return f"{SUBJECT_PREFIX}{token(topic_id)}.{partition}"


def parse_stream_name(name: str) -> tuple[str, int] | None:
    """``(topic_id, partition)`` of one of our partition streams, or None for any other stream."""
    if not name.startswith(STREAM_PREFIX) or name == TXN_STREAM:
        return None
    head, _, partition = name[len(STREAM_PREFIX) :].rpartition("_")
    if not head or not partition.isdigit():
        return None
    try:
        return topic_of_token(head), int(partition)
    except ValueError:
        return None


def stream_config(
    topic_id: str, partition: int, replicas: int, config: TopicLogConfig, duplicate_window_ns: int
) -> dict[str, Any]:
    """The JetStream configuration of one partition's stream."""
    return {
        "name": stream_name(topic_id, partition),
        "subjects": [subject(topic_id, partition)],
        "num_replicas": replicas,
        "storage": "file",
        "retention": "limits",
        "discard": "old",
        "max_age": (config.retention_ms or 0) * 1_000_000,
        "max_bytes": config.retention_bytes or -1,
        "max_msgs": -1,
        "allow_atomic": True,
        "allow_direct": True,
        "duplicate_window": duplicate_window_ns,
    }


def duplicate_window_ns(window_seconds: float, retention_ms: int | None) -> int:
    """JetStream refuses a dedup window longer than max_age: the window, capped at the retention."""
    window = int(window_seconds * 1e9)
    return min(window, retention_ms * 1_000_000) if retention_ms else window


def encode(record: RecordIn, timestamp_ms: int) -> bytes:
    """One record's frame (``timestamp_ms`` stands in for a record given 0)."""
    key, headers = record.key, record.headers
    head = _FRAME.pack(
        record.timestamp_ms or timestamp_ms,
        -1 if key is None else len(key),
        -1 if headers is None else len(headers),
    )
    return b"".join((head, key or b"", headers or b"", record.value))


class DedupedFrame(bytes):
    """A frame JetStream stores at most once per ``msg_id`` within the stream's duplicate window: sent with
    that ``Nats-Msg-Id`` (``client.JetStreamClient.append``)."""

    msg_id: str


def deduped(frame: bytes, dedupe_id: str) -> DedupedFrame:
    """``frame`` carrying the message id of ``dedupe_id`` (hashed: ids are any string, headers are not)."""
    out = DedupedFrame(frame)
    out.msg_id = "qc-key." + hashlib.sha256(dedupe_id.encode()).hexdigest()[:40]
    return out


def encode_deduped(record: RecordIn, timestamp_ms: int) -> bytes:
    """``encode``, carrying the record's dedupe id when it has one (``deduped``)."""
    frame = encode(record, timestamp_ms)
    return deduped(frame, record.dedupe_id) if record.dedupe_id else frame


def decode(offset: int, frame: bytes) -> Record:
    timestamp_ms, key_length, headers_length = _FRAME.unpack_from(frame)
    at = _FRAME.size
    key = None
    if key_length >= 0:
        key, at = frame[at : at + key_length], at + key_length
    headers = None
    if headers_length >= 0:
        headers, at = frame[at : at + headers_length], at + headers_length
    return Record(offset, timestamp_ms, frame[at:], key, headers)


def decode_columns(offsets: Sequence[int], frames: Sequence[bytes]) -> RecordColumns:
    """``decode`` of every frame, in columns: the frames' heads are read as arrays, and a run of frames with
    neither key nor headers (most) needs one slice per frame and nothing else."""
    n = len(frames)
    heads = b"".join([frame[:FRAME_BYTES] for frame in frames])
    if len(heads) == n * FRAME_BYTES:
        lengths = from_bytes("i", heads, "big")
        key_lengths, header_lengths = lengths[2::4], lengths[3::4]
    if len(heads) != n * FRAME_BYTES or key_lengths.count(-1) != n or header_lengths.count(-1) != n:
        return RecordColumns.of([decode(o, frame) for o, frame in zip(offsets, frames, strict=True)])
    timestamps = from_bytes("q", heads, "big")[0::2]
    values = [frame[FRAME_BYTES:] for frame in frames]
    return RecordColumns(
        array("q", offsets),
        timestamps,
        key_lengths,
        b"",
        header_lengths,
        b"",
        array("i", map(len, values)),
        b"".join(values),
    )


def timestamp_of(frame: bytes) -> int:
    return int(_FRAME.unpack_from(frame)[0])


# A commit record chunk's header naming the message ids of its deduplicated frames (``DedupedFrame``):
# ``<index in the chunk>=<msg id>`` joined by commas. In a header, not the payload, so a node of the
# release before reads the chunk as it always did (and applies it without them, as it always did).
DEDUPE_HEADER = "QC-Dedupe"


def chunks(topic_id: str, partition: int, frames: Sequence[bytes]) -> Iterator[tuple[bytes, str | None]]:
    """The frames of one partition's part of a transaction, cut into chunks of about ``CHUNK_BYTES``: each
    ``(payload, its DEDUPE_HEADER or None)``, so that recovery applies a part with its records' message ids
    as the committing node would have (a late commit record whose keyed record a retry stored since is
    refused, not stored twice)."""
    topic = topic_id.encode()
    head = struct.pack(">H", len(topic)) + topic
    parts: list[bytes] = []
    ids: list[str] = []
    size = 0
    for frame in frames:
        if (msg_id := getattr(frame, "msg_id", None)) is not None:
            ids.append(f"{len(parts) // 2}={msg_id}")
            size += len(msg_id) + 8
        parts.append(_LENGTH.pack(len(frame)))
        parts.append(frame)
        size += len(frame) + 4
        if size >= CHUNK_BYTES:
            yield head + _CHUNK_HEAD.pack(partition, len(parts) // 2) + b"".join(parts), ",".join(ids) or None
            parts, ids, size = [], [], 0
    if parts:
        yield head + _CHUNK_HEAD.pack(partition, len(parts) // 2) + b"".join(parts), ",".join(ids) or None


def read_chunk(chunk: bytes, dedupe: str | None = None) -> tuple[str, int, list[bytes]]:
    """``(topic_id, partition, frames)`` of one chunk; with its ``dedupe`` header, the frames it names as
    ``DedupedFrame``s."""
    (length,) = struct.unpack_from(">H", chunk)
    at = 2 + length
    topic_id = chunk[2:at].decode()
    partition, count = _CHUNK_HEAD.unpack_from(chunk, at)
    at += _CHUNK_HEAD.size
    frames = []
    for _ in range(count):
        (size,) = _LENGTH.unpack_from(chunk, at)
        at += 4
        frames.append(chunk[at : at + size])
        at += size
    for entry in dedupe.split(",") if dedupe else ():
        index, _, msg_id = entry.partition("=")
        frame = frames[int(index)] = DedupedFrame(frames[int(index)])
        frame.msg_id = msg_id
    return topic_id, partition, frames
