"""Start-up of one partition log (Kafka's ``LogLoader``): clean the directory, find the segments,
recover what may be torn.

Steps, for one partition directory:

1. Drop leftovers: ``.deleted`` (retention was deleting), ``.swap`` and ``.tmp`` (an atomic replace
   that did not finish; the original is intact) files, and index files whose ``.log`` is gone.
2. List the segments by base offset.
3. Recover:
   * After a clean shutdown (``clean=True``: the engine's ``.clean_shutdown`` marker was present and the
     checkpoint has this partition's recovery point, which was its log end then), nothing is scanned:
     the active segment's state comes from its index tail (``Segment.load``), and must end exactly at
     the checkpointed offset, else the partition falls back to recovery.
   * Otherwise, the segments from the one holding the recovery point to the end are scanned
     (``Segment.recover``): every batch's CRC, framing and offset continuity are checked, indexes are
     rebuilt, and the log is cut at the first bad batch, with a warning naming the file, the position
     and the bytes cut. A batch at or above the recovery point whose transaction id has no commit record
     is cut the same way (see ``committer``). Segments after a cut are deleted (offsets stay dense).
     Since the recovery point is checkpointed after every roll, normally only the active segment is
     scanned, whatever the partition's size.
   Segments below that are trusted and opened lazily; a missing or corrupt index found then is rebuilt.
4. The recovered active segment is fsync'd: what recovery kept becomes durable before new appends
   follow it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.stores.log.local import files
from app.stores.log.local.records import BatchHeader
from app.stores.log.local.segment import RecoveryResult, SegmentState
from app.stores.log.local.segments import LogSegments, OpenSegments, SegmentHandle

logger = logging.getLogger("queuecore.log")

_LEFTOVER_SUFFIXES = (files.DELETED_SUFFIX, files.SWAP_SUFFIX, files.TMP_SUFFIX)


@dataclass
class LoadedLog:
    """What loading found."""

    segments: LogSegments
    next_offset: int
    scanned_segments: int
    truncated_bytes: int
    max_txn_id: int


def clean_directory(directory: Path) -> dict[int, int]:
    """Remove leftovers; return ``{base_offset: size}`` of the segment logs present."""
    logs: dict[int, int] = {}
    indexes: list[tuple[int, Path]] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(_LEFTOVER_SUFFIXES):
                logger.info("removing leftover file %s", entry.path)
                os.unlink(entry.path)
                continue
            base = files.offset_from_name(name)
            if base is None:
                continue
            if name.endswith(files.LOG_SUFFIX):
                logs[base] = entry.stat().st_size
            elif name.endswith((files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)):
                indexes.append((base, Path(entry.path)))
    for base, path in indexes:
        if base not in logs:
            logger.info("removing index %s of a deleted segment", path)
            path.unlink(missing_ok=True)
    return logs


def load_partition(
    directory: Path,
    open_segments: OpenSegments,
    *,
    index_interval_bytes: int,
    recovery_point: int | None,
    clean: bool,
    committed_txns: set[int] | frozenset[int] = frozenset(),
) -> LoadedLog:
    """Load (and if needed recover) the partition in ``directory``; see the module docstring."""
    logs = clean_directory(directory)
    handles = [
        SegmentHandle(directory, base, index_interval_bytes=index_interval_bytes, file_size=size)
        for base, size in sorted(logs.items())
    ]
    if not handles:
        base = recovery_point or 0
        fresh = SegmentHandle(
            directory, base, index_interval_bytes=index_interval_bytes, state=SegmentState(next_offset=base)
        )
        with open_segments.use(fresh):
            pass  # creates the files
        open_segments.close(fresh)  # a new partition holds no file until it is used
        files.fsync_dir(directory)
        return LoadedLog(LogSegments([fresh]), base, 0, 0, 0)
    segments = LogSegments(handles)
    if clean and recovery_point is not None:
        active = segments.active
        with open_segments.use(active) as segment:
            if segment.next_offset == recovery_point:
                return LoadedLog(segments, recovery_point, 0, 0, 0)
        logger.warning(
            "%s: clean shutdown recorded log end %d but the active segment ends at %d; recovering",
            directory.name,
            recovery_point,
            active.state.next_offset if active.state else -1,
        )
        open_segments.discard(active)
        active = SegmentHandle(directory, active.base_offset, index_interval_bytes=index_interval_bytes)
        segments = LogSegments([*segments.values()[:-1], active])
    return _recover(
        directory, segments, open_segments, recovery_point or 0, committed_txns, index_interval_bytes
    )


def _recover(
    directory: Path,
    segments: LogSegments,
    open_segments: OpenSegments,
    recovery_point: int,
    committed_txns: set[int] | frozenset[int],
    index_interval_bytes: int,
) -> LoadedLog:
    keep: Callable[[BatchHeader], bool] = lambda h: (
        h.txn_id == 0 or h.base_offset < recovery_point or h.txn_id in committed_txns
    )
    to_scan = segments.from_offset(recovery_point)
    scanned = 0
    truncated = 0
    max_txn_id = 0
    expected: int | None = None
    cut_from: int | None = None  # index in to_scan of the first segment to drop
    for i, handle in enumerate(to_scan):
        if expected is not None and handle.base_offset != expected:
            logger.warning(
                "%s: segment %d does not follow the previous one (which ends at %d); dropping it and later ones",
                directory.name,
                handle.base_offset,
                expected,
            )
            cut_from = i
            break
        with open_segments.use(handle) as segment:
            result: RecoveryResult = segment.recover(keep)
            scanned += 1
            max_txn_id = max(max_txn_id, result.first_txn_cut)
            if result.truncated_bytes:
                truncated += result.truncated_bytes
                logger.warning(
                    "recovery cut %d bytes from %s at position %d: %s",
                    result.truncated_bytes,
                    segment.name,
                    result.valid_bytes,
                    result.reason,
                )
            last = i == len(to_scan) - 1
            if result.truncated_bytes and not last:
                segment.on_become_inactive()
                cut_from = i + 1
                expected = result.next_offset
                break
            if not last:
                segment.on_become_inactive()
            else:
                segment.flush()
            expected = result.next_offset
    if cut_from is not None:
        dropped = to_scan[cut_from:]
        for handle in dropped:
            logger.warning(
                "recovery deleted segment %s (%d bytes after a cut)",
                files.log_file(directory, handle.base_offset),
                handle.size,
            )
            segments.remove(handle)
            open_segments.discard(handle)
            for path in handle.paths():
                path.unlink(missing_ok=True)
        files.fsync_dir(directory)
        active = segments.active
        with open_segments.use(active) as segment:
            segment.flush()
            # The active segment may have been sealed above; it is active again.
    active = segments.active
    assert active.state is not None
    return LoadedLog(segments, active.state.next_offset, scanned, truncated, max_txn_id)
