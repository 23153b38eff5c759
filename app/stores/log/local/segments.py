"""The segments of one partition (Kafka's ``LogSegments``) and the engine-wide cap on open ones.

``LogSegments`` maps base offset -> ``SegmentHandle``, sorted: ``floor``, ``higher``, ``first``,
``active`` (the last). Changes (a roll adds at the end, retention removes at the start) replace the
sorted list wholesale under a lock, so readers in other threads always see a consistent snapshot.

A ``SegmentHandle`` is a segment known by its directory and base offset, plus its ``SegmentState``;
its ``Segment`` (three open files) exists only while it is in ``OpenSegments``, an LRU capped at
``max_open_segments``. Users pin a segment for the duration of one operation (``with
open_segments.use(handle) as segment``); only unpinned segments are closed, so the cap can be exceeded
briefly when more segments are in use at once than it allows. A deleted handle is closed when its last
user lets go.

Thread-safety: both classes are safe to use from the event loop and the engine's threads.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.stores.log.local import files
from app.stores.log.local.segment import Segment, SegmentState


class SegmentDeleted(Exception):
    """The segment was deleted (by retention or topic deletion) before it could be used."""


class SegmentHandle:
    """A segment by name and state; its open files come and go with ``OpenSegments``."""

    __slots__ = (
        "_pins",
        "_segment",
        "base_offset",
        "deleted",
        "directory",
        "file_size",
        "index_interval_bytes",
        "state",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        state: SegmentState | None = None,
        file_size: int = 0,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.state = state  # None until the segment has been opened once in this process
        self.file_size = file_size  # size on disk when listed, for size accounting before the first open
        self.deleted = False
        self._segment: Segment | None = None
        self._pins = 0

    @property
    def size(self) -> int:
        return self.state.size if self.state is not None else self.file_size

    @property
    def is_open(self) -> bool:
        return self._segment is not None

    def _open(self) -> Segment:
        segment = Segment.open(
            self.directory, self.base_offset, index_interval_bytes=self.index_interval_bytes, state=self.state
        )
        self.state = segment.state
        return segment

    def paths(self) -> list[Path]:
        return [
            files.log_file(self.directory, self.base_offset),
            files.index_file(self.directory, self.base_offset),
            files.time_index_file(self.directory, self.base_offset),
        ]

    def __repr__(self) -> str:
        return f"SegmentHandle({self.directory.name}/{files.filename_prefix(self.base_offset)})"


class OpenSegments:
    """An LRU of open segments, capped at ``capacity`` (pinned segments are never closed)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._lru: OrderedDict[SegmentHandle, None] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0  # how many times a segment was opened (for tests and metrics)

    def __len__(self) -> int:
        return len(self._lru)

    def acquire(self, handle: SegmentHandle) -> Segment:
        """Pin ``handle`` and return its open ``Segment`` (opening it, and closing the LRU's oldest)."""
        victims: list[Segment] = []
        with self._lock:
            if handle.deleted:
                raise SegmentDeleted(repr(handle))
            if handle._segment is None:
                segment = handle._open()
                handle._segment = segment
                handle._pins += 1
                self.opened += 1
                self._lru[handle] = None
                victims = self._evict()
            else:
                segment = handle._segment
                handle._pins += 1
                self._lru.move_to_end(handle)
        for victim in victims:
            victim.close()
        return segment

    def release(self, handle: SegmentHandle) -> None:
        closing: Segment | None = None
        with self._lock:
            handle._pins -= 1
            if handle._pins == 0 and handle.deleted and handle._segment is not None:
                closing = handle._segment
                handle._segment = None
                self._lru.pop(handle, None)
        if closing is not None:
            closing.close()

    @contextmanager
    def use(self, handle: SegmentHandle) -> Iterator[Segment]:
        segment = self.acquire(handle)
        try:
            yield segment
        finally:
            self.release(handle)

    def _evict(self) -> list[Segment]:
        victims: list[Segment] = []
        if len(self._lru) <= self.capacity:
            return victims
        for handle in list(self._lru):
            if len(self._lru) <= self.capacity:
                break
            if handle._pins == 0 and handle._segment is not None:
                victims.append(handle._segment)
                handle._segment = None
                del self._lru[handle]
        return victims

    def discard(self, handle: SegmentHandle) -> None:
        """Mark ``handle`` deleted: close it now if unused, else when its last user releases it."""
        closing: Segment | None = None
        with self._lock:
            handle.deleted = True
            if handle._pins == 0 and handle._segment is not None:
                closing = handle._segment
                handle._segment = None
                self._lru.pop(handle, None)
        if closing is not None:
            closing.close()

    def close(self, handle: SegmentHandle) -> None:
        """Close ``handle``'s files if open and unused (it stays usable: the next use reopens it)."""
        closing: Segment | None = None
        with self._lock:
            if handle._pins == 0 and handle._segment is not None:
                closing = handle._segment
                handle._segment = None
                self._lru.pop(handle, None)
        if closing is not None:
            closing.close()


class LogSegments:
    """Base offset -> ``SegmentHandle`` of one partition, sorted; copy-on-write (see module docstring)."""

    def __init__(self, handles: list[SegmentHandle] | None = None) -> None:
        ordered = sorted(handles or [], key=lambda h: h.base_offset)
        # One tuple, replaced whole, so a reader never pairs new bases with old handles.
        self._view: tuple[list[int], list[SegmentHandle]] = ([h.base_offset for h in ordered], ordered)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._view[1])

    def __iter__(self) -> Iterator[SegmentHandle]:
        return iter(self._view[1])

    def values(self) -> list[SegmentHandle]:
        """A snapshot, oldest first."""
        return self._view[1]

    @property
    def first(self) -> SegmentHandle | None:
        handles = self._view[1]
        return handles[0] if handles else None

    @property
    def active(self) -> SegmentHandle:
        return self._view[1][-1]

    def floor(self, offset: int) -> SegmentHandle | None:
        """The segment with the largest base offset ``<= offset``."""
        bases, handles = self._view
        i = bisect.bisect_right(bases, offset) - 1
        return handles[i] if i >= 0 else None

    def higher(self, offset: int) -> SegmentHandle | None:
        """The segment with the smallest base offset ``> offset``."""
        bases, handles = self._view
        i = bisect.bisect_right(bases, offset)
        return handles[i] if i < len(handles) else None

    def from_offset(self, offset: int) -> list[SegmentHandle]:
        """The segments that may hold ``offset`` or later, oldest first."""
        bases, handles = self._view
        i = max(0, bisect.bisect_right(bases, offset) - 1)
        return handles[i:]

    def next_base(self, handle: SegmentHandle) -> int | None:
        """The base offset of the segment after ``handle`` (None for the active one)."""
        following = self.higher(handle.base_offset)
        return None if following is None else following.base_offset

    def add(self, handle: SegmentHandle) -> None:
        with self._lock:
            bases, handles = self._view
            if bases and handle.base_offset <= bases[-1]:
                raise ValueError(f"segment {handle.base_offset} is not after {bases[-1]}")
            self._view = ([*bases, handle.base_offset], [*handles, handle])

    def remove(self, handle: SegmentHandle) -> None:
        with self._lock:
            kept = [h for h in self._view[1] if h is not handle]
            self._view = ([h.base_offset for h in kept], kept)

    def size_bytes(self) -> int:
        return sum(h.size for h in self._view[1])
