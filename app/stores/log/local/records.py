"""Record batches: the unit of writing, checksumming, recovery and transactions.

On-disk format (all integers little-endian; a segment's ``.log`` file is batches back to back)::

    batch header, 48 bytes
      0  int64   base_offset      offset of the first record (absolute)
      8  int32   batch_length     bytes after this field: the batch is 12 + batch_length bytes
     12  uint32  crc              CRC32C (Castagnoli) of bytes [16, end of batch)
     16  uint8   magic            how the records are laid out: 2, in columns (every batch written now);
                                  1, in rows (batches written before columns: still read, never written)
     17  uint8   attributes       magic 1 only, bit 0: ABSOLUTE_TIMESTAMPS (see below); else 0
     18  uint16  reserved         0
     20  int32   record_count     n >= 1
     24  int64   base_timestamp   timestamp (ms) of the first record
     32  int64   max_timestamp    largest record timestamp in the batch
     40  int64   txn_id           0 = not part of a multi-partition append (see ``committer``)
    magic 2: the records in columns; record i has offset base_offset + i (offsets are dense)
      int64[n]  timestamp        epoch milliseconds
      int32[n]  key_length       -1 for None
      int32[n]  headers_length   -1 for None
      int32[n]  value_length
      keys, headers, values: each column's bytes back to back (a None adds nothing)
    magic 1: the records in rows, each
      0  int32   offset_delta     offset - base_offset (0, 1, 2, ...)
      4  int32   timestamp_delta  timestamp - base_timestamp   (int64 absolute timestamp instead when
                                  ABSOLUTE_TIMESTAMPS is set: a batch spanning more than ~24 days)
      .  int32   key_length       -1 for None
      .  int32   headers_length   -1 for None
      .  int32   value_length
      .  key bytes, headers bytes, value bytes

Either way a record costs 20 bytes of framing and a batch 48.

Invariants and choices:
* The CRC covers everything after the crc field, so a torn or bit-flipped batch fails ``ensure_valid``.
  Like Kafka's, it leaves out ``base_offset`` (and the length, which a torn write breaks anyway); the
  loader checks that base offsets are contiguous instead.
* A batch is written whole by one writer and becomes visible whole (the high-watermark only moves across
  batch boundaries), so readers never see a partial batch.
* Why columns: a bulk read (``batch_columns``) takes a batch's records as they lie, a few slices per batch
  and no work per record, and encoding builds each column with one ``map`` or comprehension (values alone,
  ``ValueRecords``, with no Python loop at all). Rows needed a loop per record both ways. Decoding to
  ``Record``s costs about the same either way.
* Encoding is the append hot path: one ``b"".join`` and one CRC per batch, and the header is kept as a
  separate buffer (``pwritev``) so the body is never copied again.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, pairwise, repeat
from operator import itemgetter
from typing import NamedTuple, cast

from crc32c import crc32c

from app.kit.arrays import from_bytes, to_bytes
from app.stores.log.protocol import (
    LogEngineError,
    Record,
    RecordColumns,
    RecordIn,
    ValueRecords,
    stored_length,
)

MAGIC = 2  # records in columns: what every batch is written as
MAGIC_ROWS = 1  # records in rows: batches written before columns (read, never written)
ABSOLUTE_TIMESTAMPS = 0x01  # of a magic 1 batch

HEADER = struct.Struct("<qiIBBHiqqq")
HEADER_SIZE = HEADER.size  # 48
_PREFIX = struct.Struct("<qiI")  # base_offset, batch_length, crc
_TAIL = struct.Struct("<BBHiqqq")  # the CRC-covered part of the header
_LENGTH_OVERHEAD = 12  # base_offset + batch_length
_MIN_LENGTH = HEADER_SIZE - _LENGTH_OVERHEAD  # crc + the rest of the header
RECORD = struct.Struct("<iiiii")  # a magic 1 record's framing
RECORD_ABS = struct.Struct("<iqiii")
COLUMN_FRAMING = 20  # a magic 2 record's: its timestamp and three lengths
# A batch longer than this is treated as corrupt (a flipped length bit must not make us read 2 GiB).
MAX_BATCH_BYTES = 1 << 30
# The largest record (key + headers + value) the local engine takes: far above the API's message limit,
# far below a batch's.
MAX_RECORD_BYTES = 8 << 20
_ABSENT = struct.pack("<i", -1)  # the length of a None key or headers
_SINGLE = struct.Struct("<qiii")  # the framing of a batch of one record

_value_of = itemgetter(0)  # of a RecordIn
_key_of = itemgetter(1)
_headers_of = itemgetter(2)
_timestamp_of = itemgetter(3)


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
    """Encode ``records`` as one batch (magic 2: in columns) starting at ``base_offset``.

    A record whose ``timestamp_ms`` is 0 (unset) is stamped with ``now_ms`` (append time).
    """
    n = len(records)
    if not n:
        raise ValueError("a batch holds at least one record")
    try:
        if n == 1:
            parts, first, largest = _single(records[0], now_ms)
        elif isinstance(records, ValueRecords):
            parts, first, largest = _value_columns(records, now_ms)
        else:
            parts, first, largest = _columns_of(records, now_ms)
    except (OverflowError, struct.error):
        raise ValueError("a record's timestamp or length is out of range") from None
    body = b"".join(parts)
    tail = _TAIL.pack(MAGIC, 0, 0, n, first, largest, txn_id)
    crc = crc32c(body, crc32c(tail))
    length = _MIN_LENGTH + len(body)
    if length + _LENGTH_OVERHEAD > MAX_BATCH_BYTES:
        raise ValueError(f"batch of {length} bytes exceeds the {MAX_BATCH_BYTES} byte limit")
    return EncodedBatch(_PREFIX.pack(base_offset, length, crc) + tail, body, n, largest)


def _single(record: RecordIn, now_ms: int) -> tuple[list[bytes], int, int]:
    # A single publish's batch: one pack, not four columns.
    value, key, headers, timestamp = record[:4]
    timestamp = timestamp or now_ms
    framing = _SINGLE.pack(
        timestamp, -1 if key is None else len(key), -1 if headers is None else len(headers), len(value)
    )
    return [framing, key or b"", headers or b"", value], timestamp, timestamp


def _value_columns(records: ValueRecords, now_ms: int) -> tuple[list[bytes], int, int]:
    # Values alone at one timestamp: every column but the values' lengths is one value repeated.
    values = records.values
    n = len(values)
    timestamp = records.timestamp_ms or now_ms
    none = to_bytes(array("i", [-1]) * n)
    lengths = to_bytes(array("i", map(len, values)))
    return [to_bytes(array("q", [timestamp]) * n), none, none, lengths, *values], timestamp, timestamp


def _columns_of(records: Sequence[RecordIn], now_ms: int) -> tuple[list[bytes], int, int]:
    n = len(records)
    timestamps = array("q", map(_timestamp_of, records))
    if 0 in timestamps:
        timestamps = array("q", [t or now_ms for t in timestamps])
    keys = list(map(_key_of, records))
    headers = list(map(_headers_of, records))
    values = list(map(_value_of, records))
    key_lengths, key_bytes = _optional_column(keys, n)
    header_lengths, header_bytes = _optional_column(headers, n)
    parts = [
        to_bytes(timestamps),
        key_lengths,
        header_lengths,
        to_bytes(array("i", map(len, values))),
        *key_bytes,
        *header_bytes,
        *values,
    ]
    return parts, timestamps[0], max(timestamps)


def _optional_column(fields: list[bytes | None], n: int) -> tuple[bytes, list[bytes]]:
    """The lengths (-1 for None) of a column that may be absent, and its present fields."""
    absent = fields.count(None)
    if absent == n:
        return to_bytes(array("i", [-1]) * n), []
    if absent == 0:
        present = cast("list[bytes]", fields)
        return to_bytes(array("i", map(len, present))), present
    lengths = array("i", [-1 if f is None else len(f) for f in fields])
    return to_bytes(lengths), [f for f in fields if f is not None]


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
    if header.magic not in (MAGIC, MAGIC_ROWS):
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
    window = _Window(start_offset, end_offset, max_records, max_bytes)
    if header.magic != MAGIC:
        return _decode_rows(buf, position, header, out, window, size)
    if header.record_count == 1:
        return _decode_single(buf, position, header, out, window, size)
    return _decode_columns(buf, position, header, out, window, size)


class _Window(NamedTuple):
    """What ``decode_batch`` takes of a batch: offsets in ``[start_offset, end_offset)``, while ``out`` holds
    fewer than ``max_records`` and the payload stays within ``max_bytes``."""

    start_offset: int
    end_offset: int
    max_records: int
    max_bytes: int


def _decode_columns(
    buf: bytes, position: int, header: BatchHeader, out: list[Record], window: _Window, size: int
) -> int:
    start_offset, end_offset, max_records, max_bytes = window
    base = header.base_offset
    columns = _BatchColumns.read(buf, position, header)
    lo = max(0, start_offset - base)
    end = min(header.record_count, end_offset - base)
    hi = min(end, lo + max(0, max_records - len(out)))
    if lo >= hi:
        return _Full(size) if lo < end else size
    value_lengths = columns.value_lengths[lo:hi]
    if columns.no_keys and columns.no_headers:
        needs: Sequence[int] = value_lengths
    else:
        needs = payload_sizes(columns.key_lengths[lo:hi], columns.header_lengths[lo:hi], value_lengths)
    full = hi < end
    if size + sum(needs) > max_bytes:  # the limit cuts this batch
        hi = lo + records_that_fit(needs, size, max_bytes, first=not out)
        full = True
        needs = needs[: hi - lo]
        value_lengths = value_lengths[: hi - lo]
    values_at = columns.values_at + sum(columns.value_lengths[:lo])
    ends = list(accumulate(value_lengths, initial=values_at))
    values = [buf[start:stop] for start, stop in pairwise(ends)]
    keys = repeat(None) if columns.no_keys else _fields(buf, columns.keys_at, columns.key_lengths, lo, hi)
    headers = (
        repeat(None)
        if columns.no_headers
        else _fields(buf, columns.headers_at, columns.header_lengths, lo, hi)
    )
    out += map(Record, range(base + lo, base + hi), columns.timestamps[lo:hi], values, keys, headers)
    size += sum(needs)
    return _Full(size) if full else size


def payload_sizes(
    key_lengths: array[int], header_lengths: array[int], value_lengths: array[int]
) -> list[int]:
    """Each record's payload (key + headers + value: what ``max_bytes`` counts) from its lengths."""
    return [
        max(0, k) + max(0, h) + v for k, h, v in zip(key_lengths, header_lengths, value_lengths, strict=True)
    ]


