"""Record batches: the unit of writing, checksumming, recovery and transactions.

On-disk format (all integers little-endian; a segment's ``.log`` file is batches back to back)::

    batch header, 48 bytes
      0  int64   base_offset      offset of the first record (absolute)
      8  int32   batch_length     bytes after this field: the batch is 12 + batch_length bytes
     12  uint32  crc              CRC32C (Castagnoli) of bytes [16, end of batch)
     16  uint8   magic            format version, 1
     17  uint8   attributes       bit 0: ABSOLUTE_TIMESTAMPS (records carry int64 timestamps)
     18  uint16  reserved         0
     20  int32   record_count     >= 1
     24  int64   base_timestamp   timestamp (ms) of the first record
     32  int64   max_timestamp    largest record timestamp in the batch
     40  int64   txn_id           0 = not part of a multi-partition append (see ``committer``)
    record_count records, each
      0  int32   offset_delta     offset - base_offset (0, 1, 2, ... : offsets are dense)
      4  int32   timestamp_delta  timestamp - base_timestamp   (int64 absolute timestamp instead when
                                  ABSOLUTE_TIMESTAMPS is set: a batch spanning more than ~24 days)
      .  int32   key_length       -1 for None
      .  int32   headers_length   -1 for None
      .  int32   value_length
      .  key bytes, headers bytes, value bytes

So a record costs 20 bytes of framing (24 with absolute timestamps) and a batch 48.

Invariants and choices:
* The CRC covers everything after the crc field, so a torn or bit-flipped batch fails ``ensure_valid``.
  Like Kafka's, it leaves out ``base_offset`` (and the length, which a torn write breaks anyway); the
  loader checks that base offsets are contiguous instead.
* A batch is written whole by one writer and becomes visible whole (the high-watermark only moves across
  batch boundaries), so readers never see a partial batch.
* Encoding is the append hot path: one ``struct.pack`` per record, one ``b"".join`` and one CRC per batch,
  and the header is kept as a separate buffer (``pwritev``) so the body is never copied again. Values
  alone (``ValueRecords``, a batch of bare messages) are framed without a Python loop.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import NamedTuple

from crc32c import crc32c

from app.stores.log.protocol import LogEngineError, Record, RecordIn, ValueRecords

MAGIC = 1
ABSOLUTE_TIMESTAMPS = 0x01

HEADER = struct.Struct("<qiIBBHiqqq")
HEADER_SIZE = HEADER.size  # 48
_PREFIX = struct.Struct("<qiI")  # base_offset, batch_length, crc
_TAIL = struct.Struct("<BBHiqqq")  # the CRC-covered part of the header
_LENGTH_OVERHEAD = 12  # base_offset + batch_length
_MIN_LENGTH = HEADER_SIZE - _LENGTH_OVERHEAD  # crc + the rest of the header
RECORD = struct.Struct("<iiiii")
RECORD_ABS = struct.Struct("<iqiii")
# A batch longer than this is treated as corrupt (a flipped length bit must not make us read 2 GiB).
MAX_BATCH_BYTES = 1 << 30
# The largest record (key + headers + value) the local engine takes: far above the API's message limit,
# far below a batch's.
MAX_RECORD_BYTES = 8 << 20

_INT32_MAX = (1 << 31) - 1


class CorruptRecordError(LogEngineError):
    """A batch failed validation (CRC, length, magic); recovery truncates the log before it."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    crc: int
    magic: int
    attributes: int
    reserved: int
    record_count: int
    base_timestamp: int
    max_timestamp: int
    txn_id: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return _LENGTH_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


class EncodedBatch(NamedTuple):
    """A batch ready to write: ``header`` and ``body`` are written back to back."""

    header: bytes
    body: bytes
    record_count: int
    max_timestamp: int

    @property
    def size(self) -> int:
        return len(self.header) + len(self.body)


def encode_batch(
    records: Sequence[RecordIn], base_offset: int, *, txn_id: int = 0, now_ms: int = 0
) -> EncodedBatch:
    """Encode ``records`` as one batch starting at ``base_offset``.

    A record whose ``timestamp_ms`` is 0 (unset) is stamped with ``now_ms`` (append time).
    """
    if not records:
        raise ValueError("a batch holds at least one record")
    try:
        if isinstance(records, ValueRecords):
            body, first, largest = _encode_values(records, now_ms)
        else:
            body, first, largest = _encode_delta(records, now_ms)
        attributes = 0
    except struct.error:
        # Timestamps spread over more than int32 milliseconds: store them whole.
        body, first, largest = _encode_absolute(records, now_ms)
        attributes = ABSOLUTE_TIMESTAMPS
    return _frame(body, base_offset, len(records), first, largest, txn_id, attributes)


def _frame(
    body: bytes, base_offset: int, count: int, first: int, largest: int, txn_id: int, attributes: int
) -> EncodedBatch:
    tail = _TAIL.pack(MAGIC, attributes, 0, count, first, largest, txn_id)
    crc = crc32c(body, crc32c(tail))
    length = _MIN_LENGTH + len(body)
    if length + _LENGTH_OVERHEAD > MAX_BATCH_BYTES:
        raise ValueError(f"batch of {length} bytes exceeds the {MAX_BATCH_BYTES} byte limit")
    return EncodedBatch(_PREFIX.pack(base_offset, length, crc) + tail, body, count, largest)


