"""Usage metering (``app.broker.usage``): events buffered in memory, appended in batches to ``__usage``.

Over a real local log engine (each test its own directory, so the usage topic is the test's alone):

* ``record`` stamps an event with ``at`` (unless it has one) and the record's timestamp is that ``at``;
  ``flush`` writes everything buffered, in order, and says how many; ``read_usage`` reads them back from
  any offset, across pages.
* The background flusher writes every ``flush_interval``, and at once when ``max_batch`` are waiting.
* A refused write keeps its events, ahead of newer ones, for the next flush; past ``max_buffer`` the
  oldest are dropped and counted; a disabled meter records nothing.
* An engine down at ``start`` is not fatal: the usage topic is created by the first flush after.
* ``close`` writes what is left, and does not raise when it cannot.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.broker import usage
from app.broker.usage import USAGE_RETENTION_MS, USAGE_TOPIC_ID, UsageMeter, read_usage
from app.stores.log.local import LocalLogEngine
from app.stores.log.protocol import EngineUnavailable, TopicLogConfig, UnknownLog
from tests.stores.log.conftest import LOCAL_CONFIG, open_local

HANG_GUARD = 20.0  # how long a test waits for the flusher before it fails (not a speed requirement)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[LocalLogEngine]:
    engine = await open_local(tmp_path / "log")
    yield engine
    await engine.close()


@pytest.fixture
async def meters() -> AsyncIterator[list[UsageMeter]]:
    """Meters a test started; closed at the end if the test did not."""
    started: list[UsageMeter] = []
    yield started
    for meter in started:
        await meter.close()


async def events(engine: LocalLogEngine, from_offset: int = 0, batch: int = 1000) -> list[dict[str, Any]]:
    return [e async for e in read_usage(engine, from_offset, batch)]


async def until_written(engine: LocalLogEngine, count: int) -> list[dict[str, Any]]:
    """The usage events once at least ``count`` are in the log."""
    async with asyncio.timeout(HANG_GUARD):
        while True:
            try:
                found = await events(engine)
            except UnknownLog:
                found = []
            if len(found) >= count:
                return found
            await asyncio.sleep(0.02)


class TestRecordAndFlush:
    async def test_flush_writes_every_buffered_event_in_order_and_says_how_many(self, engine) -> None:
        meter = UsageMeter(engine)
        await meter.start()
        try:
            for i in range(5):
                meter.record({"requestId": f"req_{i}", "status": 201, "at": 1_000 + i})
            assert await meter.flush() == 5
            assert await meter.flush() == 0  # nothing twice
        finally:
            await meter.close()
        assert [e["requestId"] for e in await events(engine)] == [f"req_{i}" for i in range(5)]

    async def test_an_event_is_stamped_with_at_and_stored_at_that_time(self, engine) -> None:
        meter = UsageMeter(engine)
        await meter.start()
        try:
            before = usage.now_ms()
            meter.record({"requestId": "stamped"})
            meter.record({"requestId": "given", "at": 1_234_567})
            await meter.flush()
        finally:
            await meter.close()
        stamped, given = await events(engine)
        assert stamped["at"] >= before and given["at"] == 1_234_567
        stored = await engine.read(USAGE_TOPIC_ID, 0, 0)
        assert [r.timestamp_ms for r in stored] == [stamped["at"], 1_234_567]

    async def test_start_creates_the_usage_topic_with_seven_days_retention(self, engine, tmp_path) -> None:
        meter = UsageMeter(engine)
        await meter.start()
        await meter.close()
        assert USAGE_TOPIC_ID in await engine.topic_ids()
        assert (await engine.partition_info(USAGE_TOPIC_ID, 0)).latest_offset == 0
        assert USAGE_RETENTION_MS == 7 * 86_400_000
        metadata = (tmp_path / "log" / f"{USAGE_TOPIC_ID}-0" / "partition.metadata").read_text()
        assert str(USAGE_RETENTION_MS) in metadata

    async def test_more_events_than_one_batch_are_all_written_in_order(self, engine) -> None:
        meter = UsageMeter(engine, max_batch=3, flush_interval=3600)
        await meter.start()
        try:
            for i in range(10):
                meter.record({"n": i, "at": 5_000})
            # The full batches woke the flusher too: between it and this call, all ten are written.
            await meter.flush()
            assert [e["n"] for e in await until_written(engine, 10)] == list(range(10))
        finally:
            await meter.close()

    async def test_read_usage_reads_from_an_offset_across_pages(self, engine) -> None:
        meter = UsageMeter(engine)
        await meter.start()
        try:
            for i in range(25):
                meter.record({"n": i})
            await meter.flush()
        finally:
            await meter.close()
        assert [e["n"] for e in await events(engine, batch=4)] == list(range(25))
        assert [e["n"] for e in await events(engine, from_offset=20, batch=3)] == [20, 21, 22, 23, 24]
        assert await events(engine, from_offset=25) == []

    async def test_a_disabled_meter_records_nothing(self, engine) -> None:
        meter = UsageMeter(engine, enabled=False)
        await meter.start()
        try:
            meter.record({"requestId": "ignored"})
            assert await meter.flush() == 0
        finally:
            await meter.close()
        assert await events(engine) == []


class TestBackgroundFlush:
    async def test_events_are_written_every_flush_interval_without_a_call(self, engine, meters) -> None:
        meter = UsageMeter(engine, flush_interval=0.05)
        await meter.start()
        meters.append(meter)
        meter.record({"requestId": "first"})
        assert [e["requestId"] for e in await until_written(engine, 1)] == ["first"]
        meter.record({"requestId": "second"})
        assert [e["requestId"] for e in await until_written(engine, 2)] == ["first", "second"]

    async def test_a_full_batch_wakes_the_flusher_before_its_interval(self, engine, meters) -> None:
        meter = UsageMeter(engine, flush_interval=3600, max_batch=4)
        await meter.start()
        meters.append(meter)
        for i in range(3):
            meter.record({"n": i})
        await asyncio.sleep(0.2)
        assert await events(engine) == []  # three of four: it waits for the interval
        meter.record({"n": 3})
        assert [e["n"] for e in await until_written(engine, 4)] == [0, 1, 2, 3]


class TestFailures:
    async def test_a_refused_write_keeps_its_events_ahead_of_newer_ones(self, engine) -> None:
        meter = UsageMeter(engine)
        await meter.start()
        try:
            meter.record({"n": 0})
            meter.record({"n": 1})
            await engine.delete_topic(USAGE_TOPIC_ID)  # the engine refuses the append (UnknownLog)
            with pytest.raises(UnknownLog):
                await meter.flush()
            meter.record({"n": 2})
            await engine.create_topic(USAGE_TOPIC_ID, 1, TopicLogConfig(retention_ms=USAGE_RETENTION_MS))
            assert await meter.flush() == 3
        finally:
            await meter.close()
        assert [e["n"] for e in await events(engine)] == [0, 1, 2]

    async def test_past_max_buffer_the_oldest_events_are_dropped_and_counted(self, engine) -> None:
        meter = UsageMeter(engine, max_buffer=5)
        await meter.start()
        try:
            for i in range(8):
                meter.record({"n": i})
            assert meter.dropped == 3
            meter.record({"n": 8})
            assert meter.dropped == 4
            await meter.flush()
        finally:
            await meter.close()
        assert [e["n"] for e in await events(engine)] == [4, 5, 6, 7, 8]

    async def test_an_engine_down_at_start_gets_its_usage_topic_at_the_first_flush(
        self, tmp_path, caplog
    ) -> None:
        engine = LocalLogEngine(tmp_path / "log", LOCAL_CONFIG)  # not started: refuses everything
        meter = UsageMeter(engine, flush_interval=3600)
        with caplog.at_level(logging.WARNING, "queuecore.usage"):
            await meter.start()
        assert "usage log not created at start" in caplog.text
        try:
            meter.record({"requestId": "while down"})
            with pytest.raises(EngineUnavailable):
                await meter.flush()
            await engine.start()
            meter.record({"requestId": "once up"})
            assert await meter.flush() == 2
            assert [e["requestId"] for e in await events(engine)] == ["while down", "once up"]
        finally:
            await meter.close()
            await engine.close()

    async def test_close_writes_what_is_left(self, engine) -> None:
        meter = UsageMeter(engine, flush_interval=3600)
        await meter.start()
        meter.record({"requestId": "last"})
        await meter.close()
        assert [e["requestId"] for e in await events(engine)] == ["last"]

    async def test_close_does_not_raise_when_the_engine_refuses_and_says_how_many_were_lost(
        self, engine, caplog
    ) -> None:
        meter = UsageMeter(engine, flush_interval=3600)
        await meter.start()
        meter.record({"n": 1})
        meter.record({"n": 2})
        await engine.delete_topic(USAGE_TOPIC_ID)
        with caplog.at_level(logging.WARNING, "queuecore.usage"):
            await meter.close()
        assert "could not write 2 usage events at shutdown" in caplog.text
