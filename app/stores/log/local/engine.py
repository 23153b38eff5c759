"""``LocalLogEngine``: the ``LogEngine`` protocol over segment files on this machine.

Durability is ``"fsync"``: ``append`` returns once its batches (and, for several partitions, the
transaction's commit record) are written and ``fdatasync``'d; a crash at any moment loses no
acknowledged record and never exposes part of a multi-partition append.

How the pieces fit (each module's docstring has the details)::

    engine.LocalLogEngine            the protocol: argument checks, UnknownLog, EngineUnavailable
      manager.LogManager             topics -> partitions, transactions, retention + checkpoint tasks
        partition_log.PartitionLog   one writer per partition, high-watermark, committed reads, waits
          committer.GroupCommitter   many appends -> one pwritev + one fdatasync, in a worker thread
          writes / reads             the writer thread's writes and rolls; committed reads
          segments.LogSegments       base offset -> segment; OpenSegments caps open files (LRU)
            segment.Segment          .log + .index + .timeindex
              records                batch format, CRC32C
              index                  OffsetIndex, TimeIndex
        committer.TransactionLog     commit records of multi-partition appends (__txn/)
        loader                       start-up recovery of one partition
        log_dir                      the root on disk: partition dirs, checkpoint file, marker, probe
        retention                    whole-segment deletion by time and size
      files                          names and positioned file I/O
      config.LocalLogConfig          the engine's knobs, frozen, built by whoever builds the engine

Errors: ``UnknownLog`` (no such topic/partition, also for a call under way when its topic is deleted),
``EngineUnavailable`` (``LogOffline``: a write or fsync failed and the disk has not recovered yet - the
engine comes back by itself once it has, see ``manager``; ``FilesExhausted``: the process had no file
descriptor left for a segment this call needed - that call alone fails, see ``segments``),
``OffsetOutOfRange`` (negative offsets), and internally ``CorruptRecordError`` /
``CorruptIndexError`` (handled by recovery and index rebuilds).

Open files: at most ``LocalLogConfig.open_files`` segment files (by default half the process's soft
``RLIMIT_NOFILE``); idle segments are closed and reopened on demand (``segments.OpenSegments``).

Record timestamps: a record given ``timestamp_ms=0`` is stamped with the append time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import platform
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from app.stores.log.local import snapshot
from app.stores.log.local.config import LocalLogConfig
from app.stores.log.local.manager import LogManager
from app.stores.log.local.partition_log import OffsetOutOfRange
from app.stores.log.local.records import MAX_RECORD_BYTES
from app.stores.log.protocol import (
    PartitionExtent,
    PartitionInfo,
    Record,
    RecordColumns,
    RecordIn,
    Replica,
    TopicLogConfig,
)

# The one copy of every partition is on this machine's disk: describe names the machine.
SERVER = platform.node() or "local"


class LocalLogEngine:
    """The local, fsync-durable log engine (see the module docstring)."""

    def __init__(self, root: Path, config: LocalLogConfig | None = None) -> None:
        self.root = Path(root)
        self.config = config or LocalLogConfig()
        self.manager = LogManager(self.root, self.config)
        # Every partition's one copy: here, leading, current, in the configured zone (None: not said).
        self._replicas = (
            Replica(server=SERVER, leader=True, current=True, zone=self.config.zone or None, lag=0),
        )

    @property
    def durability(self) -> str:
        return "fsync"

    def durability_for(self, replicas: int) -> str:
        return "fsync"

    @property
    def default_replicas(self) -> int:
        return 1

    @property
    def replica_choices(self) -> tuple[int, ...]:
        # One machine, one copy: a topic asking for more is refused rather than silently under-replicated.
        return (1,)

    @property
    def max_record_bytes(self) -> int:
        return MAX_RECORD_BYTES

    @property
    def exclusive(self) -> bool:
        # The local deployment is one API process over its own directory: nobody else creates logs in it.
        return True

    def idempotency_records(self, window_seconds: float) -> None:
        # One process owns these logs: its publisher keeps the keys in memory.
        return None

    async def take_turn(self, duty: str, holder: str, now_ms: int, ttl_ms: int) -> bool:
        # The one process of the local deployment does every duty.
        return True

    async def start(self) -> None:
        await self.manager.start()

    async def close(self) -> None:
        await self.manager.close()

    async def create_topic(self, topic_id: str, partitions: int, config: TopicLogConfig) -> None:
        _check_topic_id(topic_id)
        if partitions < 1:
            raise ValueError("a topic has at least one partition")
        await self.manager.create_topic(topic_id, partitions, config)

    async def add_partitions(self, topic_id: str, partitions: int) -> None:
        await self.manager.add_partitions(topic_id, partitions)

    async def update_config(self, topic_id: str, config: TopicLogConfig) -> None:
        await self.manager.update_config(topic_id, config)

    async def delete_topic(self, topic_id: str) -> None:
        await self.manager.delete_topic(topic_id)

    async def append(self, topic_id: str, records: Mapping[int, Sequence[RecordIn]]) -> dict[int, int]:
        return await self.manager.append(topic_id, records)

    async def read(
        self, topic_id: str, partition: int, offset: int, max_records: int = 100, max_bytes: int = 1 << 20
    ) -> list[Record]:
        return await self.manager.log(topic_id, partition).read(offset, max_records, max_bytes)

    async def read_columns(
        self, topic_id: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> RecordColumns:
        return await self.manager.log(topic_id, partition).read_columns(offset, max_records, max_bytes)

    async def offset_for_time(self, topic_id: str, partition: int, timestamp_ms: int) -> int:
        return await self.manager.log(topic_id, partition).offset_for_time(timestamp_ms)

    async def partition_info(self, topic_id: str, partition: int) -> PartitionInfo:
        info = self.manager.log(topic_id, partition).info()
        return dataclasses.replace(info, replicas=self._replicas)

    async def describe_partitions(self, topic_id: str, partitions: int) -> list[PartitionInfo]:
        # In memory: no round trips to spread.
        return [await self.partition_info(topic_id, p) for p in range(partitions)]

    async def wait_for(self, topic_id: str, partition: int, offset: int, timeout: float) -> bool:
        if offset < 0:
            raise OffsetOutOfRange(f"offset {offset} is negative")
        return await self.manager.log(topic_id, partition).wait_for(offset, timeout)

    def watch(
        self, topic_id: str, partition: int, offset: int, wake: Callable[[], None]
    ) -> Callable[[], None]:
        if offset < 0:
            raise OffsetOutOfRange(f"offset {offset} is negative")
        return self.manager.log(topic_id, partition).watch(offset, wake)

    async def enforce_retention(self, now_ms: int) -> int:
        return await self.manager.enforce_retention(now_ms)

    async def check(self) -> bool:
        return await self.manager.check()

    async def health(self) -> str:
        # Reads and writes share one disk here: when appends fail, the engine is down. Out of file
        # descriptors it is degraded: the partitions it holds open go on serving.
        return await self.manager.health()

    async def export_logs(self, dest: Path) -> list[PartitionExtent]:
        # From the files, in the order ``snapshot`` explains; then the copy is recovered as a root of its own.
        await asyncio.to_thread(snapshot.copy_root, self.root, dest)
        return await _extents(dest, self.config)

    async def import_logs(self, src: Path) -> list[PartitionExtent]:
        await asyncio.to_thread(snapshot.restore_root, src, self.root)
        return await _extents(self.root, self.config)

    # -- beyond the protocol --------------------------------------------------------------------------------

    async def topic_ids(self) -> set[str]:
        """Ids of the topics with logs here (for the orphan sweep, ``topics.sweep_orphan_logs``)."""
        return self.manager.topic_ids()

    async def checkpoint(self) -> None:
        """Write the recovery-point checkpoint now (normally done after rolls and every few seconds)."""
        await self.manager.checkpoint()


async def _extents(root: Path, config: LocalLogConfig) -> list[PartitionExtent]:
    """Open ``root`` as an engine (recovering it) and close it cleanly; what each partition holds."""
    manager = LogManager(root, config)
    await manager.start()
    try:
        return sorted(
            PartitionExtent(log.tp.topic_id, log.tp.partition, log.earliest_offset, log.high_watermark)
            for log in manager.logs()
        )
    finally:
        await manager.close()


def _check_topic_id(topic_id: str) -> None:
    # The id names directories: keep it to characters that are safe there.
    if not topic_id or topic_id.startswith(".") or "/" in topic_id or "\\" in topic_id or "\0" in topic_id:
        raise ValueError(f"invalid topic id {topic_id!r}")
    if topic_id == "__txn":
        raise ValueError("__txn is reserved")
