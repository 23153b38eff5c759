"""The limits store: sliding-log rate limits (``RateLimiter``) and token buckets of group delivery rates
(``TokenBuckets``, implemented in ``tokens.py``), each with two implementations.

``memory`` counts in this process (the embedded default); ``redis`` counts in Redis, shared by every API
process, and falls back to per-process counting while Redis is unreachable.

Semantics, common to both (the conformance suite in ``tests/stores/limits`` holds them to it):

* A **sliding log**, not fixed buckets and not an estimate: a bucket keeps the time of every request it
  accepted during the last ``window_ms``. A request arriving at ``now`` is accepted when fewer than
  ``limit`` accepted requests lie in ``(now - window_ms, now]``. Hence in no half-open interval of
  ``window_ms`` are more than ``limit`` requests accepted.
* **Refused requests do not count**: they leave no trace in the bucket.
* A bucket is any string (the edge uses ``"<key_id>:<category>"``); buckets are independent, and an
  idle bucket costs nothing: it is dropped once its last request has left the window.
* ``peek`` answers what ``acquire`` would, counting nothing; ``forget`` empties a bucket. Together they
  count only failures (dashboard sign-ins): peek before trying, acquire on a failure, forget on success.
* Every decision is taken against one clock (Redis ``TIME`` for Redis, this process's monotonic clock
  for memory); the caller's clock is never used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to one request: whether it was accepted, and what the rate-limit headers say.

    ``remaining`` is what is left in the window after this decision. ``reset_seconds`` is how long until
    the window is empty again (every counted request has left it), rounded up; 0 for an empty bucket.
    ``retry_after_seconds`` is meaningful only when refused (0 when accepted): the real time until a
    counted request leaves the window and makes room, rounded up, at least 1. ``at_us`` is when the
    decision was taken, in epoch microseconds on the clock that decided (Redis ``TIME``; for memory, the
    monotonic clock anchored to the epoch once at start, so differences are exact), or ``None`` for the
    decisions of a Redis limiter's per-process fallback, whose clock is not Redis's.
    """

    allowed: bool
    limit: int
    remaining: int
    reset_seconds: int
    retry_after_seconds: int
    at_us: int | None = None


@runtime_checkable
class RateLimiter(Protocol):
    """Sliding-window rate limiting of named buckets."""

    async def acquire(self, bucket: str, limit: int, window_ms: int = 1000) -> Decision:
        """Accept and count one request if ``bucket`` took fewer than ``limit`` in the last ``window_ms``."""
        ...

    async def peek(self, bucket: str, limit: int, window_ms: int = 1000) -> Decision:
        """The decision ``acquire`` would take now, without counting anything (for failure-only limits)."""
        ...

    async def forget(self, bucket: str) -> None:
        """Drop every request counted in ``bucket`` (a success that clears earlier failures)."""
        ...

    async def status(self) -> str:
        """Health: ``"ok"``, ``"degraded"`` (Redis unreachable, limits per process) or ``"embedded"``."""
        ...

    async def close(self) -> None:
        """Release connections and background work; the limiter is not used afterwards."""
        ...


def check_arguments(limit: int, window_ms: int) -> None:
    """Refuse limits and windows no limiter can honour (a limit below 1, a window below 1 ms)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if window_ms < 1:
        raise ValueError(f"window_ms must be at least 1, got {window_ms}")


def ceil_seconds(duration_us: int) -> int:
    """Microseconds to whole seconds, rounded up; never negative."""
    if duration_us <= 0:
        return 0
    return -(-duration_us // 1_000_000)


@dataclass(frozen=True, slots=True)
class Taken:
    """What one ``TokenBuckets.take`` got: ``granted`` tokens (0 to the number asked), the whole
    ``tokens`` left after it, and ``wait_ms``, when fewer than asked were granted, the time until the next
    whole token."""

    granted: int
    tokens: float
    wait_ms: int = 0


@runtime_checkable
class TokenBuckets(Protocol):
    """Named token buckets, refilled continuously at a rate given with each call (a group's delivery
    ``rate``); a bucket never seen starts full."""

    async def take(self, bucket: str, rate: float, burst: float, want: int) -> Taken:
        """Take up to ``want`` whole tokens from ``bucket`` (refilled at ``rate``/s, capped at ``burst``)."""
        ...

    async def close(self) -> None:
        """Release connections; the buckets are not used afterwards."""
        ...
