"""Committed reads of one partition: by offset (from the in-memory tail or the segment files) and by time.

Functions over a partition's segments, called by ``PartitionLog`` (in its read executor for file reads) with
the high-watermark ``hw`` it read first: nothing at or past ``hw`` is ever returned. A read that needs a
segment's files when the process has no descriptor left fails at once (``FilesExhausted``, 503).
"""

from __future__ import annotations

from collections.abc import Reversible

from app.stores.log.local.records import BatchHeader, decode_batch, is_full, iter_headers, read_header
from app.stores.log.local.segment import Segment
from app.stores.log.local.segments import LogSegments, OpenSegments, SegmentDeleted
from app.stores.log.protocol import Record

# A read fetches up to this much beyond ``max_bytes`` (it starts at an indexed batch before the offset).
_READ_SLACK = 64 * 1024
_SCAN_CHUNK = 1 << 20


def read_tail(
    tail: Reversible[tuple[BatchHeader, bytes]], offset: int, max_records: int, max_bytes: int, hw: int
) -> list[Record]:
    """A read served from the in-memory tail (``offset`` is within it)."""
    batches: list[tuple[BatchHeader, bytes]] = []
    for header, buf in reversed(tail):  # readers are mostly near the end
        batches.append((header, buf))
        if header.base_offset <= offset:
            break
    out: list[Record] = []
    size = 0
    for header, buf in reversed(batches):
        size, full = _take(buf, 0, header, out, offset, hw, max_records, max_bytes, size)
        if full:
            break
    return out


def read_segments(
    segments: LogSegments,
    open_segments: OpenSegments,
    offset: int,
    max_records: int,
    max_bytes: int,
    hw: int,
    index_interval_bytes: int,
) -> list[Record]:
    """A read from the segment files (blocking: run it in the read executor)."""
    out: list[Record] = []
    size = 0
    for handle in segments.from_offset(offset):
        if handle.base_offset >= hw:
            break
        try:
            segment = open_segments.acquire(handle, retry=False)
        except SegmentDeleted:
            continue  # retention removed it meanwhile: go on from the next segment
        try:
            size, stop = _read_segment(
                segment, offset, max_records, max_bytes, hw, out, size, index_interval_bytes
            )
        finally:
            open_segments.release(handle)
        if stop:
            break
    return out


def _read_segment(
    segment: Segment,
    offset: int,
    max_records: int,
    max_bytes: int,
    hw: int,
    out: list[Record],
    size: int,
    index_interval_bytes: int,
) -> tuple[int, bool]:
    _, position = segment.position_for(offset)
    end = segment.size
    while position < end:
        want = min(end - position, max(max_bytes - size, 0) + index_interval_bytes + _READ_SLACK)
        buf = segment.read(position, want)
        first = read_header(buf)
        if first is None:
            break
        if first.base_offset >= hw:
            return size, True
        if first.size > len(buf):
            buf = segment.read(position, first.size)
        consumed = 0
        for pos, header in iter_headers(buf):
            if header.base_offset >= hw:
                return size, True
            consumed = pos + header.size
            if header.next_offset <= offset:
                continue
            size, full = _take(buf, pos, header, out, offset, hw, max_records, max_bytes, size)
            if full:
                return size, True
        if consumed == 0:
            break
        position += consumed
    return size, False


def offset_for_time(segments: LogSegments, open_segments: OpenSegments, timestamp: int, hw: int) -> int:
    """The first offset below ``hw`` whose timestamp is ``>= timestamp``, else ``hw`` (blocking)."""
    for handle in segments.values():
        if handle.base_offset >= hw:
            break
        try:
            segment = open_segments.acquire(handle, retry=False)
        except SegmentDeleted:
            continue
        try:
            if segment.max_timestamp < timestamp:
                continue
            found = _scan_for_time(segment, timestamp, hw)
            if found is not None:
                return found
        finally:
            open_segments.release(handle)
    return hw


def _scan_for_time(segment: Segment, timestamp: int, hw: int) -> int | None:
    start = segment.offset_for_timestamp_hint(timestamp)
    _, position = segment.position_for(start)
    end = segment.size
    while position < end:
        buf = segment.read(position, min(end - position, _SCAN_CHUNK))
        first = read_header(buf)
        if first is None:
            return None
        if first.size > len(buf):
            buf = segment.read(position, first.size)
        consumed = 0
        for pos, header in iter_headers(buf):
            if header.base_offset >= hw:
                return hw
            consumed = pos + header.size
            if header.max_timestamp < timestamp:
                continue
            records: list[Record] = []
            decode_batch(buf, pos, header, records, end_offset=hw)
            for record in records:
                if record.timestamp_ms >= timestamp:
                    return record.offset
        if consumed == 0:
            return None
        position += consumed
    return None


def _take(
    buf: bytes,
    position: int,
    header: BatchHeader,
    out: list[Record],
    offset: int,
    hw: int,
    max_records: int,
    max_bytes: int,
    size: int,
) -> tuple[int, bool]:
    """Decode a batch's records in ``[offset, hw)`` into ``out``: the new size, and whether the read is full."""
    size = decode_batch(
        buf,
        position,
        header,
        out,
        start_offset=offset,
        end_offset=hw,
        max_records=max_records,
        max_bytes=max_bytes,
        size=size,
    )
    return size, is_full(size) or len(out) >= max_records
