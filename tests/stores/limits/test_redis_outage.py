"""A Redis outage degrades limits to per-process counting, is logged once, and heals by itself.

Each test runs its own throwaway ``redis-server`` on a free port and really kills, stops or starts it:
no mocks. Probes run every second (the default), so a test spends a second or two waiting to heal;
it waits by a bounded number of looks, never asserting how long healing took.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from app.stores.limits.redis import RedisRateLimiter
from tests.fixtures.redis import RedisServer
from tests.fixtures.server import free_port

OUTAGE = "redis unreachable"
RECOVERY = "redis reachable again"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A port of our own and a server not yet started on it."""
    server = RedisServer(free_port(), tmp_path)
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def limits_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="queuecore.limits")
    return caplog


def messages(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "queuecore.limits" and text in r.getMessage()]


async def wait_for_status(limiter: RedisRateLimiter, status: str, tries: int = 100) -> None:
    """Ask ``status()`` until it answers ``status``, at most ``tries`` times 50 ms apart (probes run every
    second: five of them). A bounded number of looks, not a clock: how soon is the benchmarks' business."""
    current = None
    for _ in range(tries):
        if (current := await limiter.status()) == status:
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"status still {current!r} after {tries} looks")


async def zcard(url: str, key: str) -> int:
    client = Redis.from_url(url)
    try:
        return int(await client.zcard(key))
    finally:
        await client.aclose()


async def connections_received(url: str) -> int:
    client = Redis.from_url(url)
    try:
        return int((await client.info("stats"))["total_connections_received"])
    finally:
        await client.aclose()


class TestRedisKilled:
    async def test_falls_back_logs_once_and_heals_when_redis_returns(self, redis_server, limits_log):
        redis_server.start()
        limiter = RedisRateLimiter(redis_server.url, key_prefix="qc:outage:")
        try:
            assert await limiter.status() == "ok"
            first = await limiter.acquire("before", 3)
            assert first.allowed and first.at_us is not None
            assert await zcard(redis_server.url, "qc:outage:before") == 1

            redis_server.kill()
            # Decisions keep coming, per process, for longer than a probe interval; the limit still holds.
            # (At least 60 of them, however slow the machine: how many a second is not a test's business.)
            decisions = []
            end = time.monotonic() + 1.5
            while time.monotonic() < end or len(decisions) < 60:
                decisions.append(await limiter.acquire("during", 5, 5000))
                assert await limiter.status() == "degraded"
                await asyncio.sleep(0.01)
            assert sum(d.allowed for d in decisions) == 5
            assert all(d.at_us is None for d in decisions)
            assert len(messages(limits_log, OUTAGE)) == 1
            assert messages(limits_log, OUTAGE)[0].levelno == logging.WARNING

            redis_server.start()  # same port, empty, no scripts loaded
            await wait_for_status(limiter, "ok")
            after = await limiter.acquire("after", 3)
            assert after.allowed and after.at_us is not None
            assert await zcard(redis_server.url, "qc:outage:after") == 1
            assert len(messages(limits_log, RECOVERY)) == 1
            assert len(messages(limits_log, OUTAGE)) == 1
        finally:
            await limiter.close()

    async def test_redis_down_at_startup_heals_when_it_comes_up(self, redis_server, limits_log):
        limiter = RedisRateLimiter(redis_server.url, key_prefix="qc:outage:")
        try:
            decision = await limiter.acquire("early", 2)
            assert decision.allowed and decision.at_us is None  # answered in-process
            assert await limiter.status() == "degraded"
            redis_server.start()
            await wait_for_status(limiter, "ok")
            assert (await limiter.acquire("early", 2)).at_us is not None
            assert len(messages(limits_log, OUTAGE)) == 1
            assert len(messages(limits_log, RECOVERY)) == 1
        finally:
            await limiter.close()


def count_redis_decisions(limiter: RedisRateLimiter, bucket: str):
    """Count the decisions of ``bucket`` that went to Redis from now on (one Redis call per decision;
    the healing probe's own bucket is not counted)."""
    calls = 0
    decide = limiter._decide

    async def counted(key, *args, **kwargs):
        nonlocal calls
        calls += key == limiter.key_prefix + bucket
        return await decide(key, *args, **kwargs)

    limiter._decide = counted  # type: ignore[method-assign]
    return lambda: calls


class TestRedisHung:
    async def test_a_hung_redis_costs_one_timeout_then_nothing(self, redis_server, limits_log):
        """SIGSTOP: connections hang instead of failing. One call waits out the socket timeout; every
        decision after that is answered in-process at once, while one probe a second checks Redis."""
        redis_server.start()
        limiter = RedisRateLimiter(redis_server.url, key_prefix="qc:outage:", socket_timeout=0.25)
        try:
            assert (await limiter.acquire("hung", 100)).at_us is not None
            connections_before = await connections_received(redis_server.url)
            redis_server.pause()
            asked = count_redis_decisions(limiter, "hung")
            first = await limiter.acquire("hung", 100)
            assert first.at_us is None and asked() == 1  # it tried Redis, timed out, fell back
            end = time.monotonic() + 1.5  # spans at least one probe that times out
            while time.monotonic() < end:
                assert (await limiter.acquire("hung", 100)).at_us is None
                await asyncio.sleep(0.005)
            assert asked() == 1  # every decision since was answered in-process, none waited on Redis
            assert len(messages(limits_log, OUTAGE)) == 1
            redis_server.resume()
            await wait_for_status(limiter, "ok")
            assert (await limiter.acquire("hung", 100)).at_us is not None
            assert len(messages(limits_log, RECOVERY)) == 1
            # Hundreds of decisions while hung, yet Redis saw only the probes' connections (about one a
            # second, each timed out and dropped), the healing probe's, and our own two INFO clients.
            assert await connections_received(redis_server.url) - connections_before <= 6
        finally:
            await limiter.close()

    async def test_concurrent_callers_during_an_outage_do_not_queue_behind_redis(self, redis_server):
        redis_server.start()
        limiter = RedisRateLimiter(redis_server.url, key_prefix="qc:outage:", max_connections=4)
        try:
            await limiter.acquire("crowd", 10_000)
            redis_server.pause()
            asked = count_redis_decisions(limiter, "crowd")
            decisions = await asyncio.gather(*(limiter.acquire("crowd", 10_000) for _ in range(200)))
            # At most one round of socket timeouts (the 4 slots' calls), not 200 / 4 rounds: the callers
            # queued for a slot saw the outage when they got one and answered in-process.
            assert asked() <= 4
            assert all(d.allowed for d in decisions)
            assert await limiter.status() == "degraded"
        finally:
            redis_server.resume()
            await limiter.close()


class TestScriptCache:
    async def test_a_flushed_script_cache_is_reloaded_without_degrading(self, redis_server, limits_log):
        redis_server.start()
        limiter = RedisRateLimiter(redis_server.url, key_prefix="qc:outage:")
        client = Redis.from_url(redis_server.url)
        try:
            assert (await limiter.acquire("s", 5)).at_us is not None
            await client.script_flush()
            decision = await limiter.acquire("s", 5)
            assert (decision.allowed, decision.remaining) == (True, 3)
            assert decision.at_us is not None
            assert await limiter.status() == "ok"
            assert messages(limits_log, OUTAGE) == []
        finally:
            await client.aclose()
            await limiter.close()
