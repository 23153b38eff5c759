"""Durations of group config and nacks: ``<n>ms|s|m|h|d`` strings, kept as given and echoed back."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from app.broker.errors import InvalidRequest

_DURATION = re.compile(r"^([0-9]{1,9})(ms|s|m|h|d)$")
UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class Range:
    """The accepted span of one duration field, in milliseconds, and how it reads in messages."""

    min_ms: int
    max_ms: int
    text: str


ACK_TIMEOUT = Range(1_000, 12 * 3_600_000, "between 1s and 12h")
SESSION_TIMEOUT = Range(2_000, 5 * 60_000, "between 2s and 5m")
RETRY_DELAY = Range(0, 3_600_000, "between 0s and 1h")
NACK_DELAY = Range(0, 12 * 3_600_000, "between 0s and 12h")


def parse(value: object, field: str, span: Range) -> int:
    """A ``<n>ms|s|m|h|d`` string within ``span`` → milliseconds; 400 naming ``field`` otherwise."""
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    ms = int(match.group(1)) * UNIT_MS[match.group(2)] if match else -1
    if not match or not span.min_ms <= ms <= span.max_ms:
        raise InvalidRequest.field(field, f'expected a duration like "30s" or "500ms", {span.text}')
    return ms


def parse_delay(value: object, field: str = "delay", span: Range = NACK_DELAY) -> int:
    """A nack delay: a duration string or a number of seconds → milliseconds."""
    if isinstance(value, bool):
        raise InvalidRequest.field(field, f"expected a duration string or a number of seconds, {span.text}")
    if isinstance(value, int | float):
        # Bounded before scaling: 1e308 seconds would overflow, and NaN compares false to everything.
        if not (math.isfinite(value) and span.min_ms <= value * 1000 <= span.max_ms):
            raise InvalidRequest.field(field, f"expected a number of seconds {span.text}")
        return round(value * 1000)
    return parse(value, field, span)
