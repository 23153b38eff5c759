"""The segments of one partition (Kafka's ``LogSegments``) and the engine-wide cap on open ones.

``LogSegments`` maps base offset -> ``SegmentHandle``, sorted: ``floor``, ``higher``, ``first``,
``active`` (the last). Changes (a roll adds at the end, retention removes at the start) replace the
sorted list wholesale under a lock, so readers in other threads always see a consistent snapshot.

A ``SegmentHandle`` is a segment known by its directory and base offset, plus its ``SegmentState``;
its ``Segment`` (``FILES_PER_SEGMENT`` open files) exists only while it is in ``OpenSegments``, an LRU
capped at a number of segments (the engine's open-file budget, ``LocalLogConfig.open_files``, divided by
three). So the engine's file use is bounded by design: however many partitions exist, idle ones hold no
file. Users pin a segment for the duration of one operation (``with open_segments.use(handle) as
segment``); only unpinned segments are closed, so the cap can be exceeded briefly when more segments are
in use at once than it allows (at most one or two per worker thread). A deleted handle is closed when its
last user lets go. A hit is a dict lookup and an LRU move under a lock: no system call.

Out of files (``EMFILE``: the process is at its ``RLIMIT_NOFILE``; ``ENFILE``: the system is): the budget
was set higher than the process may open, or something else holds the descriptors. ``OpenSegments`` then
lowers its cap to three quarters of what it holds, closes idle segments down to it, and logs why, once
per burst. The call that needed the file fails with ``FilesExhausted`` (an ``EngineUnavailable``: 503 for
that call alone) unless it asked to ``retry`` (the engine's own work - a queued write, a roll, recovery -
whose failure would cost more), which tries once more on the descriptors just freed. Everything else
goes on; the next calls find room.

Thread-safety: both classes are safe to use from the event loop and the engine's threads.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.stores.errors import StoreUnavailable
from app.stores.log.local import files
from app.stores.log.local.segment import Segment, SegmentState
from app.stores.log.protocol import EngineUnavailable

logger = logging.getLogger("queuecore.log")

FILES_PER_SEGMENT = 3  # .log, .index, .timeindex
# Out of files again within this many seconds of the last time is the same burst: logged once.
_BURST_SECONDS = 10.0
_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)


class SegmentDeleted(Exception):
    """The segment was deleted (by retention or topic deletion) before it could be used."""


class FilesExhausted(EngineUnavailable, StoreUnavailable):
    """No file descriptor was left to open a segment (``EMFILE``/``ENFILE``): the call that needed it
    answers 503; the wire ``message`` is generic, the cause (``str``) goes to the server log."""

    def __init__(self, detail: str) -> None:
        StoreUnavailable.__init__(self, "The log engine cannot open a file right now; retry shortly.")
        self.detail = detail

    def __str__(self) -> str:
        return self.detail


def segments_for(open_files: int) -> int:
    """How many segments an open-file budget keeps open (at least one)."""
    return max(1, open_files // FILES_PER_SEGMENT)


def soft_file_limit() -> int | None:
    """The process's soft ``RLIMIT_NOFILE`` (None when unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


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
    """An LRU of open segments, capped at ``capacity`` (pinned segments are never closed); see the module
    docstring for what happens when the process runs out of files."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._lru: OrderedDict[SegmentHandle, None] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0  # how many times a segment was opened (for tests and metrics)
        self.exhaustions = 0  # how many opens found no file descriptor (for tests and metrics)
        self._exhausted_at: float | None = None  # time.monotonic() of the last one
        self._burst_started: float | None = None
        self._burst_failures = 0

    def __len__(self) -> int:
        return len(self._lru)

    def acquire(self, handle: SegmentHandle, *, retry: bool = True) -> Segment:
        """Pin ``handle`` and return its open ``Segment`` (opening it, and closing the LRU's oldest).

        Out of files, ``FilesExhausted`` - after one more try on the descriptors that closing idle segments
        freed, with ``retry`` (see the module docstring)."""
        victims: list[Segment] = []
        with self._lock:
            if handle.deleted:
                raise SegmentDeleted(repr(handle))
            if handle._segment is None:
                try:
                    segment = handle._open()
                except OSError as error:
                    if error.errno not in _OUT_OF_FILES:
                        raise
                    freed = self._out_of_files(handle, error)
                    # Closed under the lock (a rare path): the descriptors must be back before a retry.
                    for victim in freed:
                        victim.close()
                    if not (retry and freed):
                        raise self._exhausted(handle, error) from error
                    try:
                        segment = handle._open()
                    except OSError as again:
                        if again.errno not in _OUT_OF_FILES:
                            raise
                        raise self._exhausted(handle, again) from again
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

    def load(self, handle: SegmentHandle) -> None:
        """Open ``handle`` (if it is not) without keeping it pinned, failing at once if out of files: a
        call brings the segment it will need in before it commits to anything."""
        self.acquire(handle, retry=False)
        self.release(handle)

    def exhausted_within(self, seconds: float) -> bool:
        """Whether an open found no file descriptor in the last ``seconds``."""
        at = self._exhausted_at
        return at is not None and time.monotonic() - at < seconds

    def _out_of_files(self, handle: SegmentHandle, error: OSError) -> list[Segment]:
        """Under the lock: lower the cap below what is open, take idle segments out to close; log it once
        per burst."""
        now = time.monotonic()
        self.exhaustions += 1
        self._exhausted_at = now
        held = len(self._lru)
        before = self.capacity
        self.capacity = max(1, min(self.capacity, held * 3 // 4))
        freed = self._evict()
        if self._burst_started is None or now - self._burst_started >= _BURST_SECONDS:
            limit = soft_file_limit()
            logger.error(
                "the log engine could not open %s: %s (%s; RLIMIT_NOFILE soft limit %s). It held %d "
                "segment(s) open (%d files); %d idle ones are closed and its cap is lowered from %d to %d "
                "open segments (%d files): set QUEUECORE_LOG__OPEN_FILES below the limit, or raise the "
                "limit. Calls that needed a file answer 503 meanwhile.%s",
                handle,
                errno.errorcode.get(error.errno or 0, "?"),
                os.strerror(error.errno or 0),
                "unlimited" if limit is None else limit,
                held,
                held * FILES_PER_SEGMENT,
                len(freed),
                before,
                self.capacity,
                self.capacity * FILES_PER_SEGMENT,
                f" ({self._burst_failures} more since the last report)" if self._burst_failures else "",
            )
            self._burst_started = now
            self._burst_failures = 0
        else:
            self._burst_failures += 1
        return freed

    def _exhausted(self, handle: SegmentHandle, error: OSError) -> FilesExhausted:
        return FilesExhausted(f"out of files opening {handle}: {os.strerror(error.errno or 0)}")

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
