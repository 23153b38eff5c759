"""Time, in one place, so tests can inject it."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def utcnow() -> datetime:
    return datetime.now(UTC)


def isoformat_ms(value: datetime | int) -> str:
    """ISO-8601 UTC with milliseconds, as the wire wants: ``2026-03-28T10:42:18.003Z``."""
    if isinstance(value, int):
        value = datetime.fromtimestamp(value / 1000, tz=UTC)
    elif value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
