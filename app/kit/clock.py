"""Time, in one place, so tests can inject it."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


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
