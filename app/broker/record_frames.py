"""The bulk read's wire format, ``application/vnd.queuecore.records``: stored records framed in columns.

A bulk read (``reading.read_records``) answers the records a JSON stream read would render, without a JSON
object per message: each chunk the engine handed out becomes one frame whose columns are the records' fields
back to back, built in one pass of ``map``s, comprehensions and ``join``s per frame: no JSON object, dict or
model per record (a record's stored headers are parsed only when it has user headers). The stored ``data`` bytes go out as they were stored,
exactly the bytes the JSON read splices into its answer. A reader turns a frame into Arrow arrays without
a loop per record (``queuecore_spark._records``).

Layout (all integers little-endian)::

    response header, 32 bytes
      0  4s      magic            b"QCRF"
      4  uint16  version          1
      6  uint16  flags            0
      8  uint32  frame_count
     12  int64   next_offset      where the next read starts (the JSON read's ``nextOffset``)
     20  int64   earliest_offset  the partition's first retained offset
     28  uint32  crc              CRC-32 (zlib) of bytes [0, 28)
    frame_count frames, each
      0  uint32  record_count     n >= 1
      4  uint32  header_count     m: user headers of the frame's records together
      8  uint32  body_length      bytes of the body that follows (a multiple of 8)
     12  uint32  crc              CRC-32 (zlib) of the frame's bytes [0, 12) and then of its body
     16  body:
           int64[n]  offset
           int64[n]  timestamp      epoch milliseconds
           int32[n]  id_length      the message id's ASCII bytes
           int32[n]  key_length     -1 when the message has no key
           int32[n]  data_length    the message's ``data`` as JSON text (``null`` is 4 bytes, never absent)
           int32[n]  header_count   the message's user headers
           int32[m]  name_length    header names, the records' in order
           int32[m]  value_length   header values
           ids, keys, data, header names, header values: each column's bytes back to back (UTF-8)
           0-7 zero bytes, so the body is a multiple of 8 long

Records are in offset order, across frames too. The checksums are end to end: a reader recomputes each
and refuses the whole answer on a mismatch, a length that overruns its frame, or bytes left over.
Why not the stored batches as they lie: a local batch interleaves each record's lengths with its bytes and
keeps internal headers (idempotency key, due time) beside the user's, so a reader would need a loop per
record to find the columns, and JetStream's records come one NATS message each; framing columns once on the
server keeps every reader loop-free.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Sequence
from operator import itemgetter

import orjson

from app.broker import message_ids
from app.broker.topics import TopicRef
from app.stores.log.protocol import Record

MEDIA_TYPE = "application/vnd.queuecore.records"
MAGIC = b"QCRF"
VERSION = 1
RESPONSE_HEADER = struct.Struct("<4sHHIqq")  # + the uint32 crc
FRAME_HEADER = struct.Struct("<III")  # + the uint32 crc
# A record's headers without user headers (``messages.encode_headers``: an idempotency key alone).
_NO_USER_HEADERS = b'{"h":null'

_offset_of = itemgetter(0)
_timestamp_of = itemgetter(1)
_value_of = itemgetter(2)
_key_of = itemgetter(3)
_headers_of = itemgetter(4)


def encode(
    topic: TopicRef, partition: int, chunks: Sequence[Sequence[Record]], next_offset: int, earliest: int
) -> list[bytes]:
    """A bulk read's answer as the buffers to send back to back (one frame per non-empty chunk)."""
    frames = [encode_frame(topic, partition, records) for records in chunks if records]
    head = RESPONSE_HEADER.pack(MAGIC, VERSION, 0, len(frames), next_offset, earliest)
    return [head + struct.pack("<I", zlib.crc32(head)), *frames]


def encode_frame(topic: TopicRef, partition: int, records: Sequence[Record]) -> bytes:
    """One frame of ``records`` (at least one, in offset order)."""
    n = len(records)
    offsets = array("q", map(_offset_of, records))
    first = offsets[0]
    if offsets[-1] - first == n - 1:  # dense, as they are unless retention raced the read
        ids = message_ids.encode_run(topic.id, partition, first, n, prefix=topic.id_prefix)
    else:
        ids = [message_ids.encode(topic.id, partition, o, prefix=topic.id_prefix).encode() for o in offsets]
    keys = list(map(_key_of, records))
    if keys.count(None) == n:
        key_lengths = array("i", [-1]) * n
        key_bytes = b""
    else:
        key_lengths = array("i", [-1 if k is None else len(k) for k in keys])
        key_bytes = b"".join([k for k in keys if k is not None])
    values = list(map(_value_of, records))
    header_counts, names, header_values = _user_headers(list(map(_headers_of, records)))
    name_bytes = [name.encode() for name in names]
    value_bytes = [value.encode() for value in header_values]
    parts = [
        offsets.tobytes(),
        array("q", map(_timestamp_of, records)).tobytes(),
        array("i", map(len, ids)).tobytes(),
        key_lengths.tobytes(),
        array("i", map(len, values)).tobytes(),
        header_counts.tobytes(),
        array("i", map(len, name_bytes)).tobytes(),
        array("i", map(len, value_bytes)).tobytes(),
        b"".join(ids),
        key_bytes,
        b"".join(values),
        b"".join(name_bytes),
        b"".join(value_bytes),
    ]
    body_length = sum(map(len, parts))
    parts.append(bytes(-body_length % 8))
    body = b"".join(parts)
    head = FRAME_HEADER.pack(n, len(names), len(body))
    return head + struct.pack("<I", zlib.crc32(body, zlib.crc32(head))) + body


def _user_headers(stored: list[bytes | None]) -> tuple[array[int], list[str], list[str]]:
    """Per record its count of user headers, and every name and value in order (as the JSON read shows
    them: ``messages.render_message``)."""
    n = len(stored)
    if stored.count(None) == n:
        return array("i", bytes(4 * n)), [], []
    counts = array("i", bytes(4 * n))
    names: list[str] = []
    values: list[str] = []
    for i, raw in enumerate(stored):
        if raw is None or raw.startswith(_NO_USER_HEADERS):
            continue
        user = orjson.loads(raw).get("h")
        if user:
            counts[i] = len(user)
            names += user.keys()
            values += user.values()
    return counts, names, values
