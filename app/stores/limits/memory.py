"""In-process sliding-log rate limiter: the embedded default, and Redis's fallback during an outage.

Layout: one ``_Bucket`` per bucket name, holding a deque of the monotonic times (ns) of the requests it
accepted that are still inside the window, oldest first. A decision trims the times that have left
``(now - window, now]``, then accepts (appending ``now``) if fewer than ``limit`` remain.

Idle buckets are dropped: buckets sit in an ordered dict in order of their last acceptance, each
knowing when it empties (last acceptance + window). Every decision drops up to ``_SWEEP_PER_CALL``
emptied buckets from the front, so there are never many more buckets than were active during the last
window (each decision creates at most one bucket and can drop several). With one window for every
bucket, as the product uses, the dict is ordered by emptying time exactly; with mixed windows a
long-window bucket at the front delays the sweep of those behind it by at most its own window.

Thread-safety: none needed and none given. ``acquire`` never awaits, so on one event loop every
decision is atomic; do not share an instance across threads or event loops.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

from app.stores.limits.protocol import Decision, check_arguments

_SWEEP_PER_CALL = 8


def _ceil_ns(duration_ns: int) -> int:
    """Nanoseconds to whole seconds, rounded up; never negative."""
    return max(0, -(-duration_ns // 1_000_000_000))


class _Bucket:
    __slots__ = ("empties_at", "times")

    def __init__(self) -> None:
        self.times: deque[int] = deque()
        self.empties_at = 0


class MemoryRateLimiter:
    """Sliding-log limits counted in this process; ``status()`` is ``"embedded"``."""

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        # ``clock`` returns nanoseconds and never goes backwards (tests inject a fake one).
        self._clock = clock
        # ``at_us`` is reported as epoch microseconds: the monotonic clock shifted by a fixed offset taken
        # once, so differences between decisions stay exact even if the wall clock is stepped.
        self._epoch_offset_ns = time.time_ns() - clock()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    async def acquire(self, bucket: str, limit: int, window_ms: int = 1000) -> Decision:
        """Accept and count one request if ``bucket`` took fewer than ``limit`` in the last ``window_ms``."""
        return self.decide(bucket, limit, window_ms)

    async def peek(self, bucket: str, limit: int, window_ms: int = 1000) -> Decision:
        """The decision ``acquire`` would take now, without counting anything."""
        return self.decide(bucket, limit, window_ms, count=False)

    async def forget(self, bucket: str) -> None:
        """Drop every request counted in ``bucket``."""
        self._buckets.pop(bucket, None)

    def decide(self, bucket: str, limit: int, window_ms: int = 1000, *, count: bool = True) -> Decision:
        """``acquire`` without the coroutine: the same decision, synchronously (``peek`` with
        ``count=False``)."""
        check_arguments(limit, window_ms)
        now = self._clock()
        window = window_ms * 1_000_000
        self._sweep(now)
        state = self._buckets.get(bucket)
        if state is None:
            state = _Bucket()
            if count:
                self._buckets[bucket] = state
        times = state.times
        cutoff = now - window
        while times and times[0] <= cutoff:
            times.popleft()
        allowed = len(times) < limit
        if allowed and count:
            times.append(now)
            state.empties_at = now + window
            self._buckets.move_to_end(bucket)
        held = len(times)
        retry_after = 0
        if not allowed:
            # Room appears when the request at index held - limit leaves (the oldest, unless the limit
            # was lowered while the bucket was full).
            retry_after = max(1, _ceil_ns(times[held - limit] + window - now))
        return Decision(
            allowed=allowed,
            limit=limit,
            remaining=max(0, limit - held),
            reset_seconds=_ceil_ns(times[-1] + window - now) if times else 0,
            retry_after_seconds=retry_after,
            at_us=(now + self._epoch_offset_ns) // 1000,
        )

    def _sweep(self, now: int) -> None:
        buckets = self._buckets
        for _ in range(_SWEEP_PER_CALL):
            if not buckets:
                return
            name, state = next(iter(buckets.items()))
            if state.empties_at > now:
                return
            del buckets[name]

    def clear(self) -> None:
        """Forget every bucket."""
        self._buckets.clear()

    def __len__(self) -> int:
        """How many buckets are held (for tests of the idle sweep)."""
        return len(self._buckets)

    async def status(self) -> str:
        """Always ``"embedded"``: an in-process stand-in for Redis."""
        return "embedded"

    async def close(self) -> None:
        """Forget every bucket."""
        self.clear()
