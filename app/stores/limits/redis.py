"""Redis sliding-log rate limiter, shared by every API process, with a per-process fallback.

Storage: one sorted set per bucket, key ``<key_prefix><bucket>`` (prefix ``qc:rl:`` by default). Each
accepted request is one member, scored by its Redis ``TIME`` in microseconds since the epoch (exact in a
double until the year 2255); the member is that time plus a per-call token (limiter instance id and a
sequence number), so two requests in the same microsecond are two members. The key's TTL is the window,
renewed at every acceptance, so an idle bucket vanishes once its last request has left the window.

One ``EVALSHA`` of ``_SCRIPT`` decides every request of a bucket that is waiting (one round trip;
``SCRIPT LOAD`` and a second try only after ``NOSCRIPT``, i.e. after Redis restarted). The script reads
the clock with ``TIME``, trims members at or before ``now - window``, counts, and accepts as many of the
``n`` requests as there is room for, adding one member each at ``now``. Redis runs a script atomically,
so concurrent decisions from any number of processes are serialised: no read-modify-write race, and the
API hosts' clocks are never used. Refused requests write nothing. Requires Redis 5 or later (scripts
replicate their effects, so ``TIME`` before a write is allowed).

Group commit, as the log engines do it: while a bucket's call is in flight, further requests for it
wait, and the next call decides all of them at once (the first ones accepted while there is room, in
arrival order). No wait is added to a bucket with nothing in flight. Every API request is one decision
of its key's bucket, so under load this takes a Redis round trip (and its share of the API process's
CPU) off most requests: at 50 concurrent publishes of one key, one call decided ~25 of them.

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

Slow Redis: every call is bounded as a whole by ``socket_timeout`` - the wait for a slot, a new
connection's handshake, the script (and its reload after ``NOSCRIPT``) - not each socket read alone. A
call not done by then is an outage like any other (degraded, the fallback answers). Before, a Redis
whose round trip stayed just under the socket timeout (0.2 s against 0.25 s) never degraded: callers
queued for the 32 slots and a request waited 1.3 s at 80 concurrent decisions, more under more load
(tests/stores/limits/test_redis_slow.py). While Redis stays slow the probe may succeed now and then and
the limiter flip back until the next slow call: each such flip costs the calls then in flight at most
``socket_timeout``.
"""

from __future__ import annotations

import asyncio
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

from app.kit.tasks import cancel_and_wait
from app.stores.limits.memory import MemoryRateLimiter
from app.stores.limits.protocol import Decision, ceil_seconds, check_arguments

logger = logging.getLogger("queuecore.limits")

# KEYS[1] the bucket's sorted set; ARGV[1] limit; ARGV[2] window in ms; ARGV[3] a token unique per call;
# ARGV[4] how many requests to decide (0: only answer whether one would be accepted, ``peek``). Returns
# {accepted (the first ones; for a peek 1 or 0), count after the decision, now_us, room_at_us, empty_at_us}:
# when a refused request would find room, and when every counted request will have left the window.
_SCRIPT = """
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local n = tonumber(ARGV[4])
local window_us = window_ms * 1000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window_us))
local count = redis.call('ZCARD', key)
if n == 0 and count < limit then
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  return {1, count, now, 0, last[2] and (tonumber(last[2]) + window_us) or now}
end
local take = math.max(0, math.min(n, limit - count))
if take > 0 then
  local stamp = string.format('%d', now)
  for i = 1, take do
    redis.call('ZADD', key, stamp, stamp .. ':' .. ARGV[3] .. ':' .. i)
  end
  redis.call('PEXPIRE', key, window_ms)
  count = count + take
end
if n > 0 and take == n then
  return {take, count, now, 0, now + window_us}
end
local room = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
return {take, count, now, tonumber(room[2]) + window_us, tonumber(newest[2]) + window_us}
"""
_SHA = hashlib.sha1(_SCRIPT.encode()).hexdigest()

# A dead or unreachable Redis surfaces as RedisError (ConnectionError, TimeoutError, BusyLoadingError,
# READONLY…) or as a bare OSError from the socket layer; a slow one as the whole call's TimeoutError
# (``asyncio.timeout``; the builtin TimeoutError is an OSError, named for clarity).
_OUTAGE = (RedisError, OSError, TimeoutError)
_PROBE_BUCKET = "__probe__"