def records_that_fit(needs: Sequence[int], size: int, max_bytes: int, *, first: bool) -> int:
    """How many of the records whose payloads are ``needs``, in order, a read holding ``size`` bytes takes
    within ``max_bytes``: at least one when it holds none yet (``first``: a read's first record always)."""
    fit = bisect_right(list(accumulate(needs, initial=size)), max_bytes) - 1
    return max(fit, 1 if first and needs else 0)


def _decode_single(
    buf: bytes, position: int, header: BatchHeader, out: list[Record], window: _Window, size: int
) -> int:
    start_offset, end_offset, max_records, max_bytes = window
    # A single publish's batch: one unpack and three slices.
    offset = header.base_offset
    if not start_offset <= offset < end_offset:
        return size
    at = position + HEADER_SIZE
    if at + COLUMN_FRAMING > position + header.size:
        raise CorruptRecordError(f"the framing of a record overruns the batch at {position}")
    timestamp, kl, hl, vl = _SINGLE.unpack_from(buf, at)
    keys_at = at + COLUMN_FRAMING
    headers_at = keys_at + max(0, kl)
    values_at = headers_at + max(0, hl)
    if kl < -1 or hl < -1 or vl < 0 or values_at + vl != position + header.size:
        raise CorruptRecordError(f"the record's lengths do not fill the batch at {position}")
    need: int = values_at + vl - keys_at
    if len(out) >= max_records or (out and size + need > max_bytes):
        return _Full(size)
    key = None if kl < 0 else buf[keys_at:headers_at]
    headers = None if hl < 0 else buf[headers_at:values_at]
    out.append(Record(offset, timestamp, buf[values_at : values_at + vl], key, headers))
    return size + need


