"""Sparse indexes of a segment: ``OffsetIndex`` (offset -> file position) and ``TimeIndex``
(timestamp -> offset), after Kafka's ``OffsetIndex``, ``TimeIndex`` and ``AbstractIndex``.

File formats (little-endian, entries back to back, no header, no checksum)::

    .index      entry = uint32 relative_offset, uint32 position        (8 bytes)
    .timeindex  entry = int64  timestamp_ms,    uint32 relative_offset (12 bytes)

``relative_offset`` is ``offset - segment.base_offset``; ``position`` is the byte position in the
segment's ``.log`` of the batch starting at that offset.

Invariants:
* Sparse: the segment adds one entry per batch that starts more than ``index_interval_bytes`` after
  the previous entry's batch, and entries always point at batch starts.
* Offset index keys strictly increase; time index timestamps strictly increase (an entry is added only
  when the segment's largest timestamp grows), and the entry ``(T, O)`` means: every record of the
  batches up to and including the batch at ``O`` has a timestamp ``<= T``.
* Indexes are derived data: they are not checksummed and not fsync'd per append. ``load`` runs a
  sanity check (Kafka's ``sanityCheck``) and raises ``CorruptIndexError``; the caller then rebuilds the
  index from the log. An inactive segment's indexes are flushed and fsync'd when it rolls.

Entries live in memory (two ``array('q')``, bisected for lookups); entries appended since the last
``flush`` are written to the file on ``flush`` (at roll, close and clean shutdown).

Thread-safety: none of its own. The owning ``Segment`` is written by one thread at a time; lookups
race benignly with appends (arrays only grow at the end).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from operator import lt
from typing import BinaryIO, ClassVar

from app.stores.log.local.files import BlockFile
from app.stores.log.protocol import LogEngineError


class CorruptIndexError(LogEngineError):
    """An index file failed its sanity check; it is rebuilt from the log."""


class _Index:
    """What offset and time indexes share: entries in memory, appended to a file, bisected."""

    ENTRY: ClassVar[struct.Struct]
    NAME: ClassVar[str]

    def __init__(self, file: BinaryIO, base_offset: int) -> None:
        self._file = BlockFile(file)
        self.base_offset = base_offset
        self._keys = array("q")
        self._values = array("q")
        self._persisted = 0  # entries already in the file

    def __len__(self) -> int:
        return len(self._keys)

    def load(self) -> None:
        """Read the file into memory; ``CorruptIndexError`` if it fails the sanity check."""
        data = self._file.read(0, self._file.size())
        size = self.ENTRY.size
        if len(data) % size:
            raise CorruptIndexError(f"{self.NAME} size {len(data)} is not a multiple of {size}")
        keys = array("q")
        values = array("q")
        for key, value in self.ENTRY.iter_unpack(data):
            keys.append(key)
            values.append(value)
        if len(keys) > 1 and not all(map(lt, keys, keys[1:])):
            raise CorruptIndexError(f"{self.NAME} entries are not strictly increasing")
        self._keys, self._values = keys, values
        self._persisted = len(keys)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._keys, self._values, strict=True))

    def last(self) -> tuple[int, int] | None:
        if not self._keys:
            return None
        return self._keys[-1], self._values[-1]

    def _append(self, key: int, value: int) -> None:
        self._keys.append(key)
        self._values.append(value)

    def flush(self) -> None:
        """Write the entries appended since the last flush (no fsync)."""
        n = len(self._keys)
        if self._persisted >= n:
            return
        pack = self.ENTRY.pack
        data = b"".join(pack(self._keys[i], self._values[i]) for i in range(self._persisted, n))
        self._file.write(self._persisted * self.ENTRY.size, [data])
        self._persisted = n

    def sync(self) -> None:
        self.flush()
        self._file.sync()

    def reset(self) -> None:
        """Drop every entry, in memory and in the file."""
        self._keys = array("q")
        self._values = array("q")
        self._persisted = 0
        self._file.truncate(0)

    def rewrite(self) -> None:
        """Write the file from scratch from the in-memory entries (after a rebuild)."""
        self._file.truncate(0)
        self._persisted = 0
        self.flush()

    def _truncate_entries(self, keep: int) -> None:
        if keep >= len(self._keys):
            return
        del self._keys[keep:]
        del self._values[keep:]
        if self._persisted > keep:
            self._persisted = keep
            self._file.truncate(keep * self.ENTRY.size)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._file.close()


class OffsetIndex(_Index):
    """Offset -> position of the batch starting there (8-byte entries)."""

    ENTRY = struct.Struct("<II")
    NAME = "offset index"

    def load(self) -> None:
        super().load()
        if self._values and not all(map(lt, self._values, self._values[1:])):
            raise CorruptIndexError("offset index positions are not strictly increasing")

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self._keys and relative <= self._keys[-1]:
            raise ValueError(f"offset index entry {offset} is not above the last one")
        self._append(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The entry with the largest offset ``<= offset``: ``(offset, position)``; ``(base, 0)`` if none."""
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def last_entry(self) -> tuple[int, int] | None:
        last = self.last()
        return None if last is None else (self.base_offset + last[0], last[1])

    def check_against(self, log_size: int) -> None:
        """Entries must point inside the log (Kafka's sanity check of the last entry)."""
        if self._values and self._values[-1] >= log_size:
            raise CorruptIndexError(
                f"offset index points at {self._values[-1]}, past the log's {log_size} bytes"
            )

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets ``>= offset``."""
        self._truncate_entries(bisect_left(self._keys, offset - self.base_offset))


class TimeIndex(_Index):
    """Largest timestamp so far -> offset of the batch where it was reached (12-byte entries)."""

    ENTRY = struct.Struct("<qI")
    NAME = "time index"

    def load(self) -> None:
        super().load()
        if self._values and not all(map(lt, self._values, self._values[1:])):
            raise CorruptIndexError("time index offsets are not strictly increasing")

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add ``(timestamp, offset)`` if it raises both the largest timestamp and offset indexed."""
        relative = offset - self.base_offset
        if self._keys and (timestamp <= self._keys[-1] or relative <= self._values[-1]):
            return False
        self._append(timestamp, relative)
        return True

    def lookup(self, timestamp: int) -> int:
        """An offset from which scanning finds the first record with ts ``>= timestamp``: the offset of
        the last entry whose timestamp is ``< timestamp`` (the segment base if none)."""
        i = bisect_left(self._keys, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self._values[i]

    def max_timestamp(self) -> int | None:
        return self._keys[-1] if self._keys else None

    def last_entry(self) -> tuple[int, int] | None:
        last = self.last()
        return None if last is None else (last[0], self.base_offset + last[1])

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets ``>= offset``."""
        relative = offset - self.base_offset
        keep = len(self._values)
        while keep and self._values[keep - 1] >= relative:
            keep -= 1
        self._truncate_entries(keep)