def _encode_delta(records: Sequence[RecordIn], now_ms: int) -> tuple[bytes, int, int]:
    # The hot loop: keep it to attribute loads, one pack and a few appends per record.
    parts: list[bytes] = []
    append = parts.append
    pack = RECORD.pack
    first = records[0].timestamp_ms or now_ms
    largest = first
    i = 0
    # A local counter, not enumerate(): no tuple per record on the hot path.
    for r in records:
        key = r.key
        headers = r.headers
        value = r.value
        ts = r.timestamp_ms or now_ms
        largest = max(largest, ts)
        if key is None:
            if headers is None:
                append(pack(i, ts - first, -1, -1, len(value)))
            else:
                append(pack(i, ts - first, -1, len(headers), len(value)))
                append(headers)
        else:
            append(pack(i, ts - first, len(key), -1 if headers is None else len(headers), len(value)))
            append(key)
            if headers is not None:
                append(headers)
        append(value)
        i += 1  # noqa: SIM113
    return b"".join(parts), first, largest


def _encode_values(records: ValueRecords, now_ms: int) -> tuple[bytes, int, int]:
    # _encode_delta of values alone at one timestamp: the framing differs only in index and length, so
    # it is packed by map() and interleaved with the values by slice assignment, with no Python loop.
    values = records.values
    timestamp = records.timestamp_ms or now_ms
    framing = map(RECORD.pack, range(len(values)), repeat(0), repeat(-1), repeat(-1), map(len, values))
    parts: list[bytes] = [b""] * (2 * len(values))
    parts[0::2] = framing
    parts[1::2] = values
    return b"".join(parts), timestamp, timestamp


def _encode_absolute(records: Sequence[RecordIn], now_ms: int) -> tuple[bytes, int, int]:
    parts: list[bytes] = []
    append = parts.append
    pack = RECORD_ABS.pack
    first = records[0].timestamp_ms or now_ms
    largest = first
    for i, r in enumerate(records):
        key, headers, value = r.key, r.headers, r.value
        ts = r.timestamp_ms or now_ms
        largest = max(largest, ts)
        append(
            pack(
                i,
                ts,
                -1 if key is None else len(key),
                -1 if headers is None else len(headers),
                len(value),
            )
        )
        if key is not None:
            append(key)
        if headers is not None:
            append(headers)
        append(value)
    return b"".join(parts), first, largest


def read_header(buf: bytes | memoryview, position: int = 0) -> BatchHeader | None:
    """The header of the batch at ``position``, or None if fewer than 48 bytes remain. Not validated."""
    if len(buf) - position < HEADER_SIZE:
        return None
    return BatchHeader._make(HEADER.unpack_from(buf, position))


def ensure_valid(buf: bytes | memoryview, position: int = 0) -> BatchHeader:
    """Validate the batch at ``position`` (complete, sane header, CRC); raise ``CorruptRecordError``.

    An incomplete batch (the buffer ends inside it) is reported as corrupt too: at the end of a log it
    is a torn write.
    """
    header = read_header(buf, position)
    if header is None:
        raise CorruptRecordError(f"incomplete batch header at {position}")
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unknown batch magic {header.magic} at {position}")
    if header.record_count < 1 or header.batch_length < _MIN_LENGTH or header.size > MAX_BATCH_BYTES:
        raise CorruptRecordError(f"impossible batch header at {position}: {header}")
    end = position + header.size
    if end > len(buf):
        raise CorruptRecordError(
            f"incomplete batch at {position}: {header.size} bytes, {len(buf) - position} present"
        )
    view = memoryview(buf)[position + 16 : end]
    actual = crc32c(view)
    if actual != header.crc:
        raise CorruptRecordError(
            f"CRC mismatch at {position}: stored {header.crc:#010x}, computed {actual:#010x}"
        )
    return header


def decode_batch(
    buf: bytes,
    position: int,
    header: BatchHeader,
    out: list[Record],
    *,
    start_offset: int = 0,
    end_offset: int = 1 << 62,
    max_records: int = 1 << 62,
    max_bytes: int = 1 << 62,
    size: int = 0,
) -> int:
    """Append the batch's records with ``start_offset <= offset < end_offset`` to ``out``.

    Stops once ``out`` holds ``max_records`` or the payload bytes (key + headers + value) would exceed
    ``max_bytes`` (counting from ``size``; the first record is always taken). Returns the new ``size``.
    """
    absolute = header.attributes & ABSOLUTE_TIMESTAMPS
    unpack = RECORD_ABS.unpack_from if absolute else RECORD.unpack_from
    step = RECORD_ABS.size if absolute else RECORD.size
    base = header.base_offset
    base_ts = 0 if absolute else header.base_timestamp
    p = position + HEADER_SIZE
    end = position + header.size
    for _ in range(header.record_count):
        if p + step > end:
            raise CorruptRecordError(f"record overruns its batch at {p}")
        od, td, kl, hl, vl = unpack(buf, p)
        p += step
        offset = base + od
        if offset >= end_offset:
            break
        need = (max(0, kl)) + (max(0, hl)) + vl
        if offset < start_offset:
            p += need
            continue
        if len(out) >= max_records or (out and size + need > max_bytes):
            return _Full(size)
        if kl < 0:
            key = None
        else:
            key = buf[p : p + kl]
            p += kl
        if hl < 0:
            headers = None
        else:
            headers = buf[p : p + hl]
            p += hl
        value = buf[p : p + vl]
        p += vl
        out.append(Record(offset, base_ts + td, value, key, headers))
        size += need
    return size


class _Full(int):
    """A size returned by ``decode_batch`` once a limit was reached (tested with ``is_full``)."""


def is_full(size: int) -> bool:
    """Whether ``decode_batch`` stopped on ``max_records`` / ``max_bytes``."""
    return isinstance(size, _Full)


def iter_headers(buf: bytes, position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each complete batch in ``buf`` from ``position`` (not validated)."""
    n = len(buf)
    while True:
        header = read_header(buf, position)
        if header is None or header.batch_length < _MIN_LENGTH or position + header.size > n:
            return
        yield position, header
        position += header.size
