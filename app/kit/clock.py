"""Time, in one place, so tests can inject it."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def utcnow() -> datetime:
    return datetime.now(UTC)


_second_cache: tuple[int, str] = (-1, "")


def isoformat_ms(value: datetime | int) -> str:
    """ISO-8601 UTC with milliseconds, as the wire wants: ``2026-03-28T10:42:18.003Z``."""
    if isinstance(value, int):
        # Publishing formats many timestamps of the same second: format the second once.
        global _second_cache
        second, millis = divmod(value, 1000)
        if _second_cache[0] != second:
            _second_cache = (second, datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S."))
        return f"{_second_cache[1]}{millis:03d}Z"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
