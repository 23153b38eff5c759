"""Committed reads of one partition: by offset (from the in-memory tail or the segment files) and by time.

Functions over a partition's segments, called by ``PartitionLog`` (in its read executor for file reads) with
the high-watermark ``hw`` it read first: nothing at or past ``hw`` is ever returned. A read that needs a
segment's files when the process has no descriptor left fails at once (``FilesExhausted``, 503).

Every batch read from a file is CRC-checked before it is decoded: recovery checks only the active segment's
tail, so a bit flipped later in a sealed segment (a failing disk, a stray write) is found here, and the read
fails (``DamagedRecords``, 503) rather than hand out other bytes than were written. The in-memory tail
holds what this process wrote itself and is not checked again.

Indexes are checked as they are used: a bit flipped in a sealed segment's index can pass load's sanity
checks (entries still increasing) and send a read to a later batch (records silently skipped) or into the
middle of one. The batch an index entry points at must be the batch the entry names, and a seek by time must
start before its timestamp; when not, the segment is scanned from its start (slower, right) and a warning
names it.
"""

from __future__ import annotations

import logging
from collections.abc import Reversible
from typing import Protocol

from app.stores.errors import StoreUnavailable
from app.stores.log.local.records import (
    HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    batch_columns,
    decode_batch,
    ensure_valid,
    is_full,
    iter_headers,
    payload_sizes,
    read_header,
    records_that_fit,
)
from app.stores.log.local.segment import Segment
from app.stores.log.local.segments import LogSegments, OpenSegments, SegmentDeleted
from app.stores.log.protocol import EngineUnavailable, Record, RecordColumns

# A read fetches up to this much beyond ``max_bytes`` (it starts at an indexed batch before the offset).
_READ_SLACK = 64 * 1024
# A batch of fewer records than this is decoded as ``Record``s for a read in columns (``ColumnTaker``).
_FEW_RECORDS = 8
_SCAN_CHUNK = 1 << 20

logger = logging.getLogger("queuecore.log")
# Segments whose index was found pointing elsewhere (warned once each per process).
_misleading_indexes: set[str] = set()


class DamagedRecords(EngineUnavailable, StoreUnavailable):
    """A stored batch failed its CRC (or framing) check on read: the disk gave back other bytes than were
    written. The read answers 503 with a generic message; where and what (``str``) goes to the server log,
    and the engine's health says ``degraded`` (``LocalLogEngine.health``)."""

    def __init__(self, detail: str) -> None:
        StoreUnavailable.__init__(
            self, "Stored messages of this partition failed their checksum; the operator must restore them."
        )
        self.detail = detail

    def __str__(self) -> str:
        return self.detail


def read_tail(tail: Reversible[tuple[BatchHeader, bytes]], offset: int, hw: int, taker: Taker) -> None:
    """A read served from the in-memory tail (``offset`` is within it), into ``taker``."""
    batches: list[tuple[BatchHeader, bytes]] = []
    for header, buf in reversed(tail):  # readers are mostly near the end
        batches.append((header, buf))
        if header.base_offset <= offset:
            break
    for header, buf in reversed(batches):
        if taker.take(buf, 0, header, offset, hw):
            break


def read_segments(
    segments: LogSegments,
    open_segments: OpenSegments,
    offset: int,
    hw: int,
    index_interval_bytes: int,
    taker: Taker,
) -> None:
    """A read from the segment files into ``taker`` (blocking: run it in the read executor)."""
    for handle in segments.from_offset(offset):
        if handle.base_offset >= hw:
            break
        try:
            segment = open_segments.acquire(handle, retry=False)
        except SegmentDeleted:
            continue  # retention removed it meanwhile: go on from the next segment
        try:
            stop = _read_segment(segment, offset, hw, index_interval_bytes, taker)
        finally:
            open_segments.release(handle)
        if stop:
            break


def _read_segment(segment: Segment, offset: int, hw: int, index_interval_bytes: int, taker: Taker) -> bool:
    expected, position = _verified_position(segment, offset)
    end = segment.size
    while position < end:
        want = min(end - position, taker.bytes_wanted() + index_interval_bytes + _READ_SLACK)
        buf = segment.read(position, want)
        first = read_header(buf)
        if first is None or first.size < HEADER_SIZE or position + first.size > end:
            # Within the segment's committed size every byte belongs to a whole batch: a header that cannot
            # be read, or a length running past the end, is damage (reading on would skip records silently).
            raise DamagedRecords(f"{segment.name}: no whole batch at position {position} (offset {expected})")
        if first.size > len(buf):
            buf = segment.read(position, first.size)
        consumed = 0
        for pos, header in iter_headers(buf):
            # Offsets are contiguous; the base offset is outside the CRC (as in Kafka), so check it here.
            if header.base_offset != expected:
                raise DamagedRecords(
                    f"{segment.name}: the batch at position {position + pos} says offset {header.base_offset}, "
                    f"{expected} expected"
                )
            expected = header.next_offset
            if header.base_offset >= hw:
                return True
            consumed = pos + header.size
            if header.next_offset <= offset:
                continue
            try:
                ensure_valid(buf, pos)
                full = taker.take(buf, pos, header, offset, hw)
            except CorruptRecordError as exc:
                raise DamagedRecords(f"{segment.name}: offsets from {header.base_offset}: {exc}") from exc
            if full:
                return True
        position += consumed
    return False


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


