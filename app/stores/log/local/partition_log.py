"""One partition's log: one writer, group-committed appends, rolls, committed reads (Kafka's
``LocalLog`` and ``UnifiedLog``).

Offsets and visibility::

      earliest_offset          high_watermark           next_offset
      (first segment base)     (committed, readable)    (next offset to assign)
            |  committed records  |  unresolved batches  |
            v                     v                      v
    [seg 0][seg 1] ... [active ...........................]

* ``next_offset`` is assigned on the event loop, synchronously, when an append is queued, so offsets
  are dense and in the order appends arrived; no lock is needed.
* An unresolved batch becomes *durable* when the committer's write+fsync that carried it returns, and
  *resolved* when it is durable, every batch before it is resolved, and - for a batch of a
  multi-partition append - its transaction has committed (see ``committer``). The ``high_watermark``
  moves over resolved batches only, in order; readers never see past it, and an appender's future
  completes when the high-watermark passes its batch.
* Segments roll in the writer thread, before a batch that would overflow ``segment_bytes`` or when the
  active segment is older than ``segment_ms``; the old segment is fsync'd and its indexes made durable
  first. Retention asks for a roll through the same writer (``roll``), never behind its back.

* A failed write or fsync takes the log offline (``fail``): every unresolved append fails, none is
  taken, committed reads go on. ``cut_to_high_watermark`` then brings the files back to exactly the
  high-watermark - everything past it was never acknowledged, and after a failed fsync its state on
  disk is unknown - and ``resume`` takes appends again at the same offsets (no reader ever saw them).

* The last resolved batches (up to ``_TAIL_BYTES``) stay in memory, as written: a read that starts
  within them - a consumer keeping up with its producers - decodes them on the event loop, without a
  file read or a worker-thread hop (decoding holds the GIL either way; the hop only added latency).

Thread-safety: state changes happen on the event loop; the worker threads write (one at a time per
partition, via the ``GroupCommitter``) and read (any number), touching only segments pinned through
``OpenSegments`` and the copy-on-write ``LogSegments``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from app.kit.clock import now_ms
from app.stores.errors import StoreUnavailable
from app.stores.log.local import files, reads, writes
from app.stores.log.local.committer import GroupCommitter, Transaction
from app.stores.log.local.config import LogConfig
from app.stores.log.local.records import (
    MAX_RECORD_BYTES,
    BatchHeader,
    CorruptRecordError,
    EncodedBatch,
    encode_batch,
    read_header,
)
from app.stores.log.local.segments import LogSegments, OpenSegments, SegmentDeleted
from app.stores.log.local.writes import RollRequest
from app.stores.log.protocol import (
    EngineUnavailable,
    LogEngineError,
    PartitionInfo,
    Record,
    RecordColumns,
    RecordIn,
    TopicPartition,
    UnknownLog,
    check_record_sizes,
)

logger = logging.getLogger("queuecore.log")


def _nothing() -> None:
    """The cancel function of a watch that fired at once."""


# In-memory tail per partition: a few hundred small messages, or one large batch at most.
_TAIL_BYTES = 256 * 1024


class OffsetOutOfRange(LogEngineError, ValueError):
    """An offset that no record can have (negative)."""


class LogOffline(EngineUnavailable, StoreUnavailable):
    """The engine takes no appends right now (a write failed and the disk has not recovered yet, or it is
    closing). Also a ``StoreUnavailable``, so the API answers 503 ``SERVICE_UNAVAILABLE``; the wire
    ``message`` is generic, the failure itself (``str``) goes to the server log."""

    def __init__(self, detail: str) -> None:
        StoreUnavailable.__init__(self, "The log engine cannot write right now; retry shortly.")
        self.detail = detail

    def __str__(self) -> str:
        return self.detail


class PendingBatch:
    """A queued batch of one partition, until the high-watermark passes it."""

    __slots__ = ("base_offset", "batch", "durable", "future", "notified", "txn")

    def __init__(
        self,
        base_offset: int,
        batch: EncodedBatch,
        txn: Transaction | None,
        future: asyncio.Future[None] | None,
    ) -> None:
        self.base_offset = base_offset
        self.batch = batch
        self.txn = txn
        self.future = future
        self.durable = False
        self.notified = False

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.batch.record_count


class PartitionLog:
    """The log of one topic-partition; see the module docstring."""

    def __init__(
        self,
        tp: TopicPartition,
        directory: Path,
        config: LogConfig,
        segments: LogSegments,
        open_segments: OpenSegments,
        *,
        write_executor: Executor,
        read_executor: Executor,
        on_roll: Callable[[PartitionLog], None] = lambda log: None,
        on_failure: Callable[[BaseException], None] = lambda error: None,
        on_damage: Callable[[PartitionLog, BaseException], None] = lambda log, error: None,
        recovery_point: int = 0,
    ) -> None:
        self.tp = tp
        self.directory = directory
        self.config = config
        self.segments = segments
        self.open_segments = open_segments
        self._read_executor = read_executor
        self._on_roll = on_roll
        self._on_failure = on_failure
        self._on_damage = on_damage
        active = segments.active
        assert active.state is not None, "the active segment is loaded before the log is built"
        self.next_offset = active.state.next_offset
        self.high_watermark = self.next_offset
        self.recovery_point = recovery_point
        # (txn id, next offset after its batch) of committed transactions above the recovery point.
        self.txn_marks: deque[tuple[int, int]] = deque()
        self._unresolved: deque[PendingBatch] = deque()
        # Resolved batches ending at the high-watermark, contiguous: (header, encoded bytes).
        self._tail: deque[tuple[BatchHeader, bytes]] = deque()
        self._tail_bytes = 0
        self._watchers: dict[int, tuple[int, Callable[[], None]]] = {}  # token -> (offset, wake)
        self._watch_tokens = itertools.count()
        self._committer: GroupCommitter[Any, bool] = GroupCommitter(
            self._write, self._flushed, write_executor
        )
        self.failed: BaseException | None = None
        self.closed = False
        self.deleted = False  # closed because its topic was deleted: calls meet ``UnknownLog``
        # Appends waiting for the active segment's files to open, in arrival order (``_enqueue_when_open``).
        self._held: deque[tuple[Sequence[RecordIn], asyncio.Future[PendingBatch]]] | None = None

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def earliest_offset(self) -> int:
        first = self.segments.first
        return self.high_watermark if first is None else min(first.base_offset, self.high_watermark)

    @property
    def writes(self) -> int:
        """How many write+fsync rounds the committer has run (for tests)."""
        return self._committer.writes

    # -- appending (event loop) -----------------------------------------------------------------------

    def check_writable(self) -> None:
        if self.failed is not None:
            raise LogOffline(f"the log is offline after a write failure: {self.failed}")
        if self.closed:
            if self.deleted:
                raise UnknownLog(f"topic {self.tp.topic_id} was deleted")
            raise LogOffline(f"the log of {self.tp.topic_id}/{self.tp.partition} is closed")

    @property
    def ready(self) -> bool:
        """Whether an append can be queued at once: the active segment's files are open and no append
        waits for them (a write to it then needs no ``open``)."""
        return self._held is None and self.segments.active.is_open

    async def open_active(self) -> None:
        """Open the active segment's files, if they are not, before an append is assigned its offsets: out
        of files, that append alone fails (``FilesExhausted``, 503) with nothing queued, rather than the
        writer failing a write that others' offsets already follow."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._read_executor, self.open_segments.load, self.segments.active)
        except SegmentDeleted:
            self.check_writable()  # its topic was deleted meanwhile (UnknownLog), or the log closed
            raise LogOffline(f"the active segment of {self.name} went away") from None

    def encode(self, records: Sequence[RecordIn], *, txn_id: int = 0, now: int | None = None) -> EncodedBatch:
        """Encode ``records`` as the next batch (nothing is assigned until ``enqueue``)."""
        self.check_writable()
        batch = encode_batch(
            records, self.next_offset, txn_id=txn_id, now_ms=now_ms() if now is None else now
        )
        if len(batch.body) > MAX_RECORD_BYTES:  # a record can be too large only when the whole batch is
            check_record_sizes(records, MAX_RECORD_BYTES)
        return batch

    def enqueue(self, batch: EncodedBatch, txn: Transaction | None = None) -> PendingBatch:
        """Assign the batch its offsets and queue it for the writer (synchronous: call right after
        ``encode``, with no ``await`` in between)."""
        future = None if txn is not None else asyncio.get_running_loop().create_future()
        pending = PendingBatch(self.next_offset, batch, txn, future)
        self.next_offset = pending.next_offset
        self._unresolved.append(pending)
        self._committer.submit(pending)
        return pending

    async def append(self, records: Sequence[RecordIn]) -> int:
        """Append a single-partition batch; returns its base offset once it is durable and committed."""
        if self._held is None and self.segments.active.is_open:
            pending = self.enqueue(self.encode(records))
        else:  # an idle partition, whose files were closed (``OpenSegments``)
            pending = await self._enqueue_when_open(records)
        assert pending.future is not None
        # Not shielded (one future less per append): if the caller is cancelled, the future is
        # cancelled, but the batch is already queued and the writer never looks at the future.
        await pending.future
        return pending.base_offset

    async def _enqueue_when_open(self, records: Sequence[RecordIn]) -> PendingBatch:
        """Queue ``records`` once the active segment's files are open (``open_active``). Appends arriving
        meanwhile wait in the same line and are queued in the order they came, in one step, so offsets
        still follow arrival order; out of files, all of them fail with nothing queued."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[PendingBatch] = loop.create_future()
        if self._held is None:
            self._held = deque()
            opening = asyncio.ensure_future(self.open_active())
            opening.add_done_callback(self._opened)
        self._held.append((records, waiter))
        return await waiter

    def _opened(self, opening: asyncio.Future[None]) -> None:
        held, self._held = self._held or deque(), None
        error = opening.exception() if not opening.cancelled() else LogOffline("opening was cancelled")
        for records, waiter in held:
            if waiter.done():  # its caller went away before anything was assigned
                continue
            if error is not None:
                waiter.set_exception(error)
                continue
            try:
                waiter.set_result(self.enqueue(self.encode(records)))
            except Exception as refused:  # noqa: BLE001 - that append's own answer (offline, too large...)
                waiter.set_exception(refused)

    async def wait_idle(self) -> None:
        """Until no write is queued or in flight."""
        await self._committer.wait_idle()

    async def roll(self) -> None:
        """Roll the active segment through the writer (a no-op if it is empty); returns once done."""
        self.check_writable()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._committer.submit(RollRequest(future))
        await future

    # -- writing (worker thread) ------------------------------------------------------------------------

    def _write(self, items: list[Any]) -> bool:
        """Write ``items`` (batches and roll requests) in order, rolling as needed, then fsync once
        (``writes.write_items``). Returns whether a segment was rolled."""
        if self.failed is not None:
            # Queued before the failure (and failed with it): writing them would only add bytes to cut.
            raise LogOffline("the log is offline")
        return writes.write_items(self.directory, self.config, self.segments, self.open_segments, items)

    # -- completion (event loop) --------------------------------------------------------------------------

    def _flushed(self, items: list[Any], rolled: bool | None, error: BaseException | None) -> None:
        if error is not None:
            for item in items:
                if isinstance(item, RollRequest) and not item.future.done():
                    item.future.set_exception(LogOffline(f"roll failed: {error}"))
            if self.failed is None:
                logger.error(
                    "write to %s failed: %r; appends pause until the disk recovers", self.name, error
                )
                self._on_failure(error)
            return
        for item in items:
            if isinstance(item, RollRequest):
                if not item.future.done():
                    item.future.set_result(None)
            else:
                item.durable = True
        if rolled:
            self._on_roll(self)
        if self.failed is None:
            self._advance()

    def _advance(self) -> None:
        """Move the high-watermark over resolved batches; tell transactions when their batch is ready."""
        queue = self._unresolved
        moved = False
        appenders: list[asyncio.Future[None]] = []
        while queue:
            head = queue[0]
            if not head.durable:
                break
            txn = head.txn
            if txn is not None and not txn.committed:
                if not head.notified:
                    head.notified = True
                    txn.partition_ready()
                break
            queue.popleft()
            self.high_watermark = head.next_offset
            self._remember(head.batch)
            moved = True
            if head.future is not None:
                appenders.append(head.future)
        if moved:
            self._wake()  # readers first: a push delivery need not wait behind the publish answers
        for future in appenders:
            if not future.done():
                future.set_result(None)

    def _remember(self, batch: EncodedBatch) -> None:
        """Keep a resolved batch in the in-memory tail, dropping the oldest beyond ``_TAIL_BYTES``."""
        tail = self._tail
        if batch.size > _TAIL_BYTES:
            tail.clear()  # the tail must end at the high-watermark: start over after this batch
            self._tail_bytes = 0
            return
        buf = batch.header + batch.body
        header = read_header(buf)
        assert header is not None
        tail.append((header, buf))
        self._tail_bytes += len(buf)
        while self._tail_bytes > _TAIL_BYTES:
            self._tail_bytes -= len(tail.popleft()[1])

    def committed(self, txn: Transaction, pending: PendingBatch) -> None:
        """``txn``'s commit record is durable: its batch here is resolved."""
        self.txn_marks.append((txn.txn_id, pending.next_offset))
        self._advance()

    def fail(self, error: BaseException) -> None:
        """Take the log offline: fail every unresolved append (their bytes are cut at the next start)."""
        if self.failed is None:
            self.failed = error
        unavailable = LogOffline(f"the log engine is offline after a write failure: {error}")
        while self._unresolved:
            pending = self._unresolved.popleft()
            if pending.future is not None and not pending.future.done():
                pending.future.set_exception(unavailable)
                pending.future.exception()
            if pending.txn is not None:
                pending.txn.fail(unavailable)

    async def cut_to_high_watermark(self) -> int:
        """After a failure (``fail``), once no write is in flight: truncate the files to the high-watermark
        (see ``_cut``) and assign offsets from there again. Appends stay refused until ``resume``.
        Returns the bytes cut. Raises ``OSError`` (or ``CorruptRecordError``) if the disk is not back.
        (A log created while the engine failed was never failed itself: cutting it is a no-op.)"""
        await self._committer.wait_idle()
        if self.closed:
            return 0
        end = self.high_watermark
        removed = await asyncio.get_running_loop().run_in_executor(self._read_executor, self._cut, end)
        self.next_offset = end
        return removed

    def _cut(self, end: int) -> int:
        """In a worker thread: make offset ``end`` the log end on disk. Segments after the one holding it
        go (with any files a failed roll left behind, never listed), then that segment is cut at ``end``
        through a freshly opened descriptor and fsync'd (``Segment.cut_at``)."""
        segments = self.segments
        target = segments.floor(end)
        if target is None:
            target = segments.first
            if target is None or target.base_offset != end:
                raise CorruptRecordError(f"{self.name}: no segment holds offset {end}")
        later = [h for h in segments.values() if h.base_offset > target.base_offset]
        removed = sum(h.size for h in later)
        for handle in later:
            self.open_segments.discard(handle)
        stray = False
        with os.scandir(self.directory) as entries:
            for entry in entries:
                base = files.offset_from_name(entry.name)
                if base is not None and base > target.base_offset:
                    os.unlink(entry.path)
                    stray = True
        if stray:
            files.fsync_dir(self.directory)
        for handle in later:
            segments.remove(handle)
        with (
            self.open_segments.use(target) as segment,
            files.open_rw(files.log_file(self.directory, target.base_offset)) as fresh,
        ):
            removed += segment.cut_at(end, fresh)
        if later:
            logger.warning("%s: dropped %d segment(s) past offset %d", self.name, len(later), end)
        return removed

    def resume(self) -> None:
        """Take appends again (the manager calls this once every log and the transaction log are cut)."""
        self.failed = None

    def abandon(self, error: BaseException) -> None:
        """Fail unresolved appends because the log is going away (topic deleted, engine closed)."""
        while self._unresolved:
            pending = self._unresolved.popleft()
            if pending.future is not None and not pending.future.done():
                pending.future.set_exception(error)
                pending.future.exception()
            if pending.txn is not None:
                pending.txn.fail(error)

    # -- waiting (event loop) -------------------------------------------------------------------------------

    def _wake(self) -> None:
        if self._watchers:
            hw, closed = self.high_watermark, self.closed
            due = [t for t, (offset, _) in self._watchers.items() if offset < hw or closed]
            for token in due:
                _, wake = self._watchers.pop(token)
                wake()

    def watch(self, offset: int, wake: Callable[[], None]) -> Callable[[], None]:
        """``wake()`` once, from ``_wake``, when a record at ``offset`` is committed or the log closes
        (at once if that is so already); answers the cancel function."""
        if self.high_watermark > offset or self.closed:
            wake()
            return _nothing
        token = next(self._watch_tokens)
        self._watchers[token] = (offset, wake)

        def cancel() -> None:
            self._watchers.pop(token, None)

        return cancel

    async def wait_for(self, offset: int, timeout: float) -> bool:
        """Until a record at ``offset`` is committed; False on timeout or close. Event-driven."""
        if self.high_watermark > offset:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        cancel = self.watch(offset, wake)
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            pass
        finally:
            cancel()
        return self.high_watermark > offset

    # -- reading -----------------------------------------------------------------------------------------------

    async def read(self, offset: int, max_records: int, max_bytes: int) -> list[Record]:
        taker = reads.RecordTaker(max_records, max_bytes)
        await self._fill(offset, taker)
        return taker.records

    async def read_columns(self, offset: int, max_records: int, max_bytes: int) -> RecordColumns:
        taker = reads.ColumnTaker(max_records, max_bytes)
        await self._fill(offset, taker)
        return taker.columns()

    async def _fill(self, offset: int, taker: reads.Taker) -> None:
        """Committed records from ``offset`` on into ``taker``: from the in-memory tail when it holds
        ``offset``, else from the segment files in the read executor."""
        if offset < 0:
            raise OffsetOutOfRange(f"offset {offset} is negative")
        hw = self.high_watermark
        offset = max(offset, self.earliest_offset)
        if offset >= hw or taker.max_records <= 0:
            return
        if self._tail and self._tail[0][0].base_offset <= offset:
            reads.read_tail(self._tail, offset, hw, taker)
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(
                self._read_executor,
                reads.read_segments,
                self.segments,
                self.open_segments,
                offset,
                hw,
                self.config.index_interval_bytes,
                taker,
            )
        except reads.DamagedRecords as damaged:
            self._on_damage(self, damaged)
            raise
        self._check_not_deleted()

    def _check_not_deleted(self) -> None:
        if self.deleted:
            # Its segments went with the topic during a read (skipped as deleted): not a partial answer.
            raise UnknownLog(f"topic {self.tp.topic_id} was deleted")

    async def offset_for_time(self, timestamp: int) -> int:
        hw = self.high_watermark
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(self._read_executor, self._offset_for_time, timestamp, hw)
        self._check_not_deleted()
        return found

    def _offset_for_time(self, timestamp: int, hw: int) -> int:
        return reads.offset_for_time(self.segments, self.open_segments, timestamp, hw)

    # -- state ---------------------------------------------------------------------------------------------------

    def info(self) -> PartitionInfo:
        return PartitionInfo(
            partition=self.tp.partition,
            earliest_offset=self.earliest_offset,
            latest_offset=self.high_watermark,
            size_bytes=self.segments.size_bytes(),
        )

    async def close(self, error: BaseException | None = None) -> None:
        """Stop taking appends, let the writer finish, make indexes durable, close files, wake waiters.
        ``error`` fails the appends still unresolved; ``UnknownLog`` says the topic was deleted, which
        later calls on this log meet too."""
        self.closed = True
        self.deleted = isinstance(error, UnknownLog)
        await self._committer.wait_idle()
        if error is not None:
            self.abandon(error)
        self._wake()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._read_executor, self._close_files)

    def _close_files(self) -> None:
        cache = self.open_segments
        active = self.segments.active
        if self.failed is None:
            with cache.use(active) as segment:
                segment.sync_indexes()
        for handle in self.segments.values():
            cache.close(handle)

    def discard_files(self) -> None:
        """Forget every segment (the directory is about to be removed)."""
        for handle in self.segments.values():
            self.open_segments.discard(handle)
