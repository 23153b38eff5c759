"""The log engine contract in time (``app/stores/log/protocol.py``), on every backend: offsets by timestamp,
waiting for and watching new records, retention."""

from __future__ import annotations

import asyncio

import pytest

from app.kit.clock import now_ms
from app.stores.log.protocol import (
    LogEngineError,
    RecordIn,
    TopicLogConfig,
    UnknownLog,
)
from tests.stores.log.scenarios import batch, every_engine, read_all

# A wait that only a record can end, and how long a test may take before it fails instead of hanging.
_FOREVER = 3600.0
_HANG_GUARD = 60.0


@every_engine
class TestOffsetForTime:
    async def test_first_offset_at_or_after_a_time(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        base = 1_700_000_000_000
        for i in range(30):
            await engine.append(
                topic, {0: [RecordIn(value=b"v" * 50, timestamp_ms=base + 10 * i + j) for j in range(3)]}
            )
        assert await engine.offset_for_time(topic, 0, 0) == 0
        assert await engine.offset_for_time(topic, 0, base) == 0
        assert await engine.offset_for_time(topic, 0, base + 1) == 1
        assert await engine.offset_for_time(topic, 0, base + 3) == 3
        assert await engine.offset_for_time(topic, 0, base + 10 * 17 + 2) == 17 * 3 + 2
        assert await engine.offset_for_time(topic, 0, base + 10 * 29 + 2) == 89
        # Past the last record: the latest offset.
        assert await engine.offset_for_time(topic, 0, base + 10_000) == 90

    async def test_empty_partition(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        assert await engine.offset_for_time(topic, 0, 123) == 0


@every_engine
class TestWaitFor:
    async def test_returns_at_once_when_committed(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        await engine.append(topic, {0: batch("a", 1)})
        assert await engine.wait_for(topic, 0, 0, 5.0) is True

    async def test_times_out(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        assert await engine.wait_for(topic, 0, 0, 0.1) is False
        # False told the truth: record 0 does not exist. (That a waiter waits out its timeout rather than
        # answering at once: a waiter still waiting when the record arrives answers True, below.)
        assert (await engine.partition_info(topic, 0)).latest_offset == 0
        await engine.append(topic, {0: batch("a", 1)})
        assert await engine.wait_for(topic, 0, 0, 0.1) is True

    async def test_waiters_wake_when_data_commits(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        # Timeouts no test outlives: a waiter that answers True was woken by its record, never by its
        # timeout, and one still pending has not given up early.
        waiters = [asyncio.create_task(engine.wait_for(topic, 0, 0, _FOREVER)) for _ in range(5)]
        later = asyncio.create_task(engine.wait_for(topic, 0, 3, _FOREVER))
        other = asyncio.create_task(engine.wait_for(topic, 1, 0, _FOREVER))
        everyone = [*waiters, later, other]
        try:
            async with asyncio.timeout(_HANG_GUARD):
                await asyncio.sleep(0.05)
                assert not any(w.done() for w in everyone)
                await engine.append(topic, {0: batch("a", 2)})
                assert await asyncio.gather(*waiters) == [True] * 5
                # Offsets 0 and 1 committed: the waiter for offset 3 and the other partition's wait on.
                assert not later.done() and not other.done()
                await engine.append(topic, {1: batch("b", 1)})
                assert await other is True
                assert not later.done()
                await engine.append(topic, {0: batch("c", 2)})
                assert await later is True
        finally:
            for waiter in everyone:
                waiter.cancel()


@every_engine
class TestWatch:
    async def test_wakes_once_when_the_offset_commits(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        woken: list[str] = []
        engine.watch(topic, 0, 0, lambda: woken.append("first"))
        engine.watch(topic, 0, 2, lambda: woken.append("third"))
        engine.watch(topic, 1, 0, lambda: woken.append("other partition"))
        await asyncio.sleep(0.02)
        assert woken == []
        await engine.append(topic, {0: batch("a", 1)})
        assert woken == ["first"]  # by the time the append is answered
        await engine.append(topic, {0: batch("b", 1)})
        assert woken == ["first"]
        await engine.append(topic, {0: batch("c", 1)})
        assert woken == ["first", "third"]
        await engine.append(topic, {0: batch("d", 3)})
        assert woken == ["first", "third"]  # once each

    async def test_wakes_at_once_when_committed_already(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        await engine.append(topic, {0: batch("a", 2)})
        woken: list[int] = []
        engine.watch(topic, 0, 1, lambda: woken.append(1))
        assert woken == [1]
        engine.watch(topic, 0, 2, lambda: woken.append(2))
        assert woken == [1]

    async def test_a_cancelled_watch_is_not_called(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        woken: list[str] = []
        cancel = engine.watch(topic, 0, 0, lambda: woken.append("cancelled"))
        engine.watch(topic, 0, 0, lambda: woken.append("kept"))
        cancel()
        cancel()  # twice is harmless
        await engine.append(topic, {0: batch("a", 1)})
        assert woken == ["kept"]

    async def test_a_deleted_topic_wakes_its_watchers(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        woken: list[int] = []
        engine.watch(topic, 0, 0, lambda: woken.append(0))
        await engine.delete_topic(topic)
        assert woken == [0]  # the waiter looks again and meets the unknown topic

    async def test_unknown_topic_and_negative_offset_are_refused(self, engine, topic_id):
        with pytest.raises(UnknownLog):
            engine.watch(topic_id(), 0, 0, lambda: None)
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        with pytest.raises(LogEngineError):
            engine.watch(topic, 0, -1, lambda: None)


@every_engine
class TestRetention:
    async def test_expired_data_goes_and_earliest_moves(self, engine, topic_id):
        topic = topic_id()
        now = now_ms()
        await engine.create_topic(topic, 1, TopicLogConfig(retention_ms=60_000))
        old = now - 3_600_000
        for _i in range(20):
            await engine.append(topic, {0: [RecordIn(value=b"o" * 1000, timestamp_ms=old) for _ in range(4)]})
        for _i in range(5):
            await engine.append(topic, {0: [RecordIn(value=b"n" * 1000, timestamp_ms=now) for _ in range(4)]})
        deleted = await engine.enforce_retention(now)
        assert deleted >= 1
        info = await engine.partition_info(topic, 0)
        assert 0 < info.earliest_offset <= 80
        assert info.latest_offset == 100
        # Unexpired data is all still there.
        records = await read_all(engine, topic, 0, 0)
        assert records[0].offset == info.earliest_offset
        assert [r.offset for r in records][-20:] == list(range(80, 100))

    async def test_all_expired_keeps_latest_offset(self, engine, topic_id):
        topic = topic_id()
        now = now_ms()
        await engine.create_topic(topic, 1, TopicLogConfig(retention_ms=1000))
        for _i in range(10):
            await engine.append(
                topic, {0: [RecordIn(value=b"o" * 1000, timestamp_ms=now - 10_000) for _ in range(4)]}
            )
        await engine.enforce_retention(now)
        info = await engine.partition_info(topic, 0)
        assert info.earliest_offset == info.latest_offset == 40
        assert await engine.read(topic, 0, 0) == []
        assert await engine.append(topic, {0: batch("a", 1)}) == {0: 40}
        assert [r.offset for r in await engine.read(topic, 0, 0)] == [40]

    async def test_retention_bytes(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig(retention_bytes=40_000))
        for _i in range(50):
            await engine.append(topic, {0: [RecordIn(value=b"s" * 1000) for _ in range(4)]})
        await engine.enforce_retention(now_ms())
        info = await engine.partition_info(topic, 0)
        assert info.earliest_offset > 0 and info.latest_offset == 200
        assert 40_000 - 20_000 <= info.size_bytes <= 40_000 + 20_000

    async def test_update_config_takes_effect(self, engine, topic_id):
        topic = topic_id()
        now = now_ms()
        await engine.create_topic(topic, 1, TopicLogConfig())
        for _i in range(10):
            await engine.append(
                topic, {0: [RecordIn(value=b"o" * 1000, timestamp_ms=now - 10_000) for _ in range(4)]}
            )
        await engine.enforce_retention(now)
        assert (await engine.partition_info(topic, 0)).earliest_offset == 0
        await engine.update_config(topic, TopicLogConfig(retention_ms=1000))
        await engine.enforce_retention(now)
        assert (await engine.partition_info(topic, 0)).earliest_offset == 40
