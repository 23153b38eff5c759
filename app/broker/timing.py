"""A message's time rules: when it falls due (``delay`` / ``deliverAt``) and when it expires (``ttl`` /
``expiresAt``).

Both travel with the record, as epoch milliseconds in its metadata (``messages.encode_headers``), so any
delivery pass on any node, after any restart, knows them without an index of its own. The delivery
side (``delivery/delays.py``) turns a record read before it is due into a lease row due at
``deliverAt``: the lease rows are the due-time index the engines share.

Rules (PRODUCT.md "Time and flow"):

- ``delay`` (a ``<n>ms|s|m|h|d`` string or a number of seconds) or ``deliverAt`` (ISO-8601 or epoch
  milliseconds), at most 30 days ahead; both at once, a negative delay or beyond 30 days is 400 naming the
  field; a ``deliverAt`` in the past means now (no delay is kept).
- ``ttl`` (a duration string or a number of seconds, counted from the publish) or ``expiresAt`` (a
  timestamp), at most 365 days ahead. Both at once is 400. An expiry that is not later than the time the
  message falls due (``deliverAt``, or the publish when not delayed) is 400 too: such a message could
  never be delivered, which is surely not what its publisher meant.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

import orjson

from app.broker.errors import InvalidRequest

MAX_DELAY_MS = 30 * 86_400_000
MAX_TTL_MS = 365 * 86_400_000
_DURATION = re.compile(r"^([0-9]{1,12})(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# A record's metadata starts with one of these exactly when it carries a due time or an expiry
# (``messages.encode_headers`` writes them first): a delivery pass tells timed records apart without
# parsing anyone's metadata.
TIMED_PREFIXES = (b'{"d":', b'{"x":')

FIELDS = frozenset({"delay", "deliverAt", "ttl", "expiresAt"})


def _name(field: str, index: int | None) -> str:
    return field if index is None else f"messages[{index}].{field}"


def _duration_ms(value: Any, field: str, limit_ms: int, what: str) -> int:
    """A duration string or a number of seconds → milliseconds (0 to ``limit_ms``)."""
    issue = f'expected a duration like "30s" or "500ms", or a number of seconds; {what}'
    if isinstance(value, bool):
        raise InvalidRequest.field(field, issue)
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise InvalidRequest.field(field, f"must not be negative; {what}")
        if value * 1000 > limit_ms:
            raise InvalidRequest.field(field, f"too far ahead; {what}")
        return round(value * 1000)
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        if isinstance(value, str) and value.startswith("-"):
            raise InvalidRequest.field(field, f"must not be negative; {what}")
        raise InvalidRequest.field(field, issue)
    ms = int(match.group(1)) * _UNIT_MS[match.group(2)]
    if ms > limit_ms:
        raise InvalidRequest.field(field, f"too far ahead; {what}")
    return ms


def instant_ms(value: Any, field: str) -> int:
    """ISO-8601 (with a time zone) or epoch milliseconds (a number or a string of digits) → epoch
    milliseconds; a refusal is 400 naming ``field``. The one parser of instants on the wire (publish's
    ``deliverAt``/``expiresAt``, a pause's ``until``, reads' and seeks' timestamps)."""
    if isinstance(value, bool):
        raise InvalidRequest.field(field, "expected ISO-8601 or epoch milliseconds")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return round(value)
    if isinstance(value, str):
        if value.isascii() and value.isdigit() and len(value) <= 16:
            return int(value)
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidRequest.field(field, "expected ISO-8601 or epoch milliseconds") from None
        if parsed.tzinfo is None:
            raise InvalidRequest.field(field, "an ISO-8601 timestamp needs a time zone (e.g. Z)")
        return round(parsed.timestamp() * 1000)
    raise InvalidRequest.field(field, "expected ISO-8601 or epoch milliseconds")


def parse(item: dict[str, Any], now: int, index: int | None = None) -> tuple[int | None, int | None]:
    """``(deliver_at_ms, expires_at_ms)`` of one publish body or batch item (None: not delayed / no
    expiry), checked against ``now``; 400 naming the field (``messages[i].delay`` in a batch)."""
    deliver_at: int | None = None
    if item.get("delay") is not None and item.get("deliverAt") is not None:
        raise InvalidRequest.field(_name("deliverAt", index), "give either delay or deliverAt, not both")
    if item.get("delay") is not None:
        delay = _duration_ms(item["delay"], _name("delay", index), MAX_DELAY_MS, "at most 30d")
        deliver_at = now + delay if delay > 0 else None
    elif item.get("deliverAt") is not None:
        field = _name("deliverAt", index)
        at = instant_ms(item["deliverAt"], field)
        if at > now + MAX_DELAY_MS:
            raise InvalidRequest.field(field, "at most 30 days ahead")
        deliver_at = at if at > now else None  # in the past: now
    expires_at: int | None = None
    if item.get("ttl") is not None and item.get("expiresAt") is not None:
        raise InvalidRequest.field(_name("expiresAt", index), "give either ttl or expiresAt, not both")
    due = deliver_at if deliver_at is not None else now
    if item.get("ttl") is not None:
        field = _name("ttl", index)
        ttl = _duration_ms(item["ttl"], field, MAX_TTL_MS, "more than 0 and at most 365d")
        if ttl <= 0:
            raise InvalidRequest.field(field, "must be more than 0")
        expires_at = now + ttl
        if expires_at <= due:
            raise InvalidRequest.field(field, "the message would expire before it is due (delay)")
    elif item.get("expiresAt") is not None:
        field = _name("expiresAt", index)
        expires_at = instant_ms(item["expiresAt"], field)
        if expires_at > now + MAX_TTL_MS:
            raise InvalidRequest.field(field, "at most 365 days ahead")
        if expires_at <= due:
            raise InvalidRequest.field(
                field, "must be later than the time the message is due (now, or its deliverAt)"
            )
    return deliver_at, expires_at


def is_timed(raw_headers: bytes | None) -> bool:
    """Whether a record's metadata carries a due time or an expiry (no parse)."""
    return raw_headers is not None and raw_headers[:5] in TIMED_PREFIXES


def of_record(raw_headers: bytes | None) -> tuple[int | None, int | None]:
    """``(deliver_at_ms, expires_at_ms)`` of a stored record; ``(None, None)`` without parsing when it
    carries neither."""
    if raw_headers is None or raw_headers[:5] not in TIMED_PREFIXES:
        return None, None
    meta = orjson.loads(raw_headers)
    return meta.get("d"), meta.get("x")
