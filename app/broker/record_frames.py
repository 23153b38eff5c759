"""The bulk read's wire format, ``application/vnd.queuecore.records``: stored records framed in columns.

A bulk read (``reading.read_records``) answers the records a JSON stream read would render, without a JSON
object per message: each chunk the engine handed out (``LogEngine.read_columns``) becomes one frame whose
columns are the records' fields back to back. The engine hands out its records in columns already (the local
engine slices them out of its stored batches), so a frame is a few joins and array copies, and the message
ids laid out by runs of 128 offsets (``message_ids.encode_run_column``): no JSON object, dict or model per record, and a
record's stored headers are parsed only when it has user headers. The stored ``data`` bytes go out as they
were stored, exactly the bytes the JSON read splices into its answer. A reader turns a frame into Arrow
arrays without a loop per record (``queuecore_spark._records``).

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
Why not the stored batches as they lie: they keep internal headers (idempotency key, due time) beside the
user's and no message ids, old batches of the local engine are in rows, and JetStream's records come one NATS
message each; a frame carries exactly what the JSON read shows, in one layout for every engine.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Sequence

import orjson

from app.broker import message_ids
from app.broker.topics import TopicRef
from app.kit.arrays import to_bytes
from app.stores.log.protocol import RecordColumns

MEDIA_TYPE = "application/vnd.queuecore.records"
MAGIC = b"QCRF"
VERSION = 1
RESPONSE_HEADER = struct.Struct("<4sHHIqq")  # + the uint32 crc
FRAME_HEADER = struct.Struct("<III")  # + the uint32 crc
# A record's headers without user headers (``messages.encode_headers``: an idempotency key alone).
_NO_USER_HEADERS = b'{"h":null'


def encode(
    topic: TopicRef, partition: int, chunks: Sequence[RecordColumns], next_offset: int, earliest: int
) -> list[bytes]:
    """A bulk read's answer as the buffers to send back to back (one frame per non-empty chunk)."""
    frames = [encode_frame(topic, partition, columns) for columns in chunks if columns]
    head = RESPONSE_HEADER.pack(MAGIC, VERSION, 0, len(frames), next_offset, earliest)
    return [head + struct.pack("<I", zlib.crc32(head)), *frames]


def encode_frame(topic: TopicRef, partition: int, columns: RecordColumns) -> bytes:
    """One frame of the records in ``columns`` (at least one, in offset order)."""
    n = len(columns)
    offsets = columns.offsets
    first = offsets[0]
    if offsets[-1] - first == n - 1:  # dense, as they are unless retention raced the read
        ids, id_lengths = message_ids.encode_run_column(topic.id, partition, first, n, prefix=topic.id_prefix)
    else:
        each = [message_ids.encode(topic.id, partition, o, prefix=topic.id_prefix).encode() for o in offsets]
        ids, id_lengths = b"".join(each), array("i", map(len, each))
    header_counts, names, header_values = _user_headers(columns.header_lengths, columns.headers)
    name_bytes = [name.encode() for name in names]
    value_bytes = [value.encode() for value in header_values]
    parts = [
        to_bytes(offsets),
        to_bytes(columns.timestamps),
        to_bytes(id_lengths),
        to_bytes(columns.key_lengths),
        to_bytes(columns.value_lengths),
        to_bytes(header_counts),
        to_bytes(array("i", map(len, name_bytes))),
        to_bytes(array("i", map(len, value_bytes))),
        ids,
        columns.keys,
        columns.values,
        b"".join(name_bytes),
        b"".join(value_bytes),
    ]
    body_length = sum(map(len, parts))
    parts.append(bytes(-body_length % 8))
    body = b"".join(parts)
    head = FRAME_HEADER.pack(n, len(names), len(body))
    return head + struct.pack("<I", zlib.crc32(body, zlib.crc32(head))) + body


def _user_headers(lengths: array[int], stored: bytes) -> tuple[array[int], list[str], list[str]]:
    """Per record its count of user headers, and every name and value in order (as the JSON read shows
    them: ``messages.render_message``), from the records' stored headers (``lengths``: -1 for none)."""
    n = len(lengths)
    counts = array("i", bytes(4 * n))
    present = n - lengths.count(-1)
    # Stored headers of a record without user headers start with ``{"h":null``; JSON escapes the quotes in
    # names and values, so the text appears nowhere else. As many as records with headers: none has any.
    if present == 0 or stored.count(_NO_USER_HEADERS) == present:
        return counts, [], []
    names: list[str] = []
    values: list[str] = []
    at = 0
    for i, length in enumerate(lengths):
        if length < 0:
            continue
        raw = stored[at : at + length]
        at += length
        if raw.startswith(_NO_USER_HEADERS):
            continue
        user = orjson.loads(raw).get("h")
        if user:
            counts[i] = len(user)
            names += user.keys()
            values += user.values()
    return counts, names, values
