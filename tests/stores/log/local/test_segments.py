"""The segment map of a partition and the engine-wide LRU of open segments (``segments``)."""

from __future__ import annotations

import logging
import threading

import pytest

from app.stores.log.local.segment import SegmentState
from app.stores.log.local.segments import (
    FilesExhausted,
    LogSegments,
    OpenSegments,
    SegmentDeleted,
    SegmentHandle,
)
from app.stores.log.protocol import EngineUnavailable
from tests.fixtures.files import out_of_files


def handle(tmp_path, base: int) -> SegmentHandle:
    return SegmentHandle(tmp_path, base, index_interval_bytes=4096, state=SegmentState(next_offset=base))


class TestLogSegments:
    def test_floor_higher_first_active(self, tmp_path):
        segments = LogSegments([handle(tmp_path, b) for b in (100, 0, 50)])
        assert [h.base_offset for h in segments] == [0, 50, 100]
        assert segments.first.base_offset == 0 and segments.active.base_offset == 100
        assert segments.floor(49).base_offset == 0
        assert segments.floor(50).base_offset == 50
        assert segments.floor(1_000).base_offset == 100
        assert segments.higher(50).base_offset == 100
        assert segments.higher(100) is None
        assert [h.base_offset for h in segments.from_offset(75)] == [50, 100]
        assert segments.next_base(segments.first) == 50

    def test_below_the_first_segment(self, tmp_path):
        segments = LogSegments([handle(tmp_path, 10)])
        assert segments.floor(5) is None
        assert [h.base_offset for h in segments.from_offset(5)] == [10]

    def test_add_must_go_after_the_active_and_remove_keeps_order(self, tmp_path):
        segments = LogSegments([handle(tmp_path, 0)])
        segments.add(handle(tmp_path, 10))
        with pytest.raises(ValueError):
            segments.add(handle(tmp_path, 5))
        snapshot = segments.values()
        segments.remove(segments.first)
        assert [h.base_offset for h in segments] == [10]
        assert [h.base_offset for h in snapshot] == [0, 10]  # snapshots are not changed under readers


class TestOpenSegments:
    def test_capacity_closes_the_least_recently_used(self, tmp_path):
        cache = OpenSegments(capacity=3)
        handles = [handle(tmp_path, b * 10) for b in range(6)]
        for h in handles:
            with cache.use(h):
                pass
        assert len(cache) == 3
        assert [h.is_open for h in handles] == [False, False, False, True, True, True]
        with cache.use(handles[3]):
            pass
        with cache.use(handles[0]):
            pass
        assert [h.is_open for h in handles] == [True, False, False, True, False, True]

    def test_pinned_segments_are_not_closed(self, tmp_path):
        cache = OpenSegments(capacity=1)
        a, b = handle(tmp_path, 0), handle(tmp_path, 10)
        segment = cache.acquire(a)
        with cache.use(b):
            assert a.is_open and b.is_open
        assert segment.read(0, 10) == b""
        cache.release(a)

    def test_reopening_keeps_the_state(self, tmp_path):
        from app.stores.log.local.records import encode_batch
        from app.stores.log.protocol import RecordIn

        cache = OpenSegments(capacity=1)
        a, b = handle(tmp_path, 0), handle(tmp_path, 1000)
        with cache.use(a) as segment:
            segment.append([(0, encode_batch([RecordIn(value=b"x")] * 3, 0))])
        with cache.use(b):
            pass
        assert not a.is_open and a.state.next_offset == 3
        with cache.use(a) as segment:
            assert segment.next_offset == 3 and segment.size == a.size

    def test_discard_closes_when_the_last_user_leaves(self, tmp_path):
        cache = OpenSegments(capacity=4)
        a = handle(tmp_path, 0)
        cache.acquire(a)
        cache.discard(a)
        assert a.is_open
        cache.release(a)
        assert not a.is_open
        with pytest.raises(SegmentDeleted):
            cache.acquire(a)

    def test_threads_share_the_cache(self, tmp_path):
        cache = OpenSegments(capacity=4)
        handles = [handle(tmp_path, b * 10) for b in range(20)]
        errors = []

        def work(k: int) -> None:
            try:
                for i in range(200):
                    with cache.use(handles[(i * 7 + k) % 20]) as segment:
                        segment.read(0, 1)
            except Exception as exc:  # noqa: BLE001  # pragma: no cover
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(cache) <= 4


