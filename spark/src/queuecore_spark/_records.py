"""The bulk read's answer (``application/vnd.queuecore.records``) decoded into Arrow, with no loop per record.

The format is the server's (``docs/api.md``, "Bulk reads"): a 32-byte response header, then frames of
columns, each frame with a CRC-32 over its header and body. Every checksum is recomputed here before a
byte of the frame is used; a mismatch, a length that overruns its frame, a frame count that disagrees, or
bytes left over raise ``CorruptResponse``, so a damaged answer fails the task and never becomes a wrong
row. The columns are then views of the answer's own bytes: the fixed-width arrays are Arrow buffers over
it, string offsets are the cumulative sums of the lengths (``pyarrow.compute``), and a key's -1 length
becomes its validity bit.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ._http import QueueCoreError

MAGIC = b"QCRF"
VERSION = 1
_RESPONSE = struct.Struct("<4sHHIqqI")
_FRAME = struct.Struct("<IIII")
_ZERO = pa.array([0], pa.int32())


class CorruptResponse(QueueCoreError):
    """A bulk read's answer failed its checks: it was damaged between the service and here."""

    def __init__(self, message: str) -> None:
        super().__init__("CORRUPT_RESPONSE", message)

    def __reduce__(self) -> tuple[object, ...]:
        return (CorruptResponse, (self.message,))


@dataclass(frozen=True)
class Decoded:
    """One bulk read: its records as Arrow batches (one per frame), where the next read starts, and the
    partition's earliest retained offset."""

    batches: list[pa.RecordBatch]
    next_offset: int
    earliest_offset: int

    @property
    def count(self) -> int:
        return sum(b.num_rows for b in self.batches)


def decode(body: bytes, topic: str, partition: int, schema: pa.Schema) -> Decoded:
    """``body`` (a whole answer) as batches of ``schema`` (the data source's read schema in Arrow)."""
    if len(body) < _RESPONSE.size:
        raise CorruptResponse(f"a bulk read answer of {len(body)} bytes is shorter than its header")
    magic, version, _flags, frame_count, next_offset, earliest, crc = _RESPONSE.unpack_from(body)
    if zlib.crc32(memoryview(body)[: _RESPONSE.size - 4]) != crc:
        raise CorruptResponse("the bulk read answer's header failed its CRC")
    if magic != MAGIC or version != VERSION:
        raise CorruptResponse(f"not a bulk read answer this reader knows ({magic!r}, version {version})")
    buffer = pa.py_buffer(body)
    view = memoryview(body)
    batches = []
    position = _RESPONSE.size
    for index in range(frame_count):
        if position + _FRAME.size > len(body):
            raise CorruptResponse(f"frame {index} of {frame_count} is missing")
        n, m, length, crc = _FRAME.unpack_from(body, position)
        start, end = position + _FRAME.size, position + _FRAME.size + length
        if end > len(body):
            raise CorruptResponse(f"frame {index} overruns the answer")
        if zlib.crc32(view[start:end], zlib.crc32(view[position : position + 12])) != crc:
            raise CorruptResponse(f"frame {index} failed its CRC")
        batches.append(_frame(buffer, start, end, n, m, topic, partition, schema, index))
        position = end
    if position != len(body):
        raise CorruptResponse(f"{len(body) - position} bytes follow the last frame")
    return Decoded(batches, next_offset, earliest)


def _frame(
    buffer: pa.Buffer,
    start: int,
    end: int,
    n: int,
    m: int,
    topic: str,
    partition: int,
    schema: pa.Schema,
    index: int,
) -> pa.RecordBatch:
    fixed = 32 * n + 8 * m
    if n < 1 or start + fixed > end:
        raise CorruptResponse(f"frame {index} is too short for its {n} records")

    def ints(at: int, count: int, kind: pa.DataType) -> pa.Array:
        return pa.Array.from_buffers(kind, count, [None, buffer.slice(at, count * kind.bit_width // 8)])

    offsets = ints(start, n, pa.int64())
    timestamps = ints(start + 8 * n, n, pa.int64())
    at = start + 16 * n
    id_lengths, key_lengths, data_lengths, header_counts = (
        ints(at + 4 * n * i, n, pa.int32()) for i in range(4)
    )
    name_lengths = ints(at + 16 * n, m, pa.int32())
    value_lengths = ints(at + 16 * n + 4 * m, m, pa.int32())
    cursor = [start + fixed]

    def strings(lengths: pa.Array, count: int, nullable: bool = False) -> pa.Array:
        if not count:
            return pa.array([], pa.string())
        validity = None
        nulls = 0
        if pc.min(lengths).as_py() < (-1 if nullable else 0):
            raise CorruptResponse(f"frame {index} has a negative length")
        if nullable:
            valid = pc.greater_equal(lengths, 0)
            nulls = count - pc.sum(valid).as_py()
            if nulls:
                validity = valid.buffers()[1]
                lengths = pc.max_element_wise(lengths, 0)
        ends = pc.cumulative_sum(lengths.cast(pa.int64()))
        size = ends[count - 1].as_py()
        if cursor[0] + size > end:
            raise CorruptResponse(f"frame {index}'s columns overrun it")
        bounds = pa.concat_arrays([_ZERO, ends.cast(pa.int32())])
        out = pa.StringArray.from_buffers(
            count, bounds.buffers()[1], buffer.slice(cursor[0], size), validity, nulls
        )
        cursor[0] += size
        return out

    ids = strings(id_lengths, n)
    keys = strings(key_lengths, n, nullable=True)
    data = strings(data_lengths, n)
    if pc.min(header_counts).as_py() < 0 or pc.sum(header_counts).as_py() != m:
        raise CorruptResponse(f"frame {index}'s header counts do not add up to {m}")
    names = strings(name_lengths, m)
    values = strings(value_lengths, m)
    if not 0 <= end - cursor[0] < 8:
        raise CorruptResponse(f"frame {index} has {end - cursor[0]} bytes past its columns")
    header_bounds = pa.concat_arrays([_ZERO, pc.cumulative_sum(header_counts).cast(pa.int32())])
    headers = pa.MapArray.from_arrays(header_bounds, names, values, type=schema.field("headers").type)
    return pa.RecordBatch.from_arrays(
        [
            ids,
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            offsets,
            keys,
            data,
            headers,
            pc.multiply(timestamps, 1000).cast(schema.field("timestamp").type),
        ],
        schema=schema,
    )