def _fields(buf: bytes, at: int, lengths: array[int], lo: int, hi: int) -> list[bytes | None]:
    """Fields ``lo`` … ``hi - 1`` of a column that may be absent (-1) and starts at ``at``."""
    at += stored_length(lengths[:lo])
    out: list[bytes | None] = []
    for n in lengths[lo:hi]:
        if n < 0:
            out.append(None)
        else:
            out.append(buf[at : at + n])
            at += n
    return out


class _BatchColumns(NamedTuple):
    """A magic 2 batch's length columns, and where its key, header and value bytes start in the buffer;
    ``no_keys``/``no_headers``: no record of the batch has one."""

    timestamps: array[int]
    key_lengths: array[int]
    header_lengths: array[int]
    value_lengths: array[int]
    keys_at: int
    headers_at: int
    values_at: int
    no_keys: bool
    no_headers: bool

    @classmethod
    def read(cls, buf: bytes, position: int, header: BatchHeader) -> _BatchColumns:
        """The columns of the (CRC-checked) batch at ``position``; ``CorruptRecordError`` when its lengths do
        not fill it exactly."""
        n = header.record_count
        at = position + HEADER_SIZE
        end = position + header.size
        if at + COLUMN_FRAMING * n > end:
            raise CorruptRecordError(f"the framing of {n} records overruns the batch at {position}")
        key_lengths, key_bytes = _optional_lengths(buf, at + 8 * n, n)
        header_lengths, header_bytes = _optional_lengths(buf, at + 12 * n, n)
        value_lengths = from_bytes("i", buf[at + 16 * n : at + 20 * n])
        if min(value_lengths) < 0:
            raise CorruptRecordError(f"a negative length in the batch at {position}")
        keys_at = at + COLUMN_FRAMING * n
        headers_at = keys_at + max(0, key_bytes)
        values_at = headers_at + max(0, header_bytes)
        if values_at + sum(value_lengths) != end:
            raise CorruptRecordError(f"the records' lengths do not fill the batch at {position}")
        timestamps = from_bytes("q", buf[at : at + 8 * n])
        return cls(
            timestamps,
            key_lengths,
            header_lengths,
            value_lengths,
            keys_at,
            headers_at,
            values_at,
            key_bytes < 0,
            header_bytes < 0,
        )


