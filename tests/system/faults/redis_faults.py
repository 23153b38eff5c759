"""Faults of the limits store: the deployment's own ``redis-server`` (tests/fixtures/redis.py) paused with
SIGSTOP (a stall: connections open, nothing answered) or killed and started again empty (it keeps nothing
on disk), under the recorded load of ``load.py``.

What the product promises meanwhile (app/stores/limits/redis.py, "Outage"): publishes and deliveries go on,
with rate limits and group rates counted per process; ``/v1/health`` answers ``degraded``; nothing
acknowledged is lost; the limits heal by themselves once Redis answers again, without a restart. Each
fault's note in the history says what health answered during the fault, and how long after it the server
answered ``ok`` again. The checker (``history.py``) reads the rest.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.fixtures.redis import RedisServer
from tests.system.faults.load import Fault, Target

OUTAGE_SECONDS = 8.0  # longer than the limiter's socket timeout (0.25 s) and its probe interval (1 s)
HEAL_GUARD_S = 30.0  # a hang guard on waiting for health to say ``ok`` again, not a speed claim


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
