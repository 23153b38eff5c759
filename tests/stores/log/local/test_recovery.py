"""In-process recovery after failed writes (``manager``: the recovery task; ``PartitionLog._cut``;
``Segment.cut_at``).

A failed write or fsync takes the engine offline: no append is acknowledged that was not fsync'd, and
appends answer ``EngineUnavailable`` (503) while the disk is broken. Once the disk takes writes again the
engine comes back by itself - no restart - after cutting every partition back to its high-watermark:
what the failed writes left in the files (whole batches that were never fsync'd, a torn batch of a short
write, a transaction's batch on the partition that did write it, the files of a half-done roll) is gone,
on disk, before the next append. A crash-restart afterwards finds nothing to cut.

Faults are injected in the engine's file layer (an fsync that raises EIO, a write cut short by ENOSPC,
a directory fsync that fails during a roll), and for real: a tmpfs of a few MiB filled to ENOSPC.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from app.stores.errors import StoreUnavailable
from app.stores.log.local import LocalLogEngine, files
from app.stores.log.local.files import BlockFile
from app.stores.log.local.segment import Segment
from app.stores.log.protocol import EngineUnavailable, RecordIn, TopicLogConfig
from tests.fixtures.disks import small_disk
from tests.stores.log.conftest import crash, open_local


def segment_logs(root: Path, topic: str, partition: int) -> list[Path]:
    return sorted((root / f"{topic}-{partition}").glob("*.log"))


def on_disk(root: Path, topic: str, partition: int) -> int:
    return sum(p.stat().st_size for p in segment_logs(root, topic, partition))


async def values(engine: LocalLogEngine, topic: str, partition: int) -> list[bytes]:
    return [r.value for r in await engine.read(topic, partition, 0, max_records=10_000, max_bytes=1 << 26)]


async def recovered(engine: LocalLogEngine, tries: int = 300) -> None:
    """Until the engine takes appends again (its health check passes), within a bounded number of looks."""
    for _ in range(tries):
        if await engine.check():
            return
        await asyncio.sleep(0.05)
    pytest.fail("the engine did not recover after the disk did")


class Fault:
    """A switch the patched file functions look at."""

    def __init__(self) -> None:
        self.on = False


def break_fsync(
    monkeypatch: pytest.MonkeyPatch, applies: Callable[[BlockFile], bool] = lambda f: True
) -> Fault:
    """Every ``BlockFile.sync`` (fdatasync of segments and indexes) raises EIO while the fault is on."""
    fault = Fault()
    original = BlockFile.sync

    def sync(self: BlockFile) -> None:
        if fault.on and applies(self):
            raise OSError(errno.EIO, "Input/output error")
        original(self)

    monkeypatch.setattr(BlockFile, "sync", sync)
    return fault


async def reopen_after_crash(engine: LocalLogEngine, root: Path) -> LocalLogEngine:
    crash(engine)
    return await open_local(root, segment_bytes=engine.config.segment_bytes)


async def test_an_fsync_error_pauses_appends_until_the_disk_recovers(tmp_path, monkeypatch):
    engine = await open_local(tmp_path, segment_bytes=1 << 20)
    try:
        await engine.create_topic("top_r", 1, TopicLogConfig())
        assert await engine.append("top_r", {0: [RecordIn(value=b"ok")]}) == {0: 0}
        durable = on_disk(tmp_path, "top_r", 0)
        fault = break_fsync(monkeypatch)
        fault.on = True

        with pytest.raises(EngineUnavailable) as caught:
            await engine.append("top_r", {0: [RecordIn(value=b"never fsync'd")]})
        assert isinstance(caught.value, StoreUnavailable)  # the API answers it 503 SERVICE_UNAVAILABLE
        assert on_disk(tmp_path, "top_r", 0) > durable  # written, in the page cache, not durable
        await asyncio.sleep(1.0)  # recovery attempts fail meanwhile: the disk is still broken
        assert await engine.check() is False
        with pytest.raises(EngineUnavailable):
            await engine.append("top_r", {0: [RecordIn(value=b"refused")]})
        assert await values(engine, "top_r", 0) == [b"ok"]  # committed data is still served

        fault.on = False
        await recovered(engine)  # no restart
        assert on_disk(tmp_path, "top_r", 0) == durable  # the never-fsync'd batch is cut, on disk
        assert engine.manager.recoveries == 1
        assert await engine.append("top_r", {0: [RecordIn(value=b"again")]}) == {0: 1}
        assert await values(engine, "top_r", 0) == [b"ok", b"again"]
    except BaseException:
        await engine.close()
        raise
    engine = await reopen_after_crash(engine, tmp_path)
    try:
        assert engine.manager.recovery_stats["truncated_bytes"] == 0
        assert await values(engine, "top_r", 0) == [b"ok", b"again"]
    finally:
        await engine.close()


async def test_a_torn_batch_of_a_short_write_is_cut_before_the_next_append(tmp_path, monkeypatch):
    engine = await open_local(tmp_path, segment_bytes=1 << 20)
    try:
        await engine.create_topic("top_w", 1, TopicLogConfig())
        await engine.append("top_w", {0: [RecordIn(value=b"a" * 100)]})
        durable = on_disk(tmp_path, "top_w", 0)
        fault = Fault()
        original = BlockFile.write

        def short_write(self: BlockFile, position: int, buffers: list[bytes]) -> int:
            if not fault.on:
                return original(self, position, buffers)
            data = b"".join(buffers)
            original(self, position, [data[: len(data) // 2]])  # half of it got there, then the disk filled
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(BlockFile, "write", short_write)
        fault.on = True
        with pytest.raises(EngineUnavailable):
            await engine.append("top_w", {0: [RecordIn(value=b"b" * 5000) for _ in range(10)]})
        assert on_disk(tmp_path, "top_w", 0) > durable  # a torn batch in the file
        fault.on = False
        await recovered(engine)
        assert on_disk(tmp_path, "top_w", 0) == durable
        assert await engine.append("top_w", {0: [RecordIn(value=b"c")]}) == {0: 1}
        assert await values(engine, "top_w", 0) == [b"a" * 100, b"c"]
    except BaseException:
        await engine.close()
        raise
    engine = await reopen_after_crash(engine, tmp_path)
    try:
        assert engine.manager.recovery_stats["truncated_bytes"] == 0  # nothing torn was kept
        assert await values(engine, "top_w", 0) == [b"a" * 100, b"c"]
    finally:
        await engine.close()


async def test_no_partition_keeps_its_part_of_a_failed_transaction(tmp_path, monkeypatch):
    engine = await open_local(tmp_path, segment_bytes=1 << 20)
    try:
        await engine.create_topic("top_t", 2, TopicLogConfig())
        await engine.append("top_t", {0: [RecordIn(value=b"a0")], 1: [RecordIn(value=b"b0")]})
        durable = [on_disk(tmp_path, "top_t", p) for p in (0, 1)]
        original = Segment.flush
        fault = Fault()

        def flush(self: Segment) -> None:
            original(self)  # partition 0's batch is durable; partition 1's fsync fails
            if fault.on and "top_t-1" in self.name:
                raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(Segment, "flush", flush)
        fault.on = True
        with pytest.raises(EngineUnavailable):
            await engine.append("top_t", {0: [RecordIn(value=b"a1")], 1: [RecordIn(value=b"b1")]})
        fault.on = False
        await recovered(engine)
        # Partition 0 wrote and fsync'd its half; the transaction never committed, so it is cut too.
        assert [on_disk(tmp_path, "top_t", p) for p in (0, 1)] == durable
        assert await engine.append("top_t", {0: [RecordIn(value=b"a2")], 1: [RecordIn(value=b"b2")]}) == {
            0: 1,
            1: 1,
        }
    except BaseException:
        await engine.close()
        raise
    engine = await reopen_after_crash(engine, tmp_path)
    try:
        assert engine.manager.recovery_stats["truncated_bytes"] == 0
        assert await values(engine, "top_t", 0) == [b"a0", b"a2"]
        assert await values(engine, "top_t", 1) == [b"b0", b"b2"]
    finally:
        await engine.close()


async def test_a_roll_that_failed_halfway_leaves_no_segment_behind(tmp_path, monkeypatch):
    engine = await open_local(tmp_path, segment_bytes=4096)
    try:
        await engine.create_topic("top_s", 1, TopicLogConfig())
        await engine.append("top_s", {0: [RecordIn(value=b"x" * 3000)]})
        before = segment_logs(tmp_path, "top_s", 0)
        fault = Fault()
        original = files.fsync_dir

        def fsync_dir(path: Path) -> None:
            if fault.on:
                raise OSError(errno.EIO, "Input/output error")
            original(path)

        monkeypatch.setattr(files, "fsync_dir", fsync_dir)
        fault.on = True
        with pytest.raises(EngineUnavailable):
            await engine.append("top_s", {0: [RecordIn(value=b"y" * 3000)]})  # rolls, then fails
        assert len(segment_logs(tmp_path, "top_s", 0)) == len(before) + 1  # the new segment's files
        await asyncio.sleep(0.5)
        assert await engine.check() is False  # the directory still cannot be fsync'd
        fault.on = False
        await recovered(engine)
        assert segment_logs(tmp_path, "top_s", 0) == before
        for i in range(4):  # rolls work again
            assert await engine.append("top_s", {0: [RecordIn(value=b"z%d" % i * 1000)]}) == {0: 1 + i}
        assert len(segment_logs(tmp_path, "top_s", 0)) > len(before)
    except BaseException:
        await engine.close()
        raise
    engine = await reopen_after_crash(engine, tmp_path)
    try:
        assert engine.manager.recovery_stats["truncated_bytes"] == 0
        assert await values(engine, "top_s", 0) == [b"x" * 3000, *(b"z%d" % i * 1000 for i in range(4))]
    finally:
        await engine.close()


async def test_a_full_file_system_fails_appends_and_they_resume_when_space_is_freed(tmp_path):
    """A real ENOSPC: the engine's root is a 4 MiB tmpfs, filled up by a ballast file, then emptied."""
    root = tmp_path / "disk"
    with small_disk(root, 4) as disk:
        engine = await open_local(root / "log", segment_bytes=1 << 20)
        try:
            await engine.create_topic("top_d", 2, TopicLogConfig())
            acked: dict[int, list[bytes]] = {0: [], 1: []}
            for i in range(20):
                batch = [f"{i}.{j}".encode() * 100 for j in range(10)]
                await engine.append("top_d", {i % 2: [RecordIn(value=v) for v in batch]})
                acked[i % 2] += batch
            disk.fill()
            for i in range(5):  # single and multi-partition appends, none acknowledged
                with pytest.raises(EngineUnavailable):
                    await engine.append(
                        "top_d", {p: [RecordIn(value=b"full" * 4000)] for p in ((0,), (0, 1))[i % 2]}
                    )
            assert await engine.check() is False
            await asyncio.sleep(0.5)
            assert await engine.check() is False  # still full: the recovery probe fails
            assert [await values(engine, "top_d", p) for p in (0, 1)] == [acked[0], acked[1]]

            disk.free()
            await recovered(engine)
            for i in range(6):
                batch = [f"after{i}.{j}".encode() * 100 for j in range(10)]
                await engine.append("top_d", {i % 2: [RecordIn(value=v) for v in batch]})
                acked[i % 2] += batch
            await engine.append("top_d", {0: [RecordIn(value=b"m0")], 1: [RecordIn(value=b"m1")]})
            acked[0].append(b"m0")
            acked[1].append(b"m1")
            assert [await values(engine, "top_d", p) for p in (0, 1)] == [acked[0], acked[1]]
        except BaseException:
            await engine.close()
            raise
        crash(engine)
        engine = await open_local(root / "log", segment_bytes=1 << 20)
        try:
            assert engine.manager.recovery_stats["truncated_bytes"] == 0
            assert [await values(engine, "top_d", p) for p in (0, 1)] == [acked[0], acked[1]]
        finally:
            await engine.close()


