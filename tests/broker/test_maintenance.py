"""``LogMaintenance``: retention applied in the background, on both log engines, with a clock that runs
ahead (records age without waiting)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.broker.maintenance import LogMaintenance
from app.kit.clock import now_ms
from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine
from app.stores.log.local import LocalLogConfig, LocalLogEngine
from app.stores.log.protocol import LogEngine, RecordIn, TopicLogConfig

HOUR_MS = 3_600_000


@pytest.fixture(params=["local", "jetstream"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LogEngine]:
    log: LogEngine
    if request.param == "jetstream":
        cluster = request.getfixturevalue("nats_cluster")
        log = JetStreamLogEngine(JetStreamConfig(servers=cluster.url.split(","), default_replicas=1))
    else:
        # Small segments: the local engine cuts whole segments, so the records must fill several.
        log = LocalLogEngine(tmp_path / "log", LocalLogConfig(segment_bytes=1024, index_interval_bytes=256))
    await log.start()
    yield log
    await log.close()


async def wait_until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "not within the time allowed"
        await asyncio.sleep(0.02)


async def test_retention_is_applied_in_the_background_until_closed(engine: LogEngine) -> None:
    topic = f"top_{secrets.token_hex(6)}"
    await engine.create_topic(topic, 1, TopicLogConfig(retention_ms=HOUR_MS))
    try:
        written = now_ms()
        for _ in range(5):
            await engine.append(topic, {0: [RecordIn(b'"' + b"x" * 200 + b'"', timestamp_ms=written)] * 10})
        before = await engine.partition_info(topic, 0)
        assert before.earliest_offset == 0 and before.latest_offset == 50
        # Two hours on, every record is past the topic's hour (nothing waits for them to age).
        maintenance = LogMaintenance(
            engine, interval=0.05, clock=lambda: now_ms() + 2 * HOUR_MS, duty=f"retention-{topic}"
        )
        maintenance.start()
        try:
            # The local engine keeps the active segment; JetStream purges up to the first record kept.
            async def cut() -> bool:
                return (await engine.partition_info(topic, 0)).earliest_offset >= 40

            await wait_until(cut)
            assert (await engine.partition_info(topic, 0)).latest_offset == 50
        finally:
            await maintenance.close()
        passes = maintenance.passes
        await asyncio.sleep(0.2)
        assert maintenance.passes == passes, "a pass ran after close"
    finally:
        await engine.delete_topic(topic)


async def test_records_within_retention_are_kept(engine: LogEngine) -> None:
    topic = f"top_{secrets.token_hex(6)}"
    await engine.create_topic(topic, 1, TopicLogConfig(retention_ms=HOUR_MS))
    try:
        for _ in range(5):
            await engine.append(topic, {0: [RecordIn(b'"' + b"y" * 200 + b'"', timestamp_ms=now_ms())] * 10})
        maintenance = LogMaintenance(engine, interval=60, clock=lambda: now_ms() + HOUR_MS // 2)
        assert await maintenance.run_once() == 0
        assert (await engine.partition_info(topic, 0)).earliest_offset == 0
    finally:
        await engine.delete_topic(topic)


@pytest.fixture
async def second_process(engine: LogEngine, request: pytest.FixtureRequest) -> AsyncIterator[LogEngine]:
    """The same log as another API process sees it: a second JetStream engine on the cluster; the local
    engine has one process only, so it is the same engine."""
    if engine.exclusive:
        yield engine
        return
    cluster = request.getfixturevalue("nats_cluster")
    other = JetStreamLogEngine(JetStreamConfig(servers=cluster.url.split(","), default_replicas=1))
    await other.start()
    yield other
    await other.close()


async def test_one_process_at_a_time_does_the_pass(engine: LogEngine, second_process: LogEngine) -> None:
    duty = f"retention-{secrets.token_hex(4)}"
    at = now_ms()
    clock = {"a": at, "b": at}
    a = LogMaintenance(engine, interval=1.0, clock=lambda: clock["a"], holder="a", duty=duty)
    b = LogMaintenance(second_process, interval=1.0, clock=lambda: clock["b"], holder="b", duty=duty)
    shared = not engine.exclusive
    assert await a.run_if_turn() is not None
    if not shared:  # one process: it does every duty, whoever asks
        assert await b.run_if_turn() is not None
        return
    assert await b.run_if_turn() is None  # a's turn runs for 3 intervals
    clock["a"] += 2_000
    assert await a.run_if_turn() is not None  # renewed: now until at + 5 s
    clock["b"] += 4_000
    assert await b.run_if_turn() is None
    clock["b"] += 1_001  # past a's renewed turn, which a let run out
    assert await b.run_if_turn() is not None
    clock["a"] = clock["b"]  # a comes back (it was paused, say): b's turn runs now
    assert await a.run_if_turn() is None
    assert (a.passes, b.passes) == (2, 1)


async def test_a_turn_set_by_a_clock_far_ahead_does_not_hold(
    engine: LogEngine, second_process: LogEngine
) -> None:
    duty = f"retention-{secrets.token_hex(4)}"
    ahead = LogMaintenance(engine, interval=1.0, clock=lambda: now_ms() + HOUR_MS, holder="ahead", duty=duty)
    honest = LogMaintenance(second_process, interval=1.0, holder="honest", duty=duty)
    assert await ahead.run_if_turn() is not None
    assert await honest.run_if_turn() is not None


def test_the_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        LogMaintenance(LocalLogEngine(tmp_path), interval=0)


async def test_close_ends_the_loop_even_when_a_pass_loses_its_cancellation(engine: LogEngine) -> None:
    # Python 3.11's wait_for can drop a cancellation that meets its call's completion (gh-86296): here a
    # pass drops the first outright. The loop is cancelled again and ends; no pass runs after close.
    maintenance = LogMaintenance(engine, interval=0.01, duty=f"retention-{secrets.token_hex(4)}")
    real = maintenance.run_if_turn
    cancelled = asyncio.Event()

    async def pass_that_loses_its_cancellation() -> int | None:
        try:
            await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            if cancelled.is_set():
                raise
            cancelled.set()  # the first is lost, as wait_for loses one
        return await real()

    maintenance.run_if_turn = pass_that_loses_its_cancellation  # type: ignore[method-assign]
    maintenance.start()
    await asyncio.sleep(0.05)
    await asyncio.wait_for(maintenance.close(), 5)
    assert cancelled.is_set()
    passes = maintenance.passes
    await asyncio.sleep(0.1)
    assert maintenance.passes == passes
