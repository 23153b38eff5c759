"""Redis sliding-log rate limiter, shared by every API process, with a per-process fallback.

Storage: one sorted set per bucket, key ``<key_prefix><bucket>`` (prefix ``qc:rl:`` by default). Each
accepted request is one member, scored by its Redis ``TIME`` in microseconds since the epoch (exact in a
double until the year 2255); the member is that time plus a per-call token (limiter instance id and a
sequence number), so two requests in the same microsecond are two members. The key's TTL is the window,
renewed at every acceptance, so an idle bucket vanishes once its last request has left the window.

One decision is one ``EVALSHA`` of ``_SCRIPT`` (one round trip; ``SCRIPT LOAD`` and a second try only
after ``NOSCRIPT``, i.e. after Redis restarted). The script reads the clock with ``TIME``, trims
members at or before ``now - window``, counts, and adds ``now`` when fewer than ``limit`` remain. Redis
runs a script atomically, so concurrent decisions from any number of processes are serialised: no
read-modify-write race, and the API hosts' clocks are never used. Refused requests write nothing.
Requires Redis 5 or later (scripts replicate their effects, so ``TIME`` before a write is allowed).

Connections: at most ``max_connections`` calls are in flight at once (a semaphore in front of a pool of
that size); more callers queue for a slot rather than make the pool refuse them.

Outage: a call that fails (connection refused or reset, a timeout of ``socket_timeout``, any Redis
error) switches the limiter to *degraded*: that decision and all later ones go to an in-process
``MemoryRateLimiter`` at once (limits then hold per process, not across processes), ``status()``
answers ``"degraded"``, and one warning is logged. Only the calls already in flight (at most
``max_connections``) pay the failure or the timeout; callers queued for a slot re-check and go to the
fallback. A single background task probes Redis every ``probe_interval`` seconds by running the real
script on a probe key; the first success switches back (one info line), and the fallback's counts are
dropped. Commands are never retried by the client: re-running a decision that may have executed would
count a request twice. The socket timeout is measured on the event loop, so a loop blocked for longer
than ``socket_timeout`` also reads as an outage (for about ``probe_interval``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import secrets
import time
from dataclasses import replace
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError

from app.stores.limits.memory import MemoryRateLimiter
from app.stores.limits.protocol import Decision, ceil_seconds, check_arguments

logger = logging.getLogger("queuecore.limits")

# KEYS[1] the bucket's sorted set; ARGV[1] limit; ARGV[2] window in ms; ARGV[3] a token unique per call;
# ARGV[4] "1" to count an accepted request, "0" to only answer (``peek``).
# Returns {accepted 0|1, count after the decision, now_us, room_at_us, empty_at_us}: when a refused
# bucket has room again, and when every counted request will have left the window.
_SCRIPT = """
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local window_us = window_ms * 1000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window_us))
local count = redis.call('ZCARD', key)
if count < limit then
  if ARGV[4] == '0' then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    return {1, count, now, 0, last[2] and (tonumber(last[2]) + window_us) or now}
  end
  local stamp = string.format('%d', now)
  redis.call('ZADD', key, stamp, stamp .. ':' .. ARGV[3])
  redis.call('PEXPIRE', key, window_ms)
  return {1, count + 1, now, 0, now + window_us}