async def test_a_commit_record_that_could_not_be_fsynced_commits_nothing(tmp_path, monkeypatch):
    """The transaction log's fdatasync fails: both partitions wrote and fsync'd their batches, but the
    transaction did not commit, so neither batch survives - in this process or after a crash."""
    engine = await open_local(tmp_path, segment_bytes=1 << 20)
    try:
        await engine.create_topic("top_c", 2, TopicLogConfig())
        await engine.append("top_c", {0: [RecordIn(value=b"a0")], 1: [RecordIn(value=b"b0")]})
        durable = [on_disk(tmp_path, "top_c", p) for p in (0, 1)]
        txn_files = sorted((tmp_path / files.TXN_DIR).glob("*.txnlog"))
        txn_size = sum(p.stat().st_size for p in txn_files)
        fault = Fault()
        original = os.fdatasync

        def fdatasync(fd: int) -> None:
            if fault.on and os.readlink(f"/proc/self/fd/{fd}").endswith(".txnlog"):
                raise OSError(errno.EIO, "Input/output error")
            original(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)
        fault.on = True
        with pytest.raises(EngineUnavailable):
            await engine.append("top_c", {0: [RecordIn(value=b"a1")], 1: [RecordIn(value=b"b1")]})
        grown = [on_disk(tmp_path, "top_c", p) for p in (0, 1)]
        assert grown[0] > durable[0] and grown[1] > durable[1]  # both batches were written
        await asyncio.sleep(0.5)
        assert await engine.check() is False  # the transaction log still cannot be fsync'd
        fault.on = False
        await recovered(engine)
        assert [on_disk(tmp_path, "top_c", p) for p in (0, 1)] == durable
        assert sum(p.stat().st_size for p in txn_files) == txn_size  # the unsynced commit record is cut
        assert await engine.append("top_c", {0: [RecordIn(value=b"a2")], 1: [RecordIn(value=b"b2")]}) == {
            0: 1,
            1: 1,
        }
    except BaseException:
        await engine.close()
        raise
    engine = await reopen_after_crash(engine, tmp_path)
    try:
        assert engine.manager.recovery_stats["truncated_bytes"] == 0
        assert await values(engine, "top_c", 0) == [b"a0", b"a2"]
        assert await values(engine, "top_c", 1) == [b"b0", b"b2"]
    finally:
        await engine.close()