def _verified_position(segment: Segment, offset: int) -> tuple[int, int]:
    """Where a scan for ``offset`` starts, ``(offset of the batch there, position)``: the offset index's
    entry, once the batch there is the batch the entry names; else (a damaged index) the segment's start."""
    indexed, position = segment.position_for(offset)
    if position == 0:
        return segment.base_offset, 0
    header = read_header(segment.read(position, HEADER_SIZE))
    if header is not None and header.base_offset == indexed:
        return indexed, position
    _distrust_index(segment, f"its entry for offset {indexed} points at {header and header.base_offset}")
    return segment.base_offset, 0


def _distrust_index(segment: Segment, why: str) -> None:
    if segment.name not in _misleading_indexes:
        _misleading_indexes.add(segment.name)
        logger.warning(
            "%s: the index is damaged (%s): scanning the segment from its start", segment.name, why
        )


def _scan_for_time(segment: Segment, timestamp: int, hw: int) -> int | None:
    start = segment.offset_for_timestamp_hint(timestamp)
    found = _scan_for_time_from(segment, start, timestamp, hw)
    # The time index names a batch whose records (and all before) are earlier than ``timestamp``: the answer
    # lies past it. An answer at or before it means the entry was wrong (damaged): scan the whole segment.
    if start > segment.base_offset and found is not None and found <= start:
        _distrust_index(segment, f"its time entry for {timestamp} names offset {start}, not before it")
        found = _scan_for_time_from(segment, segment.base_offset, timestamp, hw)
    return found


def _scan_for_time_from(segment: Segment, start: int, timestamp: int, hw: int) -> int | None:
    _, position = _verified_position(segment, start)
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


class Taker(Protocol):
    """Where a read puts the batches' records it finds, up to its limits."""

    max_records: int

    def take(self, buf: bytes, position: int, header: BatchHeader, offset: int, hw: int) -> bool:
        """Take the (checked) batch's records in ``[offset, hw)`` that fit; whether the read is full."""
        ...

    def bytes_wanted(self) -> int:
        """Payload bytes the read can still take."""
        ...


class RecordTaker:
    """A read answered as ``Record``s (``LogEngine.read``): ``max_records`` of them at most, and no more than
    ``max_bytes`` of payload (key + headers + value) unless the first record alone is more."""

    def __init__(self, max_records: int, max_bytes: int) -> None:
        self.records: list[Record] = []
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.size = 0

    def take(self, buf: bytes, position: int, header: BatchHeader, offset: int, hw: int) -> bool:
        self.size = decode_batch(
            buf,
            position,
            header,
            self.records,
            start_offset=offset,
            end_offset=hw,
            max_records=self.max_records,
            max_bytes=self.max_bytes,
            size=self.size,
        )
        return is_full(self.size) or len(self.records) >= self.max_records

    def bytes_wanted(self) -> int:
        return max(self.max_bytes - self.size, 0)


class ColumnTaker:
    """The same read answered in columns (``LogEngine.read_columns``): the same records by the same limits,
    sliced out of each batch whole (a batch cut by the limits is cut once, by its lengths). Batches of a
    few records (single publishes) are decoded as ``Record``s and put in columns together: slicing columns
    costs a batch more than decoding a record does."""

    def __init__(self, max_records: int, max_bytes: int) -> None:
        self.pieces: list[RecordColumns] = []
        self.rows: list[Record] = []  # taken from small batches, not yet in ``pieces``
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.few_records = _FEW_RECORDS
        self.count = 0
        self.size = 0

    def take(self, buf: bytes, position: int, header: BatchHeader, offset: int, hw: int) -> bool:
        if header.record_count < self.few_records:
            return self._take_rows(buf, position, header, offset, hw)
        piece = batch_columns(buf, position, header, offset, hw).head(self.max_records - self.count)
        payload = len(piece.keys) + len(piece.headers) + len(piece.values)
        full = False
        if self.size + payload > self.max_bytes:
            piece, payload = self._fit(piece)
            full = True
        if len(piece):
            self._flush()
            self.pieces.append(piece)
            self.count += len(piece)
            self.size += payload
        return full or self.count >= self.max_records

    def _take_rows(self, buf: bytes, position: int, header: BatchHeader, offset: int, hw: int) -> bool:
        rows: list[Record] = []
        size = decode_batch(
            buf,
            position,
            header,
            rows,
            start_offset=offset,
            end_offset=hw,
            max_records=self.max_records - self.count,
            max_bytes=self.max_bytes,
            size=self.size,
        )
        # ``decode_batch`` takes its first record whatever its size (the first of a read always is): once
        # this read holds records, that one must fit too.
        if self.count and rows and self.size + _payload(rows[0]) > self.max_bytes:
            return True
        self.rows += rows
        self.count += len(rows)
        self.size = int(size)
        return is_full(size) or self.count >= self.max_records

    def _fit(self, piece: RecordColumns) -> tuple[RecordColumns, int]:
        """The records of ``piece`` that fit in ``max_bytes`` (the read's first always), and their payload."""
        needs = payload_sizes(piece.key_lengths, piece.header_lengths, piece.value_lengths)
        keep = records_that_fit(needs, self.size, self.max_bytes, first=not self.count)
        return piece.head(keep), sum(needs[:keep])

    def _flush(self) -> None:
        if self.rows:
            self.pieces.append(RecordColumns.of(self.rows))
            self.rows = []

    def bytes_wanted(self) -> int:
        return max(self.max_bytes - self.size, 0)

    def columns(self) -> RecordColumns:
        self._flush()
        return RecordColumns.join(self.pieces)


def _payload(record: Record) -> int:
    return len(record.value) + len(record.key or b"") + len(record.headers or b"")
