"""Faults of the limits store: the deployment's own ``redis-server`` (tests/fixtures/redis.py) paused with
SIGSTOP (a stall: connections open, nothing answered), killed and started again empty (it keeps nothing
on disk), or slowed down (it answers, late: a latency proxy between the API process and Redis,
latency_proxy.py), under the recorded load of ``load.py``.

What the product promises meanwhile (app/stores/limits/redis.py, "Outage"): publishes and deliveries go on,
with rate limits and group rates counted per process; ``/v1/health`` answers ``degraded``; nothing
acknowledged is lost; the limits heal by themselves once Redis answers again, without a restart. Each
fault's note in the history says what health answered during the fault, and how long after it the server
answered ``ok`` again. The checker (``history.py``) reads the rest.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from redis import Redis

from tests.fixtures.redis import RedisServer
from tests.system.faults.latency_proxy import ProxyThread
from tests.system.faults.load import Fault, Target

OUTAGE_SECONDS = 8.0  # longer than the limiter's socket timeout (0.25 s) and its probe interval (1 s)
HEAL_GUARD_S = 30.0  # a hang guard on waiting for health to say ``ok`` again, not a speed claim
# The slow fault's two phases, each SLOW_SECONDS: a round trip just under the limiter's timeout (0.25 s;
# before the whole-call bound, this one never degraded and requests queued behind it), then 2 s a round
# trip (the proxy holds each chunk this long in each direction).
SLOW_DELAYS = (0.1, 1.0)
SLOW_SECONDS = 3.0


def _redis(target: Target) -> RedisServer:
    if target.redis is None:
        raise RuntimeError("a Redis fault needs a deployment with a Redis of its own")
    return target.redis


async def _health(target: Target) -> str:
    """What ``/v1/health`` answers now: its status and the Redis check, or why there was no answer."""
    async with httpx.AsyncClient(base_url=target.api_server.url, timeout=5) as http:
        try:
            body = (await http.get("/v1/health")).json()
            return f"{body['status']} (redis {body['checks'].get('redis')})"
        except (httpx.HTTPError, ValueError, KeyError) as error:
            return f"no answer ({type(error).__name__})"


async def _healed(target: Target) -> str:
    """How long after the fault health answered ``ok`` again."""
    started = time.monotonic()
    while time.monotonic() - started < HEAL_GUARD_S:
        if (await _health(target)).startswith("ok"):
            return f"ok again after {time.monotonic() - started:.1f} s"
        await asyncio.sleep(0.2)
    return f"not ok {HEAL_GUARD_S:g} s after: {await _health(target)}"


async def _pause(target: Target) -> str:
    redis = _redis(target)
    redis.pause()
    try:
        await asyncio.sleep(OUTAGE_SECONDS / 2)
        during = await _health(target)
        await asyncio.sleep(OUTAGE_SECONDS / 2)
    finally:
        redis.resume()
    return f"health during the stall: {during}; {await _healed(target)}"


async def _kill(target: Target) -> str:
    redis = _redis(target)
    await asyncio.to_thread(redis.kill)
    await asyncio.sleep(OUTAGE_SECONDS / 2)
    during = await _health(target)
    await asyncio.sleep(OUTAGE_SECONDS / 2)
    await asyncio.to_thread(redis.start)
    return f"health while down: {during}; {await _healed(target)}"


REDIS_PAUSE = Fault("redis-sigstop", _pause)
REDIS_KILL = Fault("redis-sigkill+restart(empty)", _kill)


def _proxy(target: Target) -> ProxyThread:
    if target.redis_proxy is None:
        raise RuntimeError("a slow-Redis fault needs the API process to reach Redis through a latency proxy")
    return target.redis_proxy


def _counted_since(redis: RedisServer, since_us: int) -> int:
    """Rate-limit decisions Redis counted after ``since_us`` (its own ``TIME``): members of the limiter's
    sorted sets (this Redis is the run's own: nothing else is in it)."""
    client = Redis(port=redis.port)
    try:
        return sum(
            int(client.zcount(key, since_us, "+inf"))
            for key in client.scan_iter(count=1000)
            if client.type(key) == b"zset"
        )
    finally:
        client.close()


def _redis_time_us(redis: RedisServer) -> int:
    client = Redis(port=redis.port)
    try:
        seconds, micros = client.time()
        return int(seconds) * 1_000_000 + int(micros)
    finally:
        client.close()


async def _slow(target: Target) -> str:
    redis, proxy = _redis(target), _proxy(target)
    during = []
    try:
        for delay in SLOW_DELAYS:
            proxy.delay = delay
            await asyncio.sleep(SLOW_SECONDS / 2)
            during.append(f"{2 * delay:g} s a round trip: {await _health(target)}")
            await asyncio.sleep(SLOW_SECONDS / 2)
    finally:
        proxy.delay = 0.0
    healed = await _healed(target)
    # Limits are shared again: the load's own requests are counted in Redis once more.
    since = await asyncio.to_thread(_redis_time_us, redis)
    await asyncio.sleep(1.0)
    counted = await asyncio.to_thread(_counted_since, redis, since)
    return f"health {'; '.join(during)}; {healed}; {counted} decisions counted in Redis in the next second"


def latencies_during(history: list[dict[str, Any]], fault: str) -> list[float]:
    """How long each publish, ack and nack invoked while ``fault`` was on took to be answered (one per
    request: a batch's values share theirs)."""
    windows = [
        (op["invoke"], op["complete"]) for op in history if op["type"] == "fault" and op["name"] == fault
    ]
    seen: set[tuple[str, float]] = set()
    took = []
    for op in history:
        if op["type"] not in ("publish", "ack", "nack") or "complete" not in op:
            continue
        if not any(start <= op["invoke"] <= end for start, end in windows):
            continue
        request = (op.get("client", ""), op["invoke"])
        if request in seen:
            continue
        seen.add(request)
        took.append(op["complete"] - op["invoke"])
    return took


def unanswered_during(history: list[dict[str, Any]], fault: str) -> list[dict[str, Any]]:
    """The publishes, acks and nacks invoked while ``fault`` was on whose answer never came (``unknown``)."""
    windows = [
        (op["invoke"], op["complete"]) for op in history if op["type"] == "fault" and op["name"] == fault
    ]
    return [
        op
        for op in history
        if op["type"] in ("publish", "ack", "nack")
        and op.get("outcome") == "unknown"
        and any(start <= op["invoke"] <= end for start, end in windows)
    ]


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


REDIS_SLOW = Fault("redis-slow", _slow)