async def test_under_load_through_many_failures_the_log_is_exactly_what_was_acknowledged(
    tmp_path, monkeypatch
):
    """Writers append single- and multi-partition batches non-stop (small segments: rolls all the time)
    while fsyncs fail and recover ten times. Afterwards - and after a crash-restart - each partition holds
    exactly the acknowledged records at their acknowledged offsets: no acknowledged one lost, no failed one
    visible, no gap."""
    fault = break_fsync(monkeypatch)
    engine = await open_local(tmp_path, segment_bytes=8192)
    rng = random.Random(7)
    acked: dict[int, dict[int, bytes]] = {0: {}, 1: {}, 2: {}}
    counts = {"acked": 0, "refused": 0}
    stop = asyncio.Event()

    async def writer(n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            parts = rng.sample(range(3), rng.choice((1, 1, 2, 3)))
            batch = {
                p: [f"{n}.{i}.{p}.{j}".encode() * rng.randrange(1, 40) for j in range(rng.randrange(1, 6))]
                for p in parts
            }
            try:
                bases = await engine.append(
                    "top_l", {p: [RecordIn(value=v) for v in vs] for p, vs in batch.items()}
                )
            except EngineUnavailable:
                counts["refused"] += 1
                await asyncio.sleep(0.01)
                continue
            counts["acked"] += 1
            for p, vs in batch.items():
                for j, v in enumerate(vs):
                    assert bases[p] + j not in acked[p], "an offset acknowledged twice"
                    acked[p][bases[p] + j] = v

    async def stored() -> dict[int, dict[int, bytes]]:
        return {
            p: {
                r.offset: r.value
                for r in await engine.read("top_l", p, 0, max_records=100_000, max_bytes=1 << 28)
            }
            for p in range(3)
        }

    try:
        await engine.create_topic("top_l", 3, TopicLogConfig())
        writers = [asyncio.create_task(writer(n)) for n in range(4)]
        for _ in range(10):
            await asyncio.sleep(rng.uniform(0.05, 0.2))
            fault.on = True
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            fault.on = False
            await recovered(engine)
        await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*writers)
        assert engine.manager.recoveries >= 5 and counts["acked"] > 50 and counts["refused"] > 0
        assert await stored() == acked
        assert all(sorted(acked[p]) == list(range(len(acked[p]))) for p in range(3))  # dense
    except BaseException:
        stop.set()
        await engine.close()
        raise
    engine = await reopen_after_crash(engine, tmp_path)
    try:
        assert engine.manager.recovery_stats["truncated_bytes"] == 0
        assert await stored() == acked
    finally:
        await engine.close()
