"""The local engine's ``LogManager`` (``app/stores/log/local/manager.py``): topics and their partitions
on disk across restarts, the recovery-point checkpoint, clean shutdown, and what a stopped engine
refuses. (Its recovery after failed writes is ``test_recovery.py``; start-up scans ``test_loader.py``.)
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from app.stores.log.local import files, log_dir
from app.stores.log.local.partition_log import LogOffline
from app.stores.log.local.segments import FilesExhausted
from app.stores.log.protocol import RecordIn, TopicLogConfig, UnknownLog
from tests.fixtures.files import fill, out_of_files
from tests.stores.log.conftest import open_local


def records(n: int, tag: str = "r") -> list[RecordIn]:
    return [RecordIn(value=f"{tag}{i}".encode()) for i in range(n)]


class TestTopics:
    async def test_creating_again_adds_partitions_and_takes_the_new_config_across_a_restart(
        self, tmp_path: Path
    ):
        engine = await open_local(tmp_path)
        await engine.create_topic("top_a", 1, TopicLogConfig())
        await engine.append("top_a", {0: records(3)})
        await engine.create_topic("top_a", 3, TopicLogConfig(retention_ms=60_000))
        await engine.close()
        engine = await open_local(tmp_path)
        try:
            with pytest.raises(UnknownLog):
                engine.manager.log("top_a", 3)
            for partition in range(3):
                log = engine.manager.log("top_a", partition)
                assert log.config.retention_ms == 60_000
                assert log_dir.read_topic_config(log.directory) == TopicLogConfig(retention_ms=60_000)
            assert (await engine.partition_info("top_a", 0)).latest_offset == 3  # kept what it had
        finally:
            await engine.close()

    async def test_deleting_removes_its_directories_even_those_not_loaded(self, tmp_path: Path):
        engine = await open_local(tmp_path)
        try:
            await engine.create_topic("top_a", 2, TopicLogConfig())
            await engine.create_topic("top_b", 1, TopicLogConfig())
            await engine.append("top_a", {0: records(2), 1: records(2)})
            # A partition directory of the topic that the engine never loaded (left by a crash).
            log_dir.create_partition_dir(tmp_path, "top_a", 9, TopicLogConfig())
            await engine.delete_topic("top_a")
            assert await engine.topic_ids() == {"top_b"}
            assert [t for t, _, _ in log_dir.partition_dirs(tmp_path)] == ["top_b"]
            with pytest.raises(UnknownLog):
                await engine.read("top_a", 0, 0)
        finally:
            await engine.close()

    async def test_appends_name_a_known_topic_and_partition(self, tmp_path: Path):
        engine = await open_local(tmp_path)
        try:
            await engine.create_topic("top_a", 2, TopicLogConfig())
            with pytest.raises(UnknownLog):
                await engine.append("top_nope", {0: records(1)})
            with pytest.raises(UnknownLog):
                await engine.append("top_a", {2: records(1)})
            # Nothing to write there: its next offset, and nothing written.
            await engine.append("top_a", {1: records(4)})
            assert await engine.append("top_a", {0: [], 1: []}) == {0: 0, 1: 4}
            assert (await engine.partition_info("top_a", 1)).latest_offset == 4
        finally:
            await engine.close()


class TestCheckpoint:
    async def test_records_every_partitions_high_watermark(self, tmp_path: Path):
        engine = await open_local(tmp_path)
        try:
            await engine.create_topic("top_a", 2, TopicLogConfig())
            await engine.create_topic("top_b", 1, TopicLogConfig())
            await engine.append("top_a", {0: records(3), 1: records(1)})
            await engine.append("top_b", {0: records(5)})
            await engine.checkpoint()
            points = log_dir.read_checkpoint(tmp_path / files.RECOVERY_POINT_CHECKPOINT)
            assert points == {("top_a", 0): 3, ("top_a", 1): 1, ("top_b", 0): 5}
            assert engine.manager.log("top_b", 0).recovery_point == 5
        finally:
            await engine.close()


class TestCleanShutdown:
    async def test_close_leaves_the_marker_and_a_checkpoint_at_the_log_end_and_start_takes_the_marker(
        self, tmp_path: Path
    ):
        engine = await open_local(tmp_path)
        await engine.create_topic("top_a", 1, TopicLogConfig())
        await engine.append("top_a", {0: records(7)})
        assert not log_dir.was_clean(tmp_path)
        await engine.close()
        assert log_dir.was_clean(tmp_path)
        assert log_dir.read_checkpoint(tmp_path / files.RECOVERY_POINT_CHECKPOINT) == {("top_a", 0): 7}
        engine = await open_local(tmp_path)
        try:
            # Taken once loaded: a crash from now on is recognised as one.
            assert not log_dir.was_clean(tmp_path)
            assert (await engine.partition_info("top_a", 0)).latest_offset == 7
        finally:
            await engine.close()

    async def test_a_closed_engine_takes_no_appends_and_is_not_healthy(self, tmp_path: Path):
        engine = await open_local(tmp_path)
        await engine.create_topic("top_a", 1, TopicLogConfig())
        assert await engine.check() is True
        await engine.close()
        assert await engine.check() is False
        with pytest.raises(LogOffline):
            await engine.append("top_a", {0: records(1)})
        with pytest.raises(LogOffline):
            await engine.create_topic("top_b", 1, TopicLogConfig())


class TestOutOfFiles:
    """A budget higher than the process may open (``EMFILE``): a call that needs a file answers
    ``FilesExhausted`` (503) with nothing of it written, the others are served, health is degraded (not
    down), and the next calls find room on the descriptors of the idle segments closed meanwhile."""

    async def test_calls_needing_a_file_fail_alone_and_the_engine_heals(self, tmp_path: Path):
        engine = await open_local(tmp_path, open_files=100_000)
        try:
            await engine.create_topic("top_f", 40, TopicLogConfig())
            for p in range(20):
                await engine.append("top_f", {p: records(2)})
            assert await engine.health() == "ok"
            with out_of_files() as fillers:
                with pytest.raises(FilesExhausted):
                    await engine.append("top_f", {30: records(1)})
                fill(fillers)  # what closing idle segments freed is taken again
                with pytest.raises(FilesExhausted):
                    await engine.append("top_f", {31: records(1), 19: records(1)})  # atomic: none of it
                assert await engine.append("top_f", {19: records(1)}) == {19: 2}  # open: served
                assert await engine.health() == "degraded"
                assert engine.manager.open_segments.capacity < 20
                assert await engine.append("top_f", {30: records(1)}) == {30: 0}  # room again: healed
            assert (await engine.partition_info("top_f", 31)).latest_offset == 0
            assert [r.value for r in await engine.read("top_f", 19, 0)] == [b"r0", b"r1", b"r0"]
        finally:
            await engine.close()
        engine = await open_local(tmp_path)
        try:
            assert [(await engine.partition_info("top_f", p)).latest_offset for p in (19, 30, 31)] == [
                3,
                1,
                0,
            ]
        finally:
            await engine.close()


class TestDeletionRace:
    async def test_an_append_waiting_for_its_files_meets_the_deletion_as_an_unknown_log(
        self, tmp_path: Path, monkeypatch
    ):
        engine = await open_local(tmp_path)
        try:
            await engine.create_topic("top_d", 1, TopicLogConfig())
            log = engine.manager.log("top_d", 0)
            assert not log.ready  # a new partition holds no file until used
            cache = engine.manager.open_segments
            opening, go_on = threading.Event(), threading.Event()
            load = cache.load

            def slow_load(handle):
                opening.set()
                go_on.wait(5)
                load(handle)

            monkeypatch.setattr(cache, "load", slow_load)
            append = asyncio.create_task(engine.append("top_d", {0: records(1)}))
            await asyncio.to_thread(opening.wait, 5)
            deleting = asyncio.create_task(engine.delete_topic("top_d"))
            await asyncio.sleep(0.05)
            go_on.set()
            await deleting
            with pytest.raises(UnknownLog):
                await append
        finally:
            await engine.close()
