"""Every partition log of the engine, and the schedules around them (Kafka's ``LogManager``).

Holds: the topics and their ``PartitionLog``s, the shared ``OpenSegments`` LRU, the worker threads
(writers: one write+fsync in flight per partition, up to ``_WRITE_THREADS`` partitions at once;
readers), the ``TransactionLog``, and one background task, the recovery-point checkpoint, after every
roll (debounced) and every ``_CHECKPOINT_INTERVAL_S``: ``<root>/recovery-point-offset-checkpoint`` records
each partition's high-watermark (all of it is durable and committed), so recovery after a crash scans
only from there - in practice the active segment. It then lets the transaction log drop commit records
nobody can need (see ``committer``). Retention (``enforce_retention``) runs when the broker's
``LogMaintenance`` asks, as on every engine.

Clean shutdown (``close``): stop taking appends, wait for those in flight, flush every partition, write
a final checkpoint (recovery point = log end everywhere) and then the ``.clean_shutdown`` marker. At
start the marker means no partition needs a scan; it is removed once loading is done, so a crash later
is recognised as one.

Failure and recovery: a failed write or fsync takes the whole engine offline (``fail``), like a failed
log dir in Kafka: unresolved appends fail with ``EngineUnavailable`` (``LogOffline``: 503), no new ones
are taken, committed data stays readable, ``check()`` is False. A recovery task then retries, with
backoff (``_RECOVERY_FIRST_DELAY_S`` doubling up to ``_RECOVERY_MAX_DELAY_S``), until it gets through:

1. wait until no write is in flight on any partition or the transaction log;
2. probe: create, write (``_PROBE_BYTES``), fdatasync and remove a file in the root - the disk takes
   writes again (space freed, file system writable, device back);
3. cut the transaction log back to its last fsync'd record, and every partition back to its
   high-watermark (``PartitionLog.cut_to_high_watermark``). After a failed fsync the page cache may
   hold bytes the disk does not, so nothing past the last successful fsync is trusted: it is truncated
   through a freshly opened descriptor, the truncation fsync'd, the kept tail re-read and CRC-checked.
   Batches past the high-watermark were never acknowledged (their appends failed) and never read;
   a transaction's batches go on every partition, so no partial transaction survives;
4. resume appends, at the high-watermark's offsets.

A step that fails (the disk is still full, read-only or failing) leaves the engine offline for the
next try; every step can be repeated. A restart still works as before: recovery from disk.

Topic config lives in each partition directory's ``partition.metadata`` (JSON), so a restart needs
nothing but the root directory. The file work on the root itself - partition directories, the
checkpoint file, the marker, the disk probe - is ``log_dir``'s; this module decides when it happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from app.kit.clock import now_ms
from app.stores.log.local import files, log_dir, retention
from app.stores.log.local.committer import Transaction, TransactionLog
from app.stores.log.local.config import LocalLogConfig, LogConfig
from app.stores.log.local.loader import load_partition
from app.stores.log.local.partition_log import LogOffline, PartitionLog
from app.stores.log.local.segments import LogSegments, OpenSegments, segments_for, soft_file_limit
from app.stores.log.protocol import (
    EngineUnavailable,
    RecordIn,
    TopicLogConfig,
    TopicPartition,
    UnknownLog,
)

logger = logging.getLogger("queuecore.log")

_CHECKPOINT_INTERVAL_S = 5.0
_RECOVERY_FIRST_DELAY_S = 0.2
_RECOVERY_MAX_DELAY_S = 2.0
# The recovery probe writes this much: a disk that cannot take a large batch is not back yet.
_PROBE_BYTES = 1 << 20
# Health says ``degraded`` for this long after the process last ran out of file descriptors.
_EXHAUSTED_DEGRADED_S = 30.0
_WRITE_THREADS = 32
_READ_THREADS = 8


@dataclass
class _Topic:
    topic_id: str
    config: TopicLogConfig
    partitions: dict[int, PartitionLog] = field(default_factory=dict)


class LogManager:
    """All partition logs under one root; see the module docstring."""

    def __init__(self, root: Path, config: LocalLogConfig) -> None:
        self.root = Path(root)
        self.config = config
        self.open_files = config.open_files_budget(soft_file_limit())
        self.open_segments = OpenSegments(segments_for(self.open_files))
        self._write_executor = ThreadPoolExecutor(_WRITE_THREADS, thread_name_prefix="log-writer")
        self._read_executor = ThreadPoolExecutor(_READ_THREADS, thread_name_prefix="log-reader")
        self.txn_log = TransactionLog(self.root / files.TXN_DIR, self._write_executor)
        self._topics: dict[str, _Topic] = {}
        self._open_txns: dict[int, Transaction] = {}
        self._inflight = 0
        self._idle: asyncio.Event | None = None
        self._checkpoint_wanted: asyncio.Event | None = None
        self._checkpoint_lock: asyncio.Lock | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._recovery: asyncio.Task[None] | None = None
        self.failed: BaseException | None = None
        # Partitions a read found damaged on disk (a batch failed its CRC): health is degraded until the
        # operator restores them and restarts the process.
        self.damaged: dict[TopicPartition, str] = {}
        self.recoveries = 0  # completed in-process recoveries (for tests and metrics)
        self.started = False
        self.closing = False
        self.recovery_stats: dict[str, int] = {"partitions": 0, "scanned_segments": 0, "truncated_bytes": 0}

    # -- start and stop ----------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.started:
            return
        loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        self._idle.set()
        self._checkpoint_wanted = asyncio.Event()
        self._checkpoint_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        started = time.perf_counter()
        loaded = await loop.run_in_executor(self._read_executor, self._load_all)
        for log, config in loaded:
            self._register(log, config)
        self.txn_log.start(self._txn_committed)
        self.started = True
        self._tasks = [asyncio.create_task(self._checkpoint_loop(), name="log-checkpoint")]
        limit = soft_file_limit()
        logger.info(
            "log engine started in %.0f ms: %d partitions, %d segment(s) scanned, %d bytes cut; open-file "
            "budget %d (%d segments; RLIMIT_NOFILE soft limit %s)",
            (time.perf_counter() - started) * 1000,
            self.recovery_stats["partitions"],
            self.recovery_stats["scanned_segments"],
            self.recovery_stats["truncated_bytes"],
            self.open_files,
            self.open_segments.capacity,
            "unlimited" if limit is None else limit,
        )

    def _load_all(self) -> list[tuple[PartitionLog, TopicLogConfig]]:
        root = self.root
        root.mkdir(parents=True, exist_ok=True)
        log_dir.clear_leftovers(root)
        clean = log_dir.was_clean(root)
        points = log_dir.read_checkpoint(root / files.RECOVERY_POINT_CHECKPOINT)
        committed = self.txn_log.load()
        loaded: list[tuple[PartitionLog, TopicLogConfig]] = []
        for topic_id, partition, entry in log_dir.partition_dirs(root):
            config = log_dir.read_topic_config(entry)
            point = points.get((topic_id, partition))
            result = load_partition(
                entry,
                self.open_segments,
                index_interval_bytes=self.config.index_interval_bytes,
                recovery_point=point,
                clean=clean,
                committed_txns=committed,
            )
            self.txn_log.observe_txn_id(result.max_txn_id)
            self.recovery_stats["partitions"] += 1
            self.recovery_stats["scanned_segments"] += result.scanned_segments
            self.recovery_stats["truncated_bytes"] += result.truncated_bytes
            log = self._build_log(TopicPartition(topic_id, partition), entry, config, result.segments)
            log.recovery_point = point if point is not None and result.scanned_segments == 0 else 0
            loaded.append((log, config))
        if clean:
            log_dir.remove_clean_marker(root)
        return loaded

    def _build_log(
        self, tp: TopicPartition, directory: Path, config: TopicLogConfig, segments: LogSegments
    ) -> PartitionLog:
        return PartitionLog(
            tp,
            directory,
            LogConfig.of(self.config, config),
            segments,
            self.open_segments,
            write_executor=self._write_executor,
            read_executor=self._read_executor,
            on_roll=self._on_roll,
            on_failure=self.fail,
            on_damage=self._on_damage,
        )

    def _register(self, log: PartitionLog, config: TopicLogConfig) -> None:
        topic = self._topics.get(log.tp.topic_id)
        if topic is None:
            topic = self._topics[log.tp.topic_id] = _Topic(log.tp.topic_id, config)
        topic.partitions[log.tp.partition] = log

    async def close(self) -> None:
        if not self.started or self.closing:
            return
        self.closing = True
        # Stop the background tasks between passes (cancelling one mid-pass would leave its worker
        # thread writing while we close).
        assert self._stop is not None
        self._stop.set()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert self._idle is not None
        await self._idle.wait()
        # Transactions whose appender went away (cancelled) still finish: wait for them too.
        while self._open_txns:
            pending = [asyncio.shield(txn.future) for txn in self._open_txns.values()]
            await asyncio.gather(*pending, return_exceptions=True)
        logs = self.logs()
        for log in logs:
            await log.close(LogOffline("the log engine closed"))
        loop = asyncio.get_running_loop()
        if self.failed is None:
            await self._checkpoint(final=True)
            await loop.run_in_executor(self._read_executor, log_dir.write_clean_marker, self.root)
        await self.txn_log.close()
        self._write_executor.shutdown(wait=True)
        self._read_executor.shutdown(wait=True)
        self.started = False

    # -- lookups -----------------------------------------------------------------------------------------------

    def logs(self) -> list[PartitionLog]:
        return [log for topic in self._topics.values() for log in topic.partitions.values()]

    def topic_ids(self) -> set[str]:
        return set(self._topics)

    def log(self, topic_id: str, partition: int) -> PartitionLog:
        topic = self._topics.get(topic_id)
        if topic is None:
            raise UnknownLog(f"no log for topic {topic_id}")
        log = topic.partitions.get(partition)
        if log is None:
            raise UnknownLog(f"topic {topic_id} has no partition {partition}")
        return log

    def _check_writable(self) -> None:
        if self.failed is not None:
            raise LogOffline(f"the log engine is offline after a write failure: {self.failed}")
        if not self.started or self.closing:
            raise LogOffline("the log engine is not running")

    # -- topics ----------------------------------------------------------------------------------------------------

    async def create_topic(self, topic_id: str, partitions: int, config: TopicLogConfig) -> None:
        self._check_writable()
        topic = self._topics.get(topic_id)
        if topic is not None:
            if topic.config != config:
                await self.update_config(topic_id, config)
            existing = len(topic.partitions)
            if partitions > existing:
                await self.add_partitions(topic_id, partitions)
            return
        self._topics[topic_id] = _Topic(topic_id, config)
        await self._add(topic_id, range(partitions), config)

    async def add_partitions(self, topic_id: str, partitions: int) -> None:
        self._check_writable()
        topic = self._topics.get(topic_id)
        if topic is None:
            raise UnknownLog(f"no log for topic {topic_id}")
        missing = [p for p in range(partitions) if p not in topic.partitions]
        await self._add(topic_id, missing, topic.config)

    async def _add(self, topic_id: str, partitions: Sequence[int], config: TopicLogConfig) -> None:
        loop = asyncio.get_running_loop()
        # Several at once: each creation waits on a few fsyncs, which the file system journals together.
        results = await asyncio.gather(
            *(
                loop.run_in_executor(self._read_executor, self._create_partition, topic_id, partition, config)
                for partition in partitions
            ),
            return_exceptions=True,
        )
        created = [r for r in results if isinstance(r, PartitionLog)]
        failures = [r for r in results if not isinstance(r, PartitionLog)]
        try:
            if created:
                await loop.run_in_executor(self._read_executor, files.fsync_dir, self.root)
        except OSError as exc:
            failures.append(exc)
        topic = self._topics.get(topic_id)
        for log in created:
            if topic is None:  # deleted meanwhile
                await log.close()
            elif log.tp.partition not in topic.partitions:
                topic.partitions[log.tp.partition] = log
        for failure in failures:
            # A full or read-only disk: 503, and a retry creates what is missing (create is idempotent).
            if isinstance(failure, OSError):
                raise LogOffline(f"could not create the partitions of {topic_id}: {failure!r}") from failure
            raise failure

    def _create_partition(self, topic_id: str, partition: int, config: TopicLogConfig) -> PartitionLog:
        # The root is fsync'd once for all the partitions created (``_add``).
        final = log_dir.create_partition_dir(self.root, topic_id, partition, config)
        result = load_partition(
            final,
            self.open_segments,
            index_interval_bytes=self.config.index_interval_bytes,
            recovery_point=None,
            clean=False,
        )
        return self._build_log(TopicPartition(topic_id, partition), final, config, result.segments)

    async def update_config(self, topic_id: str, config: TopicLogConfig) -> None:
        topic = self._topics.get(topic_id)
        if topic is None:
            raise UnknownLog(f"no log for topic {topic_id}")
        topic.config = config
        logs = list(topic.partitions.values())
        for log in logs:
            log.config = LogConfig.of(self.config, config)

        def persist() -> None:
            for log in logs:
                log_dir.write_topic_config(log.directory, topic_id, log.tp.partition, config)

        try:
            await asyncio.get_running_loop().run_in_executor(self._read_executor, persist)
        except OSError as exc:
            raise LogOffline(f"could not write the config of {topic_id}: {exc!r}") from exc

    async def delete_topic(self, topic_id: str) -> None:
        topic = self._topics.pop(topic_id, None)
        logs = list(topic.partitions.values()) if topic is not None else []
        for log in logs:
            await log.close(UnknownLog(f"topic {topic_id} was deleted"))
            log.discard_files()
        directories = [log.directory for log in logs]
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, log_dir.remove_topic_dirs, self.root, topic_id, directories
            )
        except OSError as exc:
            # The logs are closed and forgotten; the next start's orphan sweep removes what is left.
            logger.warning("could not remove the files of topic %s: %r", topic_id, exc)

    # -- appends ---------------------------------------------------------------------------------------------------

    async def append(self, topic_id: str, records: Mapping[int, Sequence[RecordIn]]) -> dict[int, int]:
        self._check_writable()
        topic = self._topics.get(topic_id)
        if topic is None:
            raise UnknownLog(f"no log for topic {topic_id}")
        targets: list[tuple[int, PartitionLog, Sequence[RecordIn]]] = []
        bases: dict[int, int] = {}
        for partition, batch in records.items():
            log = topic.partitions.get(partition)
            if log is None:
                raise UnknownLog(f"topic {topic_id} has no partition {partition}")
            if batch:
                targets.append((partition, log, batch))
            else:
                bases[partition] = log.next_offset
        if not targets:
            return bases
        self._enter()
        try:
            if len(targets) == 1:
                partition, log, batch = targets[0]
                bases[partition] = await log.append(batch)
                return bases
            return await self._append_atomic(targets, bases)
        finally:
            self._exit()

    async def _append_atomic(
        self, targets: list[tuple[int, PartitionLog, Sequence[RecordIn]]], bases: dict[int, int]
    ) -> dict[int, int]:
        """A multi-partition append as one transaction (protocol in ``committer``)."""
        for _, log, _ in targets:
            if not log.ready:  # before anything is assigned, as ``PartitionLog.append`` does
                await log.open_active()
        txn = Transaction(self.txn_log.new_txn_id(), self.txn_log.commit)
        now = now_ms()
        # Encode everything first: if any partition's records are invalid, nothing is assigned.
        encoded = [log.encode(batch, txn_id=txn.txn_id, now=now) for _, log, batch in targets]
        txn.waiting = len(targets)
        for (partition, log, _), batch in zip(targets, encoded, strict=True):
            pending = log.enqueue(batch, txn)
            txn.parts.append((log, pending))
            bases[partition] = pending.base_offset
        self._open_txns[txn.txn_id] = txn
        txn.future.add_done_callback(lambda _: self._open_txns.pop(txn.txn_id, None))
        await asyncio.shield(txn.future)
        return bases

    def _txn_committed(self, txn: Transaction, error: BaseException | None) -> None:
        if error is not None:
            txn.fail(LogOffline(f"could not write the commit record: {error}"))
            self.fail(error)
            return
        if txn.future.done():  # failed meanwhile (offline, topic deleted)
            return
        txn.committed = True
        for log, pending in txn.parts:
            log.committed(txn, pending)
        txn.future.set_result(None)

    def _enter(self) -> None:
        self._inflight += 1
        assert self._idle is not None
        self._idle.clear()

    def _exit(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            assert self._idle is not None
            self._idle.set()

    def fail(self, error: BaseException) -> None:
        """Take the engine offline after a write failure, until the recovery task brings it back (see
        the module docstring)."""
        if self.failed is None:
            self.failed = error
            logger.error("the log engine is offline after a write failure: %r; recovering", error)
        for log in self.logs():
            log.fail(error)
        unavailable = LogOffline(f"the log engine is offline after a write failure: {error}")
        for txn in list(self._open_txns.values()):
            txn.fail(unavailable)
        if self.started and not self.closing and (self._recovery is None or self._recovery.done()):
            self._recovery = asyncio.get_running_loop().create_task(self._recover_loop(), name="log-recovery")
            # Among the background tasks: close stops it between attempts, like the others.
            self._tasks = [t for t in self._tasks if not t.done()] + [self._recovery]

    async def _recover_loop(self) -> None:
        delay = _RECOVERY_FIRST_DELAY_S
        attempts = 0
        never = asyncio.Event()
        while await self._sleep(never, delay) and not self.closing:
            attempts += 1
            try:
                await self._recover()
                return
            except Exception as exc:  # noqa: BLE001 - the disk is not back: try again later
                if attempts == 1 or attempts % 30 == 0:
                    logger.warning("log engine recovery attempt %d failed: %r; retrying", attempts, exc)
            delay = min(delay * 2, _RECOVERY_MAX_DELAY_S)

    async def _recover(self) -> None:
        """One recovery attempt (steps in the module docstring); raises if the disk is not back."""
        assert self._checkpoint_lock is not None
        loop = asyncio.get_running_loop()
        async with self._checkpoint_lock:
            for log in self.logs():
                await log.wait_idle()
            await self.txn_log.wait_idle()
            await loop.run_in_executor(self._read_executor, log_dir.probe, self.root, _PROBE_BYTES, True)
            await loop.run_in_executor(self._read_executor, self.txn_log.cut_unflushed)
            removed = 0
            for log in self.logs():
                removed += await log.cut_to_high_watermark()
            error, self.failed = self.failed, None
            for log in self.logs():
                log.resume()
        self.recoveries += 1
        logger.warning(
            "the log engine recovered from %r: %d unacknowledged bytes cut; appends resume", error, removed
        )

    # -- background work -------------------------------------------------------------------------------------------

    async def enforce_retention(self, now: int) -> int:
        deleted = 0
        for log in self.logs():
            try:
                deleted += await retention.enforce_retention(log, now)
            except EngineUnavailable:
                continue
        return deleted

    async def _sleep(self, event: asyncio.Event, seconds: float) -> bool:
        """Wait for ``event`` or ``seconds``; False once the manager is stopping."""
        assert self._stop is not None
        waits = [asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(event.wait())]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
        return not self._stop.is_set()

    def _on_damage(self, log: PartitionLog, error: BaseException) -> None:
        if log.tp not in self.damaged:
            logger.error("damaged data in %s: %s (reads of it answer 503)", log.tp, error)
        self.damaged[log.tp] = str(error)

    def _on_roll(self, log: PartitionLog) -> None:
        if self._checkpoint_wanted is not None:
            self._checkpoint_wanted.set()

    async def _checkpoint_loop(self) -> None:
        assert self._checkpoint_wanted is not None
        while await self._sleep(self._checkpoint_wanted, _CHECKPOINT_INTERVAL_S):
            self._checkpoint_wanted.clear()
            try:
                await self._checkpoint()
            except Exception:
                logger.exception("recovery-point checkpoint failed")

    async def checkpoint(self) -> None:
        """Write the recovery-point checkpoint now and collect the transaction log."""
        await self._checkpoint()

    async def _checkpoint(self, final: bool = False) -> None:
        assert self._checkpoint_lock is not None
        async with self._checkpoint_lock:
            if self.failed is not None:
                return
            logs = self.logs()
            points = {(log.tp.topic_id, log.tp.partition): log.high_watermark for log in logs}
            loop = asyncio.get_running_loop()
            path = self.root / files.RECOVERY_POINT_CHECKPOINT
            await loop.run_in_executor(self._read_executor, log_dir.write_checkpoint, path, points)
            candidates = [self.txn_log.next_txn_id, *self._open_txns]
            for log in logs:
                point = points[(log.tp.topic_id, log.tp.partition)]
                log.recovery_point = point
                marks = log.txn_marks
                while marks and marks[0][1] <= point:
                    marks.popleft()
                if marks:
                    candidates.append(marks[0][0])
            resolved = min(candidates) - 1
            if resolved > self.txn_log.resolved or (final and self.txn_log.file_count > 1):
                await self.txn_log.checkpoint(resolved)

    # -- health -----------------------------------------------------------------------------------------------------

    async def check(self) -> bool:
        return await self.health() == "ok"

    async def health(self) -> str:
        """``ok``; ``degraded`` while the process is (or lately was) out of file descriptors - calls that
        need a file the engine does not hold open answer 503, the others are served - or once a read found
        stored data damaged (a CRC mismatch); ``down`` when the engine is offline (a failed write) or the
        disk takes no writes."""
        if not self.started or self.closing:
            return "down"

        def probe() -> str:
            try:
                log_dir.probe(self.root, 2, False)
                return "ok"
            except OSError as error:
                return "degraded" if error.errno in (errno.EMFILE, errno.ENFILE) else "down"

        status = await asyncio.get_running_loop().run_in_executor(None, probe)
        if self.open_segments.exhausted_within(_EXHAUSTED_DEGRADED_S) or self.damaged:
            return "degraded"
        if self.failed is not None:
            return "down"
        return status
