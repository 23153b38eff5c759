"""When a schedule's runs are due: five-field cron in an IANA time zone, or a fixed period.

- ``cron``: minute, hour, day of month, month, day of week (names such as ``MON`` and ``JAN``, ranges,
  lists and steps), evaluated by cronsim in the schedule's ``timezone`` (zoneinfo). Daylight saving time
  follows cron's own rules: a wall-clock time skipped by a spring-forward change runs at the first
  minute after the gap, once; a time repeated by a fall-back change runs once, at its first occurrence;
  expressions whose hour is a wildcard or a step keep running every matching minute of real time.
- ``every``: a duration ``<n>ms|s|m|h|d`` of at least 1 s; runs are due at ``anchor + k × every``
  (the anchor is the creation time), in real time, so the time zone has no effect on them.

Due times are whole milliseconds since the epoch (UTC): the runner fences its claims on them exactly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from app.broker import durations
from app.broker.errors import InvalidRequest

EVERY = durations.Range(1_000, 366 * 86_400_000, "between 1s and 366d")
MAX_CRON_LENGTH = 255
MAX_TIMEZONE_LENGTH = 64


@dataclass(frozen=True, slots=True)
class Cadence:
    """A schedule's validated timing: exactly one of ``cron`` and ``every_ms``, and its zone."""

    cron: str | None
    every_ms: int | None
    timezone: str
    anchor_ms: int

    def next_after(self, after_ms: int) -> int:
        """The first due time strictly after ``after_ms``."""
        if self.every_ms is not None:
            periods = (after_ms - self.anchor_ms) // self.every_ms + 1
            return self.anchor_ms + max(periods, 1) * self.every_ms
        assert self.cron is not None
        zone = _zone(self.timezone)
        start = datetime.fromtimestamp(after_ms / 1000, zone)
        due = next(CronSim(self.cron, start))
        return int(due.timestamp() * 1000)


@functools.lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def parse_timezone(value: str | None) -> str:
    """An IANA zone name (``Europe/Berlin``), default ``UTC``; 400 naming ``timezone`` otherwise."""
    if value is None:
        return "UTC"
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TIMEZONE_LENGTH:
        raise InvalidRequest.field("timezone", "expected an IANA time zone name such as 'Europe/Berlin'")
    try:
        _zone(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidRequest.field("timezone", f"unknown time zone '{value}' (an IANA name)") from None
    return value


def parse_cron(value: str) -> str:
    """A five-field cron expression, fields separated by single spaces; 400 naming ``cron`` otherwise."""
    fields = value.split() if isinstance(value, str) and len(value) <= MAX_CRON_LENGTH else []
    if len(fields) != 5:
        raise InvalidRequest.field(
            "cron", "expected five fields: minute hour day-of-month month day-of-week, e.g. '*/5 * * * *'"
        )
    expression = " ".join(fields)
    try:
        CronSim(expression, datetime.now(UTC))
    except (CronSimError, ValueError, IndexError, KeyError) as exc:
        raise InvalidRequest.field("cron", f"not a valid cron expression ({exc})") from None
    return expression


def cadence(cron: str | None, every: str | None, timezone: str | None, anchor_ms: int) -> Cadence:
    """Validate ``cron`` | ``every`` (exactly one) and ``timezone``."""
    if (cron is None) == (every is None):
        field = "cron" if cron is None else "every"
        raise InvalidRequest.field(field, "give exactly one of 'cron' and 'every'")
    zone = parse_timezone(timezone)
    if every is not None:
        return Cadence(None, durations.parse(every, "every", EVERY), zone, anchor_ms)
    assert cron is not None
    return Cadence(parse_cron(cron), None, zone, anchor_ms)
