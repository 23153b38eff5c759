"""One segment of a partition log: a ``.log`` of record batches and its two sparse indexes (Kafka's
``LogSegment``).

A segment covers the offsets ``[base_offset, next_offset)``; its files are named by ``base_offset``
(see ``files``). The log holds whole batches back to back (``records``); the offset index maps a batch's
first offset to its position, the time index the largest timestamp so far to a batch's first offset
(``index``). Both are sparse: an entry is added for a batch that starts more than
``index_interval_bytes`` after the last indexed one.

``Segment`` takes open binary file objects (real files, or ``io.BytesIO`` in unit tests) and a
``SegmentState`` — the facts about the segment that outlive its open files (size, next offset, largest
timestamp...), so the LRU of open segments can close and reopen a segment without rescanning it.

Invariants:
* ``state.size`` is the length of the valid log; everything before it is whole, contiguous batches
  (``base_offset`` of each batch = ``next_offset`` of the one before).
* Index entries point at batch starts below ``state.size``.
* Only the writer thread of the partition appends, rolls, truncates or recovers; readers (other
  threads) only call ``read`` and the lookups, which are safe against a concurrent append: the file only
  grows, and readers never go past the committed high-watermark (``partition_log``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

from app.stores.log.local import files
from app.stores.log.local.files import BlockFile
from app.stores.log.local.index import CorruptIndexError, OffsetIndex, TimeIndex
from app.stores.log.local.records import (
    HEADER_SIZE,
    MAX_BATCH_BYTES,
    BatchHeader,
    CorruptRecordError,
    EncodedBatch,
    ensure_valid,
    iter_headers,
    read_header,
)

logger = logging.getLogger("queuecore.log")

# Recovery reads the log in chunks of this size.
_SCAN_CHUNK = 8 << 20
# Positions and relative offsets are uint32 in the indexes.
_MAX_RELATIVE = (1 << 32) - 1


@dataclass(slots=True)
class SegmentState:
    """What is known about a segment without its files open."""

    size: int = 0
    next_offset: int = 0
    max_timestamp: int = -1  # largest record timestamp; -1 while empty
    # When the segment got its first batch (wall clock; after a restart, that batch's largest
    # timestamp): its age for segment_ms. Not the records' timestamps, so that appending old data
    # does not roll a segment per batch.
    rolling_timestamp: int = -1
    last_batch_offset: int = -1  # base offset of the last batch
    bytes_since_index: int = 0


class RecoveryResult(NamedTuple):
    """What ``Segment.recover`` kept and cut."""

    valid_bytes: int
    truncated_bytes: int
    next_offset: int
    batches: int
    reason: str | None
    first_txn_cut: int  # txn id of the batch that stopped recovery (0 if none)


class Segment:
    """A ``.log`` with its ``.index`` and ``.timeindex``; see the module docstring."""

    def __init__(
        self,
        base_offset: int,
        log: BinaryIO,
        offset_index: BinaryIO,
        time_index: BinaryIO,
        *,
        index_interval_bytes: int = 4096,
        state: SegmentState | None = None,
        name: str = "",
    ) -> None:
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.name = name or f"segment {base_offset}"
        self._log = BlockFile(log)
        self.offset_index = OffsetIndex(offset_index, base_offset)
        self.time_index = TimeIndex(time_index, base_offset)
        self.state = state if state is not None else SegmentState(next_offset=base_offset)

    # -- opening -------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        state: SegmentState | None = None,
    ) -> Segment:
        """Open (creating if missing) the segment's files in ``directory``.

        With ``state`` (a segment this process already knows), the indexes are loaded and checked;
        without, the segment is ``load``-ed from its files. Either way a missing or corrupt index is
        rebuilt from the log.
        """
        index_path = files.index_file(directory, base_offset)
        time_path = files.time_index_file(directory, base_offset)
        log_path = files.log_file(directory, base_offset)
        missing = not index_path.exists() or not time_path.exists()
        handles = [files.open_rw(log_path)]
        try:
            handles.append(files.open_rw(index_path))
            handles.append(files.open_rw(time_path))
        except BaseException:
            for h in handles:
                h.close()
            raise
        segment = cls(
            base_offset,
            handles[0],
            handles[1],
            handles[2],
            index_interval_bytes=index_interval_bytes,
            state=state,
            name=str(log_path),
        )
        try:
            if missing and segment._log.size() > 0:
                logger.warning("index files of %s are missing; rebuilding them", log_path)
                segment.rebuild_indexes()
            elif state is not None:
                segment.load_indexes()
            else:
                segment.load()
        except BaseException:
            segment.close()
            raise
        return segment

    def load_indexes(self) -> bool:
        """Load both indexes; rebuild them from the log if they fail the sanity check (returns True then)."""
        try:
            self.offset_index.load()
            self.time_index.load()
            self.offset_index.check_against(self.state.size if self.state.size else self._log.size())
        except CorruptIndexError as exc:
            logger.warning("rebuilding the indexes of %s: %s", self.name, exc)
            self.rebuild_indexes()
            return True
        return False

    def load(self) -> None:
        """Derive the state of a segment from its files, trusting the log (a cleanly written segment).

        Reads only the first batch header and the tail after the last index entry, whose batches are
        CRC-checked; if the tail is not whole, valid batches, the indexes and the state are rebuilt up to
        the first bad batch (nothing is cut here: ``recover`` does that).
        """
        state = self.state
        state.size = self._log.size()
        if self.load_indexes():
            return
        if state.size == 0:
            state.next_offset = self.base_offset
            return
        first = read_header(self._log.read(0, HEADER_SIZE))
        if first is None:
            # A write torn inside the first header (a power loss just after a roll): not a cleanly
            # written segment; its state is rebuilt as empty and recovery cuts the bytes.
            logger.warning("%s: no complete batch header at 0; rebuilding its indexes", self.name)
            self.rebuild_indexes()
            return
        state.rolling_timestamp = first.max_timestamp
        last = self.offset_index.last_entry() or (self.base_offset, 0)
        position = last[1]
        tail = self._log.read(position, state.size - position)
        max_ts = self.time_index.max_timestamp()
        largest = -1 if max_ts is None else max_ts
        end = position
        header: BatchHeader | None = None
        for pos, header in iter_headers(tail):
            try:
                ensure_valid(tail, pos)
            except CorruptRecordError as exc:
                # Left to the caller: the state now ends before this batch (the loader recovers).
                logger.warning("%s: corrupt batch in the tail: %s; rebuilding its indexes", self.name, exc)
                self.rebuild_indexes()
                return
            end = position + pos + header.size
            largest = max(largest, header.max_timestamp)
            state.last_batch_offset = header.base_offset
            state.next_offset = header.next_offset
        if header is None or end != state.size:
            # The tail is not whole batches: not a cleanly written segment after all.
            logger.warning("%s does not end on a batch boundary; rebuilding its indexes", self.name)
            self.rebuild_indexes()
            return
        state.max_timestamp = largest
        state.bytes_since_index = state.size - position

    # -- writing -------------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.state.size

    @property
    def next_offset(self) -> int:
        return self.state.next_offset

    def should_roll(
        self, batch_size: int, batch_max_ts: int, now_ms: int, segment_bytes: int, segment_ms: int
    ) -> bool:
        """Whether a batch of ``batch_size`` bytes must go to a new segment (Kafka's ``shouldRoll``)."""
        state = self.state
        if state.size == 0:
            return False
        if state.size + batch_size > segment_bytes:
            return True
        if state.rolling_timestamp >= 0 and now_ms - state.rolling_timestamp >= segment_ms:
            return True
        # Relative offsets and positions are uint32 in the indexes.
        return (
            state.size + batch_size > _MAX_RELATIVE
            or state.next_offset - self.base_offset > _MAX_RELATIVE // 2
        )

    def append(self, batches: Sequence[tuple[int, EncodedBatch]], now_ms: int | None = None) -> int:
        """Write ``(base_offset, batch)`` pairs at the end of the log with one vectored write; index them.

        The batches must continue the segment's offsets. Not durable until ``flush``. Returns the bytes
        written. If the write fails, the state and indexes are left as they were. ``now_ms`` dates a
        segment's first append (its age for ``segment_ms``); without it the first batch's largest
        timestamp is used, as after a restart.
        """
        state = self.state
        position = state.size
        expected = state.next_offset
        since = state.bytes_since_index
        largest = state.max_timestamp
        rolling = state.rolling_timestamp
        interval = self.index_interval_bytes
        buffers: list[bytes] = []
        entries: list[tuple[int, int, int]] = []
        last_base = state.last_batch_offset
        for base, batch in batches:
            if base != expected:
                raise ValueError(f"{self.name}: batch at offset {base}, expected {expected}")
            largest = max(largest, batch.max_timestamp)
            if rolling < 0:
                rolling = batch.max_timestamp if now_ms is None else now_ms
            if since > interval:
                entries.append((base, position, largest))
                since = 0
            buffers.append(batch.header)
            buffers.append(batch.body)
            size = len(batch.header) + len(batch.body)
            position += size
            since += size
            last_base = base
            expected = base + batch.record_count
        written = self._log.write(state.size, buffers)
        for base, pos, ts in entries:
            self.offset_index.append(base, pos)
            self.time_index.maybe_append(ts, base)
        state.size = position
        state.next_offset = expected
        state.max_timestamp = largest
        state.rolling_timestamp = rolling
        state.bytes_since_index = since
        state.last_batch_offset = last_base
        return written

    def flush(self) -> None:
        """fsync the log (the indexes are derived data, synced on roll and close)."""
        self._log.sync()

    def on_become_inactive(self) -> None:
        """The segment stops being active: index its largest timestamp, make the indexes durable."""
        state = self.state
        if state.last_batch_offset >= 0 and state.max_timestamp >= 0:
            self.time_index.maybe_append(state.max_timestamp, state.last_batch_offset)
        self.offset_index.sync()
        self.time_index.sync()

    def sync_indexes(self) -> None:
        self.offset_index.sync()
        self.time_index.sync()

    # -- reading -------------------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        return self._log.read(position, size)

    def position_for(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of an indexed batch at or before ``offset`` (a place to scan from)."""
        return self.offset_index.lookup(offset)

    def offset_for_timestamp_hint(self, timestamp: int) -> int:
        """An offset in this segment from which a scan finds the first record with ts ``>= timestamp``."""
        return self.time_index.lookup(timestamp)

    @property
    def max_timestamp(self) -> int:
        return self.state.max_timestamp

    # -- recovery --------------------------------------------------------------------------------------

    def recover(
        self, keep: Callable[[BatchHeader], bool] | None = None, *, truncate: bool = True
    ) -> RecoveryResult:
        """Scan the whole log: validate every batch (CRC, framing, contiguous offsets), rebuild both
        indexes, and cut the log at the first invalid batch (or the first one ``keep`` rejects).

        Raises nothing for bad data; reports it in the result. With ``truncate=False`` the log file is
        left alone (only the indexes and the state are rebuilt up to the first bad batch).
        """
        self.offset_index.reset()
        self.time_index.reset()
        log_size = self._log.size()
        interval = self.index_interval_bytes
        state = SegmentState(next_offset=self.base_offset)
        buf = b""
        buf_start = 0
        position = 0
        batches = 0
        reason: str | None = None
        txn_cut = 0
        while position < log_size:
            rel = position - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = self._log.read(position, min(_SCAN_CHUNK, log_size - position))
                buf_start, rel = position, 0
            header = read_header(buf, rel)
            if header is None:
                reason = f"incomplete batch header ({log_size - position} bytes)"
                break
            if (
                rel + header.size > len(buf)
                and 0 < header.size <= MAX_BATCH_BYTES
                and position + header.size <= log_size
            ):
                buf = self._log.read(position, min(max(_SCAN_CHUNK, header.size), log_size - position))
                buf_start, rel = position, 0
            try:
                header = ensure_valid(buf, rel)
            except CorruptRecordError as exc:
                reason = str(exc)
                break
            if header.base_offset != state.next_offset:
                reason = f"batch offset {header.base_offset} where {state.next_offset} was expected"
                break
            if keep is not None and not keep(header):
                reason = f"batch of uncommitted transaction {header.txn_id}"
                txn_cut = header.txn_id
                break
            state.max_timestamp = max(state.max_timestamp, header.max_timestamp)
            if state.rolling_timestamp < 0:
                state.rolling_timestamp = header.max_timestamp
            if state.bytes_since_index > interval:
                self.offset_index.append(header.base_offset, position)
                self.time_index.maybe_append(state.max_timestamp, header.base_offset)
                state.bytes_since_index = 0
            state.bytes_since_index += header.size
            state.last_batch_offset = header.base_offset
            state.next_offset = header.next_offset
            position += header.size
            batches += 1
        state.size = position
        cut = log_size - position
        if cut and truncate:
            self._log.truncate(position)
        self.offset_index.flush()
        self.time_index.flush()
        self._adopt(state)
        return RecoveryResult(position, cut, state.next_offset, batches, reason, txn_cut)

    def rebuild_indexes(self) -> RecoveryResult:
        """Rebuild the indexes (and the state) from the log without cutting anything."""
        result = self.recover(truncate=False)
        if result.truncated_bytes:
            logger.warning(
                "%s: %d bytes after position %d are not valid batches (%s)",
                self.name,
                result.truncated_bytes,
                result.valid_bytes,
                result.reason,
            )
        return result

    def truncate_to(self, offset: int) -> int:
        """Remove every batch at or after ``offset`` (which must start a batch); returns bytes removed."""
        state = self.state
        if offset >= state.next_offset:
            return 0
        if offset <= self.base_offset:
            removed = state.size
            self._log.truncate(0)
            self.offset_index.reset()
            self.time_index.reset()
            self._adopt(SegmentState(next_offset=self.base_offset))
            return removed
        _, position = self.offset_index.lookup(offset)
        data = self._log.read(position, state.size - position)
        cut_at = None
        for pos, header in iter_headers(data):
            if header.base_offset == offset:
                cut_at = position + pos
                break
            if header.base_offset > offset:
                break
        if cut_at is None:
            raise ValueError(f"{self.name}: offset {offset} does not start a batch")
        removed = state.size - cut_at
        self._log.truncate(cut_at)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        # Re-derive the state of what is left.
        self.recover(truncate=False)
        return removed

    def cut_at(self, offset: int, log: BinaryIO | None = None) -> int:
        """Make ``offset`` (a batch boundary) the end of this segment on disk, after a failed write or
        fsync: whatever lies beyond it (batches written but never fsync'd, a torn batch, bytes of a
        short write past ``state.size``) is truncated away, the indexes lose their entries at or past
        it, the state is re-derived from the batches kept, and the cut is fsync'd. Returns the bytes
        removed.

        ``log``, if given, is a freshly opened descriptor of this segment's ``.log``: the truncation,
        the fsync and the verification go through it rather than the long-lived one (which readers may
        be using, so it cannot be swapped). The kept batches between the last index entry and the cut
        are read back and CRC-checked; ``CorruptRecordError`` if they do not end exactly at
        ``offset`` (then nothing is truncated).
        """
        if offset < self.base_offset:
            raise ValueError(f"{self.name}: cannot cut at {offset}, below the base offset")
        block = BlockFile(log) if log is not None else self._log
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        state = SegmentState(next_offset=self.base_offset)
        cut = 0
        if offset > self.base_offset:
            expected, position = self.offset_index.lookup(offset)
            start = position
            largest = self.time_index.max_timestamp()
            state.max_timestamp = -1 if largest is None else largest
            while expected < offset:
                head = block.read(position, HEADER_SIZE)
                header = read_header(head)
                if header is None or not 0 < header.size <= MAX_BATCH_BYTES:
                    raise CorruptRecordError(
                        f"{self.name}: no whole batch at {position} before offset {offset}"
                    )
                header = ensure_valid(head + block.read(position + HEADER_SIZE, header.size - HEADER_SIZE))
                if header.base_offset != expected:
                    raise CorruptRecordError(
                        f"{self.name}: batch offset {header.base_offset} at {position}, {expected} expected"
                    )
                state.max_timestamp = max(state.max_timestamp, header.max_timestamp)
                state.last_batch_offset = header.base_offset
                expected = header.next_offset
                position += header.size
            if expected != offset:
                raise CorruptRecordError(f"{self.name}: offset {offset} does not start a batch")
            cut = position
            state.next_offset = offset
            state.bytes_since_index = cut - start
            state.rolling_timestamp = self.state.rolling_timestamp
            if state.rolling_timestamp < 0:
                state.rolling_timestamp = state.max_timestamp
        state.size = cut
        removed = block.size() - cut
        block.truncate(cut)
        block.sync()
        self.offset_index.sync()
        self.time_index.sync()
        self._adopt(state)
        return removed

    def _adopt(self, state: SegmentState) -> None:
        # In place: the SegmentHandle shares this object with the open Segment.
        for name in SegmentState.__slots__:
            setattr(self.state, name, getattr(state, name))

    def close(self) -> None:
        try:
            self.offset_index.close()
            self.time_index.close()
        finally:
            self._log.close()
