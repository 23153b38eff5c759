"""Group commit, and the transaction log that makes multi-partition appends atomic.

``GroupCommitter``
    One per partition log (and one for the transaction log). Appenders ``submit`` encoded items and
    return to the event loop; while a write is in flight, new items queue up; when it finishes, the next
    write takes everything queued. So however many callers wait, each write is one vectored ``pwritev``
    and one ``fdatasync``, done in a worker thread (the engine's executor), never on the event loop and
    never under an asyncio lock (appenders hold none: offsets are assigned synchronously on the loop).
    Completion is reported on the loop through a callback, in submission order.

Multi-partition appends (``Transaction``, ``TransactionLog``)
    An append naming several partitions gets a transaction id, written into the header of each of its
    batches (``records``). The protocol:

    1. On the loop, in one synchronous step: encode every partition's batch, assign offsets, queue the
       batches. Offsets and txn ids are assigned in the same step, so on every partition transactions
       appear in txn-id order.
    2. Each partition's committer writes and fsyncs its batch. The partition's high-watermark (what
       readers see) stops in front of a batch whose transaction has not committed, and everything after
       it waits too.
    3. When every partition has its batch durable *and* at the head of its uncommitted tail (everything
       before it resolved), the transaction is ready: a 12-byte commit record is appended to the
       transaction log and fsync'd (group-committed with other transactions').
    4. Then the high-watermarks move past the batches (on the loop, all at once) and ``append`` returns.

    Recovery (``loader``) cuts a partition at the first batch above its recovery point whose txn id has
    no commit record. Because of (3), a commit record exists only if every batch of the transaction was
    durable and preceded only by committed data, so no partition loses a committed batch, and every
    partition loses the batches of a transaction that did not commit. A single-partition append needs
    no commit record: its batch CRC is its commit.

    If a write or fsync fails, the engine goes offline (Kafka's log-dir failure): every unresolved
    append fails with ``EngineUnavailable``, nothing further is accepted, reads of committed data go on.
    Once the disk takes writes again the manager cuts every partition back to its high-watermark and
    this log back to its last fsync'd record (``cut_unflushed``), then resumes; or the next start
    recovers from disk. Either way no partial transaction is ever reported or made visible: a commit
    record that reached the disk although its write failed names a txn whose batches are cut, and txn
    ids are never reused.

Transaction log format: ``<root>/__txn/<seq:020d>.txnlog`` files of 12-byte records
``uint64 txn_id, uint32 crc32c(txn_id as 8 little-endian bytes)``; a torn tail is cut at load.

Garbage collection: a commit record is needed only while some batch of its transaction lies above its
partition's durable recovery point (recovery never looks below it). At each recovery-point checkpoint
the manager computes ``resolved``: every txn id ``<= resolved`` is committed with all its batches below
the recovery points. The transaction log then writes ``__txn/checkpoint`` (``resolved`` and the next txn
id, so ids are never reused), starts a new file, and deletes the files whose largest txn id is
``<= resolved``.

Thread-safety: ``GroupCommitter`` and ``Transaction`` live on the event loop; the write functions run
in one worker thread at a time per committer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import struct
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from crc32c import crc32c

from app.stores.log.local import files

logger = logging.getLogger("queuecore.log")

T = TypeVar("T")
R = TypeVar("R")


class GroupCommitter(Generic[T, R]):
    """Batches submitted items into one ``write(items)`` at a time, in a worker thread."""

    def __init__(
        self,
        write: Callable[[list[T]], R],
        done: Callable[[list[T], R | None, BaseException | None], None],
        executor: Executor,
    ) -> None:
        self._write = write
        self._done = done
        self._executor = executor
        self._queue: list[T] = []
        self._running = False
        self._idle_waiters: list[asyncio.Future[None]] = []
        self.writes = 0  # number of write calls (for tests and metrics)

    @property
    def busy(self) -> bool:
        return self._running

    def submit(self, item: T) -> None:
        """Queue ``item`` for the next write (starting it now if none is in flight)."""
        self._queue.append(item)
        if not self._running:
            self._start()

    def _start(self) -> None:
        items = self._queue
        self._queue = []
        self._running = True
        self.writes += 1
        # Straight to the executor, back through one ``call_soon_threadsafe``: no asyncio future
        # chained to a concurrent one per write (the hop is on every publish's path).
        self._executor.submit(self._run, asyncio.get_running_loop(), items)

    def _run(self, loop: asyncio.AbstractEventLoop, items: list[T]) -> None:
        """In the worker thread: the write, then its completion handed to the loop."""
        result: R | None = None
        error: BaseException | None = None
        try:
            result = self._write(items)
        except BaseException as caught:  # noqa: BLE001 - every failure is reported to ``done``
            error = caught
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(self._finished, items, result, error)

    def _finished(self, items: list[T], result: R | None, error: BaseException | None) -> None:
        try:
            self._done(items, result, error)
        finally:
            if self._queue:
                self._start()
            else:
                self._running = False
                waiters, self._idle_waiters = self._idle_waiters, []
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)

    async def wait_idle(self) -> None:
        """Return once nothing is queued or being written."""
        while self._running:
            waiter = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(waiter)
            await waiter


class Transaction:
    """One multi-partition append in flight (see the module docstring)."""

    __slots__ = ("committed", "future", "on_ready", "parts", "txn_id", "waiting")

    def __init__(self, txn_id: int, on_ready: Callable[[Transaction], None]) -> None:
        self.txn_id = txn_id
        self.waiting = 0  # partitions whose batch is not yet durable and at the head
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.committed = False
        self.parts: list[tuple[Any, Any]] = []  # (PartitionLog, PendingBatch)
        self.on_ready = on_ready

    def partition_ready(self) -> None:
        self.waiting -= 1
        if self.waiting == 0 and not self.future.done():
            self.on_ready(self)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)
            # The appender may be gone (cancelled); do not warn about an unretrieved exception.
            self.future.exception()


@dataclass
class _Checkpoint:
    resolved: int
    future: asyncio.Future[None]


@dataclass
class _TxnFile:
    seq: int
    path: Path
    max_txn_id: int = 0
    size: int = 0


_COMMIT = struct.Struct("<QI")
_ID = struct.Struct("<Q")
_SUFFIX = ".txnlog"
_CHECKPOINT = "checkpoint"


def _commit_record(txn_id: int) -> bytes:
    return _COMMIT.pack(txn_id, crc32c(_ID.pack(txn_id)))


@dataclass
class TransactionLog:
    """Commit records of multi-partition appends, under ``<root>/__txn`` (see the module docstring)."""

    directory: Path
    executor: Executor
    next_txn_id: int = 1
    resolved: int = 0
    _files: list[_TxnFile] = field(default_factory=list)
    _fd: int | None = None
    _committer: GroupCommitter[Any, None] | None = None
    _on_committed: Callable[[Transaction, BaseException | None], None] | None = None

    # -- load (thread) ---------------------------------------------------------------------------------

    def load(self) -> set[int]:
        """Read every commit record; cut a torn tail; open the last file for appends. Returns the
        committed txn ids."""
        self.directory.mkdir(parents=True, exist_ok=True)
        committed: set[int] = set()
        floor = 0
        checkpoint = self.directory / _CHECKPOINT
        if checkpoint.exists():
            try:
                data = json.loads(checkpoint.read_bytes())
                self.resolved = int(data["resolved"])
                floor = int(data["next_txn_id"])
            except (ValueError, KeyError, TypeError):
                logger.warning("unreadable transaction checkpoint %s; ignoring it", checkpoint)
        for entry in sorted(self.directory.iterdir()):
            if entry.name.endswith(files.TMP_SUFFIX):
                entry.unlink(missing_ok=True)
                continue
            if not entry.name.endswith(_SUFFIX) or not entry.name[: -len(_SUFFIX)].isdigit():
                continue
            txn_file = _TxnFile(int(entry.name[: -len(_SUFFIX)]), entry)
            data = entry.read_bytes()
            valid = 0
            for position in range(0, len(data) - _COMMIT.size + 1, _COMMIT.size):
                txn_id, crc = _COMMIT.unpack_from(data, position)
                if crc != crc32c(_ID.pack(txn_id)):
                    break
                committed.add(txn_id)
                txn_file.max_txn_id = max(txn_file.max_txn_id, txn_id)
                valid = position + _COMMIT.size
            if valid != len(data):
                logger.warning(
                    "transaction log %s: cut %d bytes at position %d (torn or corrupt commit record)",
                    entry,
                    len(data) - valid,
                    valid,
                )
                with open(entry, "r+b") as f:
                    f.truncate(valid)
                    os.fsync(f.fileno())
            txn_file.size = valid
            self._files.append(txn_file)
        highest = max([self.resolved, floor - 1, *(f.max_txn_id for f in self._files)])
        self.next_txn_id = highest + 1
        if not self._files:
            self._new_file(1)
        else:
            self._fd = os.open(self._files[-1].path, os.O_RDWR | os.O_CREAT, 0o644)
        return committed

    def observe_txn_id(self, txn_id: int) -> None:
        """Never hand out an id seen on disk (in a partition's tail) again."""
        if txn_id >= self.next_txn_id:
            self.next_txn_id = txn_id + 1

    def _new_file(self, seq: int) -> None:
        path = self.directory / f"{seq:020d}{_SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        files.fsync_dir(self.directory)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd
        self._files.append(_TxnFile(seq, path))

    # -- run (loop) -------------------------------------------------------------------------------------

    def start(self, on_committed: Callable[[Transaction, BaseException | None], None]) -> None:
        self._on_committed = on_committed
        self._committer = GroupCommitter(self._write, self._written, self.executor)

    def new_txn_id(self) -> int:
        txn_id = self.next_txn_id
        self.next_txn_id += 1
        return txn_id

    def commit(self, txn: Transaction) -> None:
        """Append ``txn``'s commit record (group-committed); ``on_committed(txn, error)`` follows."""
        assert self._committer is not None
        self._committer.submit(txn)

    async def checkpoint(self, resolved: int) -> None:
        """Record that every txn ``<= resolved`` is resolved and drop the files holding only those."""
        assert self._committer is not None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._committer.submit(_Checkpoint(resolved, future))
        await future

    async def wait_idle(self) -> None:
        """Until no commit record or checkpoint is queued or being written."""
        if self._committer is not None:
            await self._committer.wait_idle()

    def cut_unflushed(self) -> None:
        """In a worker thread, after a failed write: truncate the active file to its last fsync'd record
        (through a fresh descriptor) and fsync that. Raises ``OSError`` if the disk is not back."""
        active = self._files[-1]
        fd = os.open(active.path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            os.ftruncate(fd, active.size)
            os.fdatasync(fd) if hasattr(os, "fdatasync") else os.fsync(fd)
        finally:
            os.close(fd)

    async def close(self) -> None:
        if self._committer is not None:
            await self._committer.wait_idle()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def file_count(self) -> int:
        return len(self._files)

    # -- writes (thread) --------------------------------------------------------------------------------

    def _write(self, items: list[Any]) -> None:
        records = [_commit_record(item.txn_id) for item in items if isinstance(item, Transaction)]
        if records:
            assert self._fd is not None
            active = self._files[-1]
            data = b"".join(records)
            written = os.pwrite(self._fd, data, active.size)
            if written != len(data):
                raise OSError(f"short write to {active.path}")
            os.fdatasync(self._fd) if hasattr(os, "fdatasync") else os.fsync(self._fd)
            active.size += len(data)
            active.max_txn_id = max(
                active.max_txn_id, *(item.txn_id for item in items if isinstance(item, Transaction))
            )
        for item in items:
            if isinstance(item, _Checkpoint):
                self._checkpoint(item.resolved)

    def _checkpoint(self, resolved: int) -> None:
        resolved = max(resolved, self.resolved)
        files.write_atomic(
            self.directory / _CHECKPOINT,
            json.dumps({"resolved": resolved, "next_txn_id": self.next_txn_id}).encode(),
        )
        self.resolved = resolved
        if self._files[-1].size > 0:
            self._new_file(self._files[-1].seq + 1)
        keep: list[_TxnFile] = []
        removed = False
        for txn_file in self._files[:-1]:
            if txn_file.max_txn_id <= resolved:
                txn_file.path.unlink(missing_ok=True)
                removed = True
            else:
                keep.append(txn_file)
        keep.append(self._files[-1])
        self._files = keep
        if removed:
            files.fsync_dir(self.directory)

    def _written(self, items: list[Any], _: None, error: BaseException | None) -> None:
        assert self._on_committed is not None
        for item in items:
            if isinstance(item, Transaction):
                self._on_committed(item, error)
            elif not item.future.done():
                if error is None:
                    item.future.set_result(None)
                else:
                    item.future.set_exception(error)
