"""Time, in one place, so tests can inject it.

``now_ms()`` and ``utcnow()`` read the system clock. Where a decision is "has this timed out, expired or
become due" and a test would otherwise wait for it in real time, the code takes a ``Clock`` instead
(defaulting to ``SYSTEM_CLOCK``), handed down from ``Services.clock``: an app under test can then be given
a clock whose time a test moves (``tests/fixtures/clock.py``'s ``ManualClock``). Real waits (a sleep, a
long poll's own ``waitSeconds``) stay on real time: only the comparisons move.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


class Clock(Protocol):
    """What a timeout, an expiry or a due time is compared with."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (the unit deadlines are stored in)."""
        ...

    def monotonic_ns(self) -> int:
        """Nanoseconds on a clock that never goes backwards (only differences mean anything)."""
        ...


class SystemClock:
    """The host's clocks: ``time.time_ns`` and ``time.monotonic_ns``."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK: Clock = SystemClock()


def utcnow() -> datetime:
    return datetime.now(UTC)


# Formatted seconds. Publishing formats many timestamps of the same second, and a delivery formats
# two seconds in turn (the record's timestamp and the ack deadline, ``ackTimeout`` later): a few
# entries, so that neither evicts the other.
_seconds: dict[int, str] = {}
_SECONDS_KEPT = 16


def isoformat_ms(value: datetime | int) -> str:
    """ISO-8601 UTC with milliseconds, as the wire wants: ``2026-03-28T10:42:18.003Z``."""
    if isinstance(value, int):
        second, millis = divmod(value, 1000)
        prefix = _seconds.get(second)
        if prefix is None:
            if len(_seconds) >= _SECONDS_KEPT:
                _seconds.clear()
            prefix = _seconds[second] = datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        return f"{prefix}{millis:03d}Z"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
