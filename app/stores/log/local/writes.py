"""The writer thread's work for one partition log (Kafka's ``LocalLog.append`` and ``roll``): batches
queued by ``PartitionLog.enqueue`` (and roll requests) written in order with one vectored write per
segment and one fsync per call, segments rolled before a batch that would overflow ``segment_bytes`` or
when the active one is older than ``segment_ms``.

Called by the partition's ``GroupCommitter`` in a worker thread, one call at a time per partition; it
touches only segments pinned through ``OpenSegments`` (an evicted active segment is opened again here,
with a retry on the descriptors that closing idle segments frees, see ``segments``) and the copy-on-write
``LogSegments``. Nothing is durable, or visible, until the call returns: the event loop then moves the
high-watermark (``PartitionLog._flushed``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.kit.clock import now_ms
from app.stores.log.local import files
from app.stores.log.local.records import EncodedBatch
from app.stores.log.local.segment import Segment, SegmentState
from app.stores.log.local.segments import LogSegments, OpenSegments, SegmentHandle

if TYPE_CHECKING:
    from app.stores.log.local.config import LogConfig

# Relative offsets are uint32 in the indexes; a segment stays well inside them.
_MAX_RELATIVE = (1 << 31) - 1


class RollRequest:
    """Ask the writer to roll the active segment (if it is not empty)."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future


def write_items(
    directory: Path, config: LogConfig, segments: LogSegments, cache: OpenSegments, items: list[Any]
) -> bool:
    """Write ``items`` (``PendingBatch``es and ``RollRequest``s) in order, rolling as needed, then fsync
    once. Returns whether a segment was rolled."""
    now = now_ms()
    rolled = False
    handle = segments.active
    segment = cache.acquire(handle)
    try:
        run: list[tuple[int, EncodedBatch]] = []
        run_bytes = 0
        dirty = False
        for item in items:
            if isinstance(item, RollRequest):
                if run:
                    segment.append(run, now)
                    run, run_bytes = [], 0
                    dirty = True
                if segment.size > 0:
                    segment, handle = roll(directory, config, segments, cache, segment, handle)
                    rolled = True
                    dirty = False
                continue
            batch = item.batch
            size = segment.size + run_bytes
            if size > 0:
                # An empty segment receiving this run gets its first batch now.
                rolling_ts = segment.state.rolling_timestamp if segment.size else now
                if (
                    size + batch.size > config.segment_bytes
                    or (rolling_ts >= 0 and now - rolling_ts >= config.segment_ms)
                    or item.next_offset - segment.base_offset > _MAX_RELATIVE
                ):
                    if run:
                        segment.append(run, now)
                        run, run_bytes = [], 0
                    segment, handle = roll(directory, config, segments, cache, segment, handle)
                    rolled = True
                    dirty = False
            run.append((item.base_offset, batch))
            run_bytes += batch.size
        if run:
            segment.append(run, now)
            dirty = True
        if dirty:
            segment.flush()
    finally:
        cache.release(handle)
    return rolled


def roll(
    directory: Path,
    config: LogConfig,
    segments: LogSegments,
    cache: OpenSegments,
    segment: Segment,
    handle: SegmentHandle,
) -> tuple[Segment, SegmentHandle]:
    """Seal the active segment (fsync it and its indexes) and start a new one at its end."""
    segment.flush()
    segment.on_become_inactive()
    base = segment.next_offset
    fresh = SegmentHandle(
        directory,
        base,
        index_interval_bytes=config.index_interval_bytes,
        state=SegmentState(next_offset=base),
    )
    new_segment = cache.acquire(fresh)
    try:
        files.fsync_dir(directory)
        segments.add(fresh)
    except BaseException:
        cache.release(fresh)
        cache.discard(fresh)  # never listed: close its files (recovery removes them)
        raise
    cache.release(handle)
    # The caller's ``finally`` releases whatever handle is current: hand it the new one, pinned.
    return new_segment, fresh
