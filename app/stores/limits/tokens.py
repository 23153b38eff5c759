"""Token buckets: a group's delivery ``rate``, shared by every API process.

A bucket holds at most ``burst`` tokens and gains ``rate`` tokens per second; ``take(bucket, rate, burst,
want)`` removes up to ``want`` whole tokens at once and answers how many it took (0 to ``want``) and, when
it took fewer than asked, how long until the next whole token. A delivery pass asks once for what it could
send, so the cost is one call per pass, not per message. A bucket never seen starts full.

Two implementations of ``protocol.TokenBuckets``, one behaviour (``tests/stores/limits/test_tokens.py``
runs both):

- ``MemoryTokenBuckets`` counts in this process (the embedded default), on the monotonic clock;
- ``RedisTokenBuckets`` counts in Redis (one hash per bucket: ``tokens`` and ``at`` in microseconds of
  Redis ``TIME``), one atomic script call per ``take``, so any number of processes share a bucket and no
  host clock is used. The key expires once the bucket would be full again. While Redis is unreachable it
  falls back to per-process buckets (the rate then holds per process) and logs one warning. A call is
  bounded as a whole by ``socket_timeout``; after a failed or timed-out call, takes go straight to the
  fallback for ``retry_interval`` seconds, so a slow or dead Redis costs one timeout a second, not one a
  delivery pass.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.stores.limits.protocol import Taken

logger = logging.getLogger("queuecore.limits")


def _check(rate: float, burst: float, want: int) -> None:
    if not rate > 0 or not burst >= 1 or want < 0:
        raise ValueError(f"need rate > 0, burst >= 1 and want >= 0 (got {rate}, {burst}, {want})")


def _wait_ms(tokens: float, rate: float) -> int:
    """Milliseconds until ``tokens`` (below one) reaches one whole token."""
    return max(1, math.ceil((1 - tokens) / rate * 1000))


class MemoryTokenBuckets:
    """Token buckets in this process."""

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[float, int]] = {}  # bucket -> (tokens, at ns)

    async def take(self, bucket: str, rate: float, burst: float, want: int) -> Taken:
        return self.take_now(bucket, rate, burst, want)

    def take_now(self, bucket: str, rate: float, burst: float, want: int) -> Taken:
        """``take``, synchronously (the Redis buckets' fallback)."""
        _check(rate, burst, want)
        now = self._clock()
        tokens, at = self._buckets.get(bucket, (burst, now))
        tokens = min(burst, tokens + (now - at) * rate / 1e9)
        granted = min(want, math.floor(tokens))
        tokens -= granted
        if len(self._buckets) > 100_000:  # idle buckets are full ones: forgetting them changes nothing
            self._buckets = {k: v for k, v in self._buckets.items() if v[0] < burst}
        self._buckets[bucket] = (tokens, now)
        return Taken(granted, tokens, _wait_ms(tokens, rate) if granted < want else 0)

    async def close(self) -> None:
        self._buckets.clear()


_SCRIPT = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(v[1]) or burst
local at = tonumber(v[2]) or now
tokens = math.min(burst, tokens + (now - at) * rate / 1000000)
local granted = math.min(want, math.floor(tokens))
tokens = tokens - granted
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'at', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
return {granted, string.format('%.17g', tokens)}
"""


class RedisTokenBuckets:
    """Token buckets in Redis, shared by every process; per-process buckets while it is unreachable."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "qc:tb:",
        socket_timeout: float = 0.25,
        retry_interval: float = 1.0,
        tls_ca: str = "",
    ) -> None:
        from redis.asyncio import Redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        from app.stores.limits.redis import tls_options

        # No client-side retries: a retried script whose first run executed would take twice.
        self._client: Any = Redis.from_url(
            url,
            **tls_options(url, tls_ca),
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            retry=Retry(NoBackoff(), 0),
        )
        self._script = self._client.register_script(_SCRIPT)
        self._timeout = socket_timeout
        self._prefix = key_prefix
        self._fallback = MemoryTokenBuckets()
        self._warned = False
        self._retry_interval = retry_interval
        self._skip_until = 0.0  # monotonic: Redis failed; count in this process until then

    async def take(self, bucket: str, rate: float, burst: float, want: int) -> Taken:
        _check(rate, burst, want)
        if time.monotonic() < self._skip_until:
            return self._fallback.take_now(bucket, rate, burst, want)
        try:
            # The whole call is bounded (a new connection's handshake and the script), not only each read:
            # a slow Redis costs a delivery pass at most ``socket_timeout``.
            async with asyncio.timeout(self._timeout):
                granted, tokens = await self._script(keys=[self._prefix + bucket], args=[rate, burst, want])
        except Exception as error:  # noqa: BLE001 - any Redis failure: count in this process meanwhile
            if not self._warned:
                self._warned = True
                logger.warning(
                    "redis unreachable: group rates are counted per process until it answers again",
                    extra={"error": f"{type(error).__name__}: {error}"},
                )
            self._skip_until = time.monotonic() + self._retry_interval
            return self._fallback.take_now(bucket, rate, burst, want)
        self._warned = False
        left = float(tokens)
        granted = int(granted)
        return Taken(granted, left, _wait_ms(left, rate) if granted < want else 0)

    async def close(self) -> None:
        await self._client.aclose()
        await self._fallback.close()


if TYPE_CHECKING:  # mypy holds both to the protocol

    def _implementations(url: str) -> None:
        from app.stores.limits.protocol import TokenBuckets

        _memory: TokenBuckets = MemoryTokenBuckets()
        _redis: TokenBuckets = RedisTokenBuckets(url)