class TestRolls:
    """How a partition's segment list grows (``PartitionLog`` rolls, seen through ``LogSegments``)."""

    async def test_roll_by_size(self, tmp_path):
        from app.stores.log.protocol import RecordIn, TopicLogConfig
        from tests.stores.log.conftest import open_local

        engine = await open_local(tmp_path, segment_bytes=4096)
        try:
            await engine.create_topic("top_s", 1, TopicLogConfig())
            for _ in range(10):
                await engine.append("top_s", {0: [RecordIn(value=b"x" * 1000, timestamp_ms=1)]})
            segments = engine.manager.log("top_s", 0).segments
            assert [h.base_offset for h in segments] == [0, 3, 6, 9]
            assert all(h.size <= 4096 for h in segments)
        finally:
            await engine.close()

    async def test_roll_by_age_uses_the_wall_clock_not_record_timestamps(self, tmp_path):
        import asyncio

        from app.stores.log.protocol import RecordIn, TopicLogConfig
        from tests.stores.log.conftest import open_local

        engine = await open_local(tmp_path, segment_ms=300)
        try:
            await engine.create_topic("top_a", 1, TopicLogConfig())
            # Records from long ago do not make every batch a segment of its own...
            for _ in range(5):
                await engine.append("top_a", {0: [RecordIn(value=b"old", timestamp_ms=1)]})
            segments = engine.manager.log("top_a", 0).segments
            assert len(segments) == 1
            # ... but a segment older than segment_ms rolls at the next append.
            await asyncio.sleep(0.35)
            await engine.append("top_a", {0: [RecordIn(value=b"new")]})
            assert [h.base_offset for h in segments] == [0, 5]
        finally:
            await engine.close()


class TestOutOfFiles:
    """``EMFILE`` on opening a segment: the call fails alone (or retries, for the engine's own work), the
    cache closes idle segments and lowers its cap, and says why once."""

    def test_a_call_fails_alone_then_finds_room(self, tmp_path, caplog):
        cache = OpenSegments(capacity=100)
        idle = [handle(tmp_path, b) for b in range(8)]
        for h in idle:
            cache.load(h)
        cold = handle(tmp_path, 100)
        with out_of_files(), caplog.at_level(logging.ERROR, logger="queuecore.log"):
            with pytest.raises(FilesExhausted) as failed:
                cache.acquire(cold, retry=False)
            assert isinstance(failed.value, EngineUnavailable)  # 503 for that call
            assert not cold.is_open and cache.exhaustions == 1 and cache.exhausted_within(5)
            assert cache.capacity == 6 and sum(h.is_open for h in idle) == 6  # the two oldest closed
            with cache.use(cold):  # their descriptors are free now
                pass
        (report,) = [r for r in caplog.records if "could not open" in r.getMessage()]
        assert "EMFILE" in report.getMessage() and "RLIMIT_NOFILE" in report.getMessage()
        assert "QUEUECORE_LOG__OPEN_FILES" in report.getMessage()

    def test_the_engines_own_work_retries_on_what_was_freed(self, tmp_path):
        cache = OpenSegments(capacity=100)
        for b in range(8):
            cache.load(handle(tmp_path, b))
        cold = handle(tmp_path, 100)
        with out_of_files(), cache.use(cold) as segment:  # retry=True: a write, a roll, recovery
            assert segment.size == 0
        assert cache.exhaustions == 1

    def test_nothing_idle_to_close_fails_even_with_a_retry(self, tmp_path):
        cache = OpenSegments(capacity=100)
        pinned = handle(tmp_path, 0)
        cache.acquire(pinned)
        with out_of_files(), pytest.raises(FilesExhausted):
            cache.acquire(handle(tmp_path, 100))
        assert pinned.is_open  # in use: never closed under its user
        cache.release(pinned)

    def test_a_burst_is_reported_once(self, tmp_path, caplog):
        cache = OpenSegments(capacity=100)
        with out_of_files(), caplog.at_level(logging.ERROR, logger="queuecore.log"):
            for b in range(5):
                with pytest.raises(FilesExhausted):
                    cache.acquire(handle(tmp_path, b), retry=False)
        assert cache.exhaustions == 5
        assert len([r for r in caplog.records if "could not open" in r.getMessage()]) == 1
