"""Retention: whole segments go, oldest first; the active one only after a roll (``retention``)."""

from __future__ import annotations

from app.kit.clock import now_ms
from app.stores.log.local.retention import (
    delete_old_segments,
    retention_ms_breached,
    retention_size_breached,
    start_offset_breached,
)
from app.stores.log.local.segment import SegmentState
from app.stores.log.protocol import RecordIn, TopicLogConfig
from tests.stores.log.conftest import open_local


def state(size: int = 0, max_ts: int = -1) -> SegmentState:
    return SegmentState(size=size, max_timestamp=max_ts)


async def fill(engine, topic: str, appends: int, ts: int, per: int = 4) -> None:
    for _ in range(appends):
        await engine.append(topic, {0: [RecordIn(value=b"r" * 1000, timestamp_ms=ts) for _ in range(per)]})


def segment_files(root, topic: str) -> list[str]:
    return sorted(p.name for p in (root / f"{topic}-0").glob("*.log"))


class TestPredicates:
    def test_time(self):
        breached = retention_ms_breached(now_ms=10_000, retention_ms=1_000)
        assert breached(None, state(max_ts=8_999), 0)
        assert not breached(None, state(max_ts=9_000), 0)

    def test_size_counts_down_as_segments_go(self):
        breached = retention_size_breached(total_bytes=1000, retention_bytes=450)
        assert [breached(None, state(size=200), 0) for _ in range(4)] == [True, True, False, False]

    def test_start_offset(self):
        breached = start_offset_breached(100)
        assert breached(None, state(), 100) and not breached(None, state(), 101)


class TestEnforce:
    async def test_old_segments_are_deleted_from_disk(self, tmp_path):
        engine = await open_local(tmp_path)
        try:
            now = now_ms()
            await engine.create_topic("top_t", 1, TopicLogConfig(retention_ms=60_000))
            await fill(engine, "top_t", 12, ts=now - 120_000)
            await fill(engine, "top_t", 6, ts=now)
            before = segment_files(tmp_path, "top_t")
            deleted = await engine.enforce_retention(now)
            after = segment_files(tmp_path, "top_t")
            assert deleted == len(before) - len(after) > 0
            assert after == before[deleted:]
            assert not list((tmp_path / "top_t-0").glob("*.deleted"))
            info = await engine.partition_info("top_t", 0)
            assert info.earliest_offset == int(after[0][:20])
            records = await engine.read("top_t", 0, 0, max_records=1000)
            assert all(r.timestamp_ms == now for r in records[-24:]) and records[-1].offset == 71
            assert await engine.enforce_retention(now) == 0
        finally:
            await engine.close()

    async def test_the_active_segment_is_rolled_before_it_goes(self, tmp_path):
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        try:
            now = now_ms()
            await engine.create_topic("top_a", 1, TopicLogConfig(retention_ms=1_000))
            await fill(engine, "top_a", 3, ts=now - 5_000)
            assert len(segment_files(tmp_path, "top_a")) == 1
            assert await engine.enforce_retention(now) == 1
            assert segment_files(tmp_path, "top_a") == [f"{12:020d}.log"]
            info = await engine.partition_info("top_a", 0)
            assert (info.earliest_offset, info.latest_offset, info.size_bytes) == (12, 12, 0)
        finally:
            await engine.close()

    async def test_nothing_at_or_above_the_high_watermark_goes(self, tmp_path):
        engine = await open_local(tmp_path)
        try:
            await engine.create_topic("top_h", 1, TopicLogConfig())
            await fill(engine, "top_h", 12, ts=1)
            log = engine.manager.log("top_h", 0)
            assert delete_old_segments(log, lambda *_: True, high_watermark=0, reason="test") == 0
            count = len(log.segments)
            assert (
                delete_old_segments(log, lambda *_: True, high_watermark=log.high_watermark, reason="test")
                == count - 1
            )
            assert len(log.segments) == 1
        finally:
            await engine.close()

    async def test_a_retained_partition_reopens(self, tmp_path):
        engine = await open_local(tmp_path)
        now = now_ms()
        await engine.create_topic("top_o", 1, TopicLogConfig(retention_ms=60_000))
        await fill(engine, "top_o", 12, ts=now - 120_000)
        await fill(engine, "top_o", 3, ts=now)
        await engine.enforce_retention(now)
        info = await engine.partition_info("top_o", 0)
        await engine.close()
        engine = await open_local(tmp_path)
        try:
            assert await engine.partition_info("top_o", 0) == info
        finally:
            await engine.close()