def _optional_lengths(buf: bytes, start: int, n: int) -> tuple[array[int], int]:
    """The lengths of a column that may be absent (-1), and its bytes (-1: absent from every record);
    ``CorruptRecordError`` for a length below -1. A column absent from every record (no key, no headers: most batches) is told by comparing its
    bytes, not by reading each length."""
    raw = buf[start : start + 4 * n]
    if raw == _ABSENT * n:
        return array("i", [-1]) * n, -1
    lengths = from_bytes("i", raw)
    if min(lengths) < -1:
        raise CorruptRecordError(f"a length below -1 at {start}")
    return lengths, stored_length(lengths)


def batch_columns(
    buf: bytes, position: int, header: BatchHeader, start_offset: int, end_offset: int
) -> RecordColumns:
    """The batch's records with ``start_offset <= offset < end_offset``, in columns: a few slices of a
    magic 2 batch, with no work per record (a magic 1 batch is decoded record by record)."""
    base = header.base_offset
    if header.magic != MAGIC:
        records: list[Record] = []
        _decode_rows(buf, position, header, records, _Window(start_offset, end_offset, 1 << 62, 1 << 62), 0)
        return RecordColumns.of(records)
    columns = _BatchColumns.read(buf, position, header)
    n = header.record_count
    lo = max(0, start_offset - base)
    hi = max(lo, min(n, end_offset - base))
    key_lengths, header_lengths, value_lengths = (
        columns.key_lengths,
        columns.header_lengths,
        columns.value_lengths,
    )
    timestamps = columns.timestamps
    if lo or hi < n:
        k = columns.keys_at + stored_length(key_lengths[:lo])
        h = columns.headers_at + stored_length(header_lengths[:lo])
        v = columns.values_at + sum(value_lengths[:lo])
        key_lengths, header_lengths, value_lengths = (
            key_lengths[lo:hi],
            header_lengths[lo:hi],
            value_lengths[lo:hi],
        )
        timestamps = timestamps[lo:hi]
        k_end, h_end, v_end = (
            k + stored_length(key_lengths),
            h + stored_length(header_lengths),
            v + sum(value_lengths),
        )
    else:  # the whole batch (most of a bulk read's): its columns as they lie
        k, h, v = columns.keys_at, columns.headers_at, columns.values_at
        k_end, h_end, v_end = h, v, position + header.size
    return RecordColumns(
        array("q", range(base + lo, base + hi)),
        timestamps,
        key_lengths,
        buf[k:k_end],
        header_lengths,
        buf[h:h_end],
        value_lengths,
        buf[v:v_end],
    )


def _decode_rows(
    buf: bytes, position: int, header: BatchHeader, out: list[Record], window: _Window, size: int
) -> int:
    start_offset, end_offset, max_records, max_bytes = window
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
