"""Start-up: leftovers, clean shutdown, recovery of only the last segment, index rebuilds, many
partitions under a file-handle cap (``loader``, ``manager``)."""

from __future__ import annotations

import os

import pytest

from app.stores.log.local import files
from app.stores.log.local.loader import clean_directory
from app.stores.log.local.segment import Segment
from app.stores.log.protocol import RecordIn, TopicLogConfig
from tests.stores.log.conftest import crash, open_local


def records(n: int, size: int = 1000, tag: str = "r") -> list[RecordIn]:
    return [RecordIn(value=f"{tag}{i}-".encode() + b"x" * size) for i in range(n)]


@pytest.fixture
def count_scans(monkeypatch):
    """Counts ``Segment.recover`` calls (full scans of a segment)."""
    calls: list[str] = []
    original = Segment.recover

    def recover(self, *args, **kwargs):
        calls.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Segment, "recover", recover)
    return calls


async def fill(engine, topic: str, appends: int, per: int = 4, size: int = 1000) -> None:
    for i in range(appends):
        await engine.append(topic, {0: records(per, size, tag=f"a{i}.")})


class TestLeftovers:
    def test_transient_files_and_orphan_indexes_are_removed(self, tmp_path):
        names = [
            "00000000000000000000.log",
            "00000000000000000000.index",
            "00000000000000000000.timeindex",
            "00000000000000000100.log.deleted",
            "00000000000000000100.index",
            "00000000000000000200.index.swap",
            "partition.metadata.tmp",
            "partition.metadata",
        ]
        for name in names:
            (tmp_path / name).write_bytes(b"")
        assert clean_directory(tmp_path) == {0: 0}
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "00000000000000000000.index",
            "00000000000000000000.log",
            "00000000000000000000.timeindex",
            "partition.metadata",
        ]


class TestCleanShutdown:
    async def test_nothing_is_scanned_after_a_clean_close(self, tmp_path, count_scans):
        engine = await open_local(tmp_path)
        await engine.create_topic("top_c", 1, TopicLogConfig())
        await fill(engine, "top_c", 40)
        await engine.close()
        assert (tmp_path / files.CLEAN_SHUTDOWN).exists()
        count_scans.clear()
        engine = await open_local(tmp_path)
        try:
            assert count_scans == []
            assert not (tmp_path / files.CLEAN_SHUTDOWN).exists()  # a crash from now on is seen as one
            info = await engine.partition_info("top_c", 0)
            assert info.latest_offset == 160
            assert (await engine.read("top_c", 0, 159))[0].value.startswith(b"a39.3-")
        finally:
            await engine.close()


class TestRecoveryAfterACrash:
    async def test_only_the_last_segment_is_scanned(self, tmp_path, count_scans):
        engine = await open_local(tmp_path)
        await engine.create_topic("top_r", 1, TopicLogConfig())
        await fill(engine, "top_r", 120)
        await engine.checkpoint()  # what the checkpoint task does right after each roll
        await fill(engine, "top_r", 2)  # no roll after the checkpoint
        segments = sorted((tmp_path / "top_r-0").glob("*.log"))
        assert len(segments) > 30
        crash(engine)
        count_scans.clear()
        engine = await open_local(tmp_path)
        try:
            assert count_scans == [str(segments[-1])]
            assert engine.manager.recovery_stats["scanned_segments"] == 1
            info = await engine.partition_info("top_r", 0)
            assert (info.earliest_offset, info.latest_offset) == (0, 488)
            first = await engine.read("top_r", 0, 0, max_records=1)
            assert first[0].value.startswith(b"a0.0-")
            assert await engine.append("top_r", {0: records(1)}) == {0: 488}
        finally:
            await engine.close()

    async def test_without_a_checkpoint_everything_is_scanned(self, tmp_path, count_scans):
        engine = await open_local(tmp_path)
        await engine.create_topic("top_n", 1, TopicLogConfig())
        await fill(engine, "top_n", 20)
        crash(engine)
        (tmp_path / files.RECOVERY_POINT_CHECKPOINT).unlink(missing_ok=True)
        count_scans.clear()
        engine = await open_local(tmp_path)
        try:
            assert len(count_scans) == len(list((tmp_path / "top_n-0").glob("*.log")))
            assert (await engine.partition_info("top_n", 0)).latest_offset == 80
        finally:
            await engine.close()

    @pytest.mark.slow
    async def test_a_1_gib_partition_opens_in_well_under_a_second(self, tmp_path, count_scans):
        engine = await open_local(tmp_path, segment_bytes=128 << 20, index_interval_bytes=4096)
        await engine.create_topic("top_big", 1, TopicLogConfig())
        value = os.urandom(1 << 20)
        batch = [RecordIn(value=value, timestamp_ms=1)] * 16
        for _ in range(64):  # 64 x 16 MiB = 1 GiB
            await engine.append("top_big", {0: batch})
        await engine.checkpoint()
        await engine.append("top_big", {0: batch[:2]})
        crash(engine)
        count_scans.clear()
        engine = await open_local(tmp_path, segment_bytes=128 << 20, index_interval_bytes=4096)
        try:
            info = await engine.partition_info("top_big", 0)
            assert info.size_bytes > 1 << 30 and info.latest_offset == 64 * 16 + 2
            # Only the segment past the recovery point was scanned: opening does not read 1 GiB (how
            # long it takes is the engine benchmark's business, not a test's).
            assert len(count_scans) == 1
        finally:
            await engine.close()


class TestIndexes:
    async def test_missing_and_corrupt_indexes_are_rebuilt(self, tmp_path, caplog):
        engine = await open_local(tmp_path)
        await engine.create_topic("top_i", 1, TopicLogConfig())
        await fill(engine, "top_i", 30)
        expected = await engine.read("top_i", 0, 0, max_records=1000)
        await engine.close()
        directory = tmp_path / "top_i-0"
        logs = sorted(directory.glob("*.log"))
        base_a = files.offset_from_name(logs[1].name)
        base_b = files.offset_from_name(logs[2].name)
        files.index_file(directory, base_a).unlink()
        index_b = files.index_file(directory, base_b)
        index_b.write_bytes(index_b.read_bytes()[:-3] if index_b.stat().st_size else b"\x01\x02\x03")
        engine = await open_local(tmp_path)
        try:
            assert await engine.read("top_i", 0, 0, max_records=1000) == expected
            assert "missing" in caplog.text and "rebuilding" in caplog.text
            for offset in (base_a, base_a + 1, base_b + 2):
                (record,) = await engine.read("top_i", 0, offset, max_records=1)
                assert record == expected[offset]
        finally:
            await engine.close()


class TestManyPartitions:
    async def test_open_files_stay_under_the_cap(self, tmp_path):
        engine = await open_local(tmp_path, open_files=48)
        before = len(os.listdir("/proc/self/fd"))
        try:
            await engine.create_topic("top_m", 600, TopicLogConfig())
            for p in range(600):
                await engine.append("top_m", {p: records(1, 10)})
            await engine.add_partitions("top_m", 700)
            for p in range(0, 700, 7):
                assert [r.offset for r in await engine.read("top_m", p, 0)] == ([0] if p < 600 else [])
            assert len(engine.manager.open_segments) <= 16
            assert len(os.listdir("/proc/self/fd")) - before <= 16 * 3 + 10
        finally:
            await engine.close()
        engine = await open_local(tmp_path, open_files=48)
        try:
            assert (await engine.partition_info("top_m", 599)).latest_offset == 1
            assert (await engine.partition_info("top_m", 699)).latest_offset == 0
        finally:
            await engine.close()