end
local room = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
return {0, count, now, tonumber(room[2]) + window_us, tonumber(newest[2]) + window_us}
"""
_SHA = hashlib.sha1(_SCRIPT.encode()).hexdigest()

# A dead or unreachable Redis surfaces as RedisError (ConnectionError, TimeoutError, BusyLoadingError,
# READONLY…) or as a bare OSError from the socket layer.
_OUTAGE = (RedisError, OSError)
_PROBE_BUCKET = "__probe__"


class RedisRateLimiter:
    """Sliding-log limits counted in Redis; per-process limits while Redis is unreachable."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "qc:rl:",
        socket_timeout: float = 0.25,
        probe_interval: float = 1.0,
        max_connections: int = 32,
        fallback: MemoryRateLimiter | None = None,
    ) -> None:
        self._client: Redis = Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            max_connections=max_connections,
            # No client-side retries: a retried EVALSHA whose first run executed would count twice, and
            # a dead Redis must fail fast so the fallback answers.
            retry=Retry(NoBackoff(), 0),
        )
        # Every Redis call holds a slot, so the pool never runs out of connections (redis-py would fail
        # the call), and callers queued behind a Redis that just died go to the fallback at once.
        self._slots = asyncio.Semaphore(max_connections)
        self._prefix = key_prefix
        self._probe_interval = probe_interval
        self._fallback = fallback or MemoryRateLimiter()
        # Members must be unique across every process sharing the bucket: a random instance id plus a
        # sequence number.
        self._instance = secrets.token_hex(6)
        self._sequence = itertools.count()
        self._degraded = False
        self._degraded_since = 0.0
        self._heal_task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def key_prefix(self) -> str:
        return self._prefix

    @property
    def degraded(self) -> bool:
        """True while decisions are taken per process because Redis is unreachable."""
        return self._degraded

    async def acquire(self, bucket: str, limit: int, window_ms: int = 1000) -> Decision:
        """Accept and count one request if ``bucket`` took fewer than ``limit`` in the last ``window_ms``."""
        return await self._answer(bucket, limit, window_ms, count=True)

    async def peek(self, bucket: str, limit: int, window_ms: int = 1000) -> Decision:
        """The decision ``acquire`` would take now, without counting anything."""
        return await self._answer(bucket, limit, window_ms, count=False)

    async def forget(self, bucket: str) -> None:
        """Drop every request counted in ``bucket`` (in the fallback too)."""
        await self._fallback.forget(bucket)
        if not self._degraded:
            async with self._slots:
                try:
                    await self._client.delete(self._prefix + bucket)
                except _OUTAGE as exc:
                    self._enter_degraded(exc)

    async def _answer(self, bucket: str, limit: int, window_ms: int, *, count: bool) -> Decision:
        check_arguments(limit, window_ms)
        if not self._degraded:
            async with self._slots:
                # Re-checked: Redis may have been found dead while this call waited for a slot.
                if not self._degraded:
                    try:
                        return await self._decide(self._prefix + bucket, limit, window_ms, counting=count)
                    except _OUTAGE as exc:
                        self._enter_degraded(exc)
        # The fallback's monotonic clock is not comparable with Redis time: no ``at_us``.
        return replace(self._fallback.decide(bucket, limit, window_ms, count=count), at_us=None)

    async def status(self) -> str:
        """``"ok"`` when Redis answers, ``"degraded"`` while limits fall back to this process."""
        if self._degraded:
            return "degraded"
        try:
            async with self._slots:
                await self._client.ping()
        except _OUTAGE as exc:
            self._enter_degraded(exc)
            return "degraded"
        return "ok"

    async def close(self) -> None:
        """Stop the probe, close the connection pool and forget the fallback's buckets."""
        self._closed = True
        task, self._heal_task = self._heal_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._client.aclose()
        await self._fallback.close()

    async def _decide(self, key: str, limit: int, window_ms: int, *, counting: bool = True) -> Decision:
        token = f"{self._instance}.{next(self._sequence)}"
        flag = "1" if counting else "0"
        try:
            reply: Any = await self._client.evalsha(_SHA, 1, key, limit, window_ms, token, flag)
        except NoScriptError:
            # Redis lost its script cache (a restart): load once, then the one decision.
            await self._client.script_load(_SCRIPT)
            reply = await self._client.evalsha(_SHA, 1, key, limit, window_ms, token, flag)
        accepted, count, now, room_at, empty_at = (int(v) for v in reply)
        return Decision(
            allowed=bool(accepted),
            limit=limit,
            remaining=max(0, limit - count),
            reset_seconds=ceil_seconds(empty_at - now),
            retry_after_seconds=0 if accepted else max(1, ceil_seconds(room_at - now)),
            at_us=now,
        )

    def _enter_degraded(self, exc: BaseException) -> None:
        if self._degraded or self._closed:
            return
        self._degraded = True
        self._degraded_since = time.monotonic()
        self._fallback.clear()
        logger.warning(
            "redis unreachable: rate limits fall back to per-process counting until it answers again",
            extra={"error": f"{type(exc).__name__}: {exc}", "probe_interval_s": self._probe_interval},
        )
        self._heal_task = asyncio.get_running_loop().create_task(self._heal(), name="rate-limit-heal")

    async def _heal(self) -> None:
        """Probe Redis every ``probe_interval`` seconds until one decision succeeds, then switch back."""
        while not self._closed:
            await asyncio.sleep(self._probe_interval)
            try:
                async with self._slots:
                    await self._decide(self._prefix + _PROBE_BUCKET, 1, 1)
            except _OUTAGE:
                continue
            self._degraded = False
            self._heal_task = None
            # Redis counts again; the per-process counts are of no further use.
            self._fallback.clear()
            logger.info(
                "redis reachable again: rate limits are shared across processes again",
                extra={"outage_seconds": round(time.monotonic() - self._degraded_since, 3)},
            )
            return
