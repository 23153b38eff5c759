"""A slow Redis (it answers, late) costs a decision at most the limiter's timeout, then degrades to
per-process counting like an outage, and heals by itself once Redis is fast again.

Each test runs its own ``redis-server`` on a free port behind a real TCP proxy that holds every chunk
(tests/system/faults/latency_proxy.py): real sockets, no mocks. The bounds asserted are the timeout plus a
"What a slow Redis costs" is asserted as behaviour, never as a time (speed is bench/'s): the limiter
counts as degraded and decides in the process, and while it does, no request reaches Redis (the proxy
counts what it forwards).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from app.stores.limits.redis import RedisRateLimiter
from app.stores.limits.tokens import RedisTokenBuckets
from tests.fixtures.redis import RedisServer
from tests.fixtures.server import free_port
from tests.stores.limits.test_redis_outage import wait_for_status, zcard
from tests.system.faults.latency_proxy import LatencyProxy

TIMEOUT = 0.25


@pytest.fixture
async def proxy(tmp_path: Path) -> AsyncIterator[LatencyProxy]:
    """A redis-server of our own behind a latency proxy (no delay yet)."""
    server = RedisServer(free_port(), tmp_path)
    server.start()
    latency = LatencyProxy("127.0.0.1", server.port)
    await latency.start()
    try:
        yield latency
    finally:
        await latency.close()
        server.kill()


def url(proxy: LatencyProxy) -> str:
    return f"redis://127.0.0.1:{proxy.port}/0"


async def decide(limiter: RedisRateLimiter, callers: int, buckets: int) -> list[bool]:
    """``callers`` concurrent decisions over ``buckets`` buckets, each allowed or not."""
    made = await asyncio.gather(*(limiter.acquire(f"slow-{i % buckets}", 1_000_000) for i in range(callers)))
    return [d.allowed for d in made]


class TestSlowRedis:
    async def test_a_round_trip_just_under_the_socket_timeout_does_not_queue_requests(self, proxy):
        # 0.1 s each way: every read finishes inside the 0.25 s socket timeout, so no single read ever
        # times out. Before the whole-call bound, 160 concurrent decisions over 80 buckets queued for the
        # 32 connection slots and waited seconds (1.3 s at 80 callers), with health still "ok".
        limiter = RedisRateLimiter(url(proxy), key_prefix="qc:slow:", socket_timeout=TIMEOUT)
        try:
            await limiter.acquire("warm", 10)
            proxy.delay = 0.1
            allowed: list[bool] = []
            for _ in range(3):
                allowed += await decide(limiter, 160, 80)
            assert all(allowed)
            # Degraded (before the whole-call bound, health stayed "ok" and every caller queued): from
            # here on the decisions are made in the process, without a round trip.
            assert limiter.degraded
            assert await limiter.status() == "degraded"
            asked = proxy.requests
            assert all(await decide(limiter, 160, 80))
            assert proxy.requests == asked
        finally:
            await limiter.close()

    async def test_a_redis_slower_than_the_timeout_costs_one_timeout_then_heals(self, proxy):
        limiter = RedisRateLimiter(url(proxy), key_prefix="qc:slow:", socket_timeout=TIMEOUT)
        try:
            await limiter.acquire("warm", 10)
            proxy.delay = 2.0
            assert all(await decide(limiter, 50, 10))
            assert await limiter.status() == "degraded"
            # Fast again: the probe switches back, and a limit is counted in Redis (shared) once more.
            proxy.delay = 0.0
            await wait_for_status(limiter, "ok")
            decisions = [await limiter.acquire("after", 3) for _ in range(4)]
            assert [d.allowed for d in decisions] == [True, True, True, False]
            assert await zcard(url(proxy), "qc:slow:after") == 3
        finally:
            await limiter.close()

    async def test_a_slow_redis_costs_a_group_rate_take_at_most_the_timeout(self, proxy):
        buckets = RedisTokenBuckets(url(proxy), key_prefix="qc:slow:tb:", socket_timeout=TIMEOUT)
        try:
            assert (await buckets.take("g", 10, 10, 1)).granted == 1
            proxy.delay = 2.0
            taken = await buckets.take("g", 10, 10, 1)
            assert taken.granted == 1  # counted in this process meanwhile
            # The next passes do not ask Redis again (before: each waited one timeout on it).
            asked = proxy.requests
            for _ in range(20):
                await buckets.take("g", 1000, 1000, 1)
            assert proxy.requests == asked
            proxy.delay = 0.0
            await asyncio.sleep(2.1)  # past the retry interval; the abandoned call's reply is long gone
            assert (await buckets.take("g2", 1, 1, 2)).granted == 1
            # Counted in Redis again: the bucket's hash is there.
            client = Redis.from_url(url(proxy))
            try:
                assert await client.exists("qc:slow:tb:g2") == 1
            finally:
                await client.aclose()
        finally:
            await buckets.close()