def tls_options(url: str, tls_ca: str) -> dict[str, Any]:
    """redis-py's keyword arguments for a ``rediss://`` server's certificate to be checked against
    ``tls_ca`` (nothing for a plain ``redis://`` URL, which has no TLS to configure)."""
    if tls_ca and url.startswith("rediss://"):
        return {"ssl_ca_certs": tls_ca, "ssl_cert_reqs": "required"}
    return {}


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
        tls_ca: str = "",
    ) -> None:
        # ``url`` carries AUTH (``redis://user:password@``) and TLS (``rediss://``); ``tls_ca`` is the CA
        # a ``rediss://`` server's certificate is checked against (the system's when empty).
        self._client: Redis = Redis.from_url(
            url,
            **tls_options(url, tls_ca),
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
        # The bound on a whole call (slot wait, connection handshake, script), not only on each read.
        self._timeout = socket_timeout
        self._fallback = fallback or MemoryRateLimiter()
        # Members must be unique across every process sharing the bucket: a random instance id plus a
        # sequence number.
        self._instance = secrets.token_hex(6)
        self._sequence = itertools.count()
        # Per bucket with a call in flight: the requests waiting for the next one (see the docstring).
        self._waiting: dict[tuple[str, int, int], list[asyncio.Future[Decision]]] = {}
        self._calls: set[asyncio.Task[None]] = set()
        self.calls = 0  # script calls made (for tests and metrics)
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
        check_arguments(limit, window_ms)
        if self._degraded:
            return self._fall_back(bucket, limit, window_ms)
        group = (bucket, limit, window_ms)
        waiting = self._waiting.get(group)
        if waiting is not None:  # a call for this bucket is in flight: ride on the next one
            future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
            waiting.append(future)
            return await future
        self._waiting[group] = []
        try:
            return (await self._decide_or_fall_back(group, 1))[0]
        finally:
            self._next_call(group)

    async def peek(self, bucket: str, limit: int, window_ms: int = 1000) -> Decision:
        """The decision ``acquire`` would take now, without counting anything (not group-committed: rare)."""
        check_arguments(limit, window_ms)
        if not self._degraded:
            try:
                async with asyncio.timeout(self._timeout), self._slots:
                    if not self._degraded:
                        accepted, count, now, room_at, empty_at = await self._eval(
                            self._prefix + bucket, limit, window_ms, 0
                        )
                        return Decision(
                            bool(accepted),
                            limit,
                            max(0, limit - count),
                            ceil_seconds(empty_at - now),
                            0 if accepted else max(1, ceil_seconds(room_at - now)),
                            now,
                        )
            except _OUTAGE as exc:
                self._enter_degraded(exc)
        return replace(self._fallback.decide(bucket, limit, window_ms, count=False), at_us=None)

    async def forget(self, bucket: str) -> None:
        """Drop every request counted in ``bucket`` (in the fallback too)."""
        await self._fallback.forget(bucket)
        if not self._degraded:
            try:
                async with asyncio.timeout(self._timeout), self._slots:
                    await self._client.delete(self._prefix + bucket)
            except _OUTAGE as exc:
                self._enter_degraded(exc)

    def _next_call(self, group: tuple[str, int, int]) -> None:
        """The bucket's call is answered: decide those that waited for it in one more, or close the group."""
        waiting = self._waiting.get(group)
        if not waiting:
            self._waiting.pop(group, None)
            return
        self._waiting[group] = []
        task = asyncio.get_running_loop().create_task(self._answer(group, waiting))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _answer(self, group: tuple[str, int, int], futures: list[asyncio.Future[Decision]]) -> None:
        try:
            decisions = await self._decide_or_fall_back(group, len(futures))
        except BaseException as exc:
            for future in futures:
                if not future.done():
                    future.set_exception(exc)
            raise
        finally:
            self._next_call(group)
        for future, decision in zip(futures, decisions, strict=True):
            if not future.done():
                future.set_result(decision)

    async def _decide_or_fall_back(self, group: tuple[str, int, int], n: int) -> list[Decision]:
        bucket, limit, window_ms = group
        if not self._degraded:
            try:
                async with asyncio.timeout(self._timeout), self._slots:
                    # Re-checked: Redis may have been found dead while this call waited for a slot.
                    if not self._degraded:
                        return await self._decide(self._prefix + bucket, limit, window_ms, n)
            except _OUTAGE as exc:
                self._enter_degraded(exc)
        return [self._fall_back(bucket, limit, window_ms) for _ in range(n)]

    def _fall_back(self, bucket: str, limit: int, window_ms: int) -> Decision:
        # The fallback's monotonic clock is not comparable with Redis time: no ``at_us``.
        return replace(self._fallback.decide(bucket, limit, window_ms), at_us=None)

    async def status(self) -> str:
        """``"ok"`` when Redis answers, ``"degraded"`` while limits fall back to this process."""
        if self._degraded:
            return "degraded"
        try:
            async with asyncio.timeout(self._timeout), self._slots:
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
            await cancel_and_wait(task)
        await self._client.aclose()
        await self._fallback.close()

    async def _decide(self, key: str, limit: int, window_ms: int, n: int = 1) -> list[Decision]:
        """``n`` requests of one bucket, in one script call: the first ones accepted while there is room."""
        accepted, count, now, room_at, empty_at = await self._eval(key, limit, window_ms, n)
        reset = ceil_seconds(empty_at - now)
        before = count - accepted  # counted before this call's acceptances
        decisions = [
            Decision(True, limit, max(0, limit - before - i), reset, 0, now) for i in range(1, accepted + 1)
        ]
        if accepted < n:
            refused = Decision(
                False, limit, max(0, limit - count), reset, max(1, ceil_seconds(room_at - now)), now
            )
            decisions.extend([refused] * (n - accepted))
        return decisions

    async def _eval(self, key: str, limit: int, window_ms: int, n: int) -> tuple[int, ...]:
        token = f"{self._instance}.{next(self._sequence)}"
        self.calls += 1
        try:
            reply: Any = await self._client.evalsha(_SHA, 1, key, limit, window_ms, token, n)
        except NoScriptError:
            # Redis lost its script cache (a restart): load once, then the one call.
            await self._client.script_load(_SCRIPT)
            reply = await self._client.evalsha(_SHA, 1, key, limit, window_ms, token, n)
        return tuple(int(v) for v in reply)

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
                async with asyncio.timeout(self._timeout), self._slots:
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
