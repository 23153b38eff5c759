"""Retention: delete whole segments from the start of a log (Kafka's ``UnifiedLog.deleteOldSegments``).

One mechanism, ``delete_old_segments(log, predicate)``, walks the segments oldest first and deletes
while the predicate holds, never past the first segment it keeps (the log stays contiguous) and never
the active segment. Predicates:

* ``retention_ms_breached``: the segment's largest timestamp is older than ``now - retention_ms``;
* ``retention_size_breached``: the log would still hold ``retention_bytes`` without the segment;
* ``start_offset_breached``: the segment lies wholly below a given offset.

``enforce_retention`` applies the topic's time and size limits. An expired *active* segment is first
rolled through the partition's writer (``PartitionLog.roll``), then deleted like any other, so a topic
whose data has all expired keeps its ``latest_offset`` and its ``earliest_offset`` becomes equal to it.
Only segments wholly below the high-watermark are deleted (a segment still holding a batch of an
uncommitted transaction waits for the next pass).

Deleting moves the log's earliest offset (the first remaining segment's base) before the files go:
the segment leaves ``LogSegments``, its files are renamed ``.deleted`` and unlinked; readers that had
pinned it finish on their open descriptors (``OpenSegments.discard``). A crash in between leaves
``.deleted`` files, which the loader removes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from app.stores.log.local import files
from app.stores.log.local.partition_log import PartitionLog
from app.stores.log.local.segment import SegmentState
from app.stores.log.local.segments import SegmentDeleted, SegmentHandle

logger = logging.getLogger("queuecore.log")

# predicate(handle, state, next_base) -> delete?
SegmentPredicate = Callable[[SegmentHandle, SegmentState, int], bool]


def retention_ms_breached(now_ms: int, retention_ms: int) -> SegmentPredicate:
    cutoff = now_ms - retention_ms

    def breached(handle: SegmentHandle, state: SegmentState, next_base: int) -> bool:
        return state.max_timestamp < cutoff

    return breached


def retention_size_breached(total_bytes: int, retention_bytes: int) -> SegmentPredicate:
    excess = total_bytes - retention_bytes

    def breached(handle: SegmentHandle, state: SegmentState, next_base: int) -> bool:
        nonlocal excess
        if excess - state.size >= 0:
            excess -= state.size
            return True
        return False

    return breached


def start_offset_breached(start_offset: int) -> SegmentPredicate:
    def breached(handle: SegmentHandle, state: SegmentState, next_base: int) -> bool:
        return next_base <= start_offset

    return breached


def delete_old_segments(
    log: PartitionLog, predicate: SegmentPredicate, high_watermark: int, reason: str
) -> int:
    """Delete segments from the oldest while ``predicate`` holds (worker thread); returns how many."""
    cache = log.open_segments
    deleted: list[SegmentHandle] = []
    for handle in log.segments.values()[:-1]:
        next_base = log.segments.next_base(handle)
        if next_base is None or next_base > high_watermark:
            break
        state = handle.state
        if state is None:
            try:
                with cache.use(handle) as segment:
                    state = segment.state
            except SegmentDeleted:
                continue
        if not predicate(handle, state, next_base):
            break
        log.segments.remove(handle)
        cache.discard(handle)
        _delete_files(handle.paths())
        deleted.append(handle)
    if deleted:
        files.fsync_dir(log.directory)
        logger.info(
            "deleted %d segment(s) of %s (%s); earliest offset is now %d",
            len(deleted),
            log.name,
            reason,
            log.segments.values()[0].base_offset,
        )
    return len(deleted)


def _delete_files(paths: list[Path]) -> None:
    # The .log first: a crash after it leaves index files without a log, which the loader drops.
    renamed: list[Path] = []
    for path in paths:
        target = path.with_name(path.name + files.DELETED_SUFFIX)
        try:
            os.replace(path, target)
        except FileNotFoundError:
            continue
        renamed.append(target)
    for path in renamed:
        path.unlink(missing_ok=True)


async def enforce_retention(log: PartitionLog, now_ms: int) -> int:
    """Apply ``log.config``'s time and size retention; returns how many segments were deleted."""
    config = log.config
    if log.failed is not None or log.closed:
        return 0
    if config.retention_ms is None and config.retention_bytes is None:
        return 0
    loop = asyncio.get_running_loop()
    deleted = 0
    if config.retention_ms is not None:
        cutoff = now_ms - config.retention_ms
        first = log.segments.first
        if first is not None and (first.state is None or first.state.max_timestamp < cutoff):
            active_state = log.segments.active.state
            if (
                active_state is not None
                and active_state.size > 0
                and active_state.max_timestamp < cutoff
                and log.high_watermark == log.next_offset
            ):
                await log.roll()
            deleted += await loop.run_in_executor(
                None,
                delete_old_segments,
                log,
                retention_ms_breached(now_ms, config.retention_ms),
                log.high_watermark,
                f"retention.ms={config.retention_ms}",
            )
    if config.retention_bytes is not None:
        total = log.segments.size_bytes()
        if total > config.retention_bytes and len(log.segments) > 1:
            deleted += await loop.run_in_executor(
                None,
                delete_old_segments,
                log,
                retention_size_breached(total, config.retention_bytes),
                log.high_watermark,
                f"retention.bytes={config.retention_bytes}",
            )
    return deleted
