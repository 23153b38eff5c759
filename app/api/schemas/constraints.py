"""What the server enforces on a value, said in the contract: shared annotated types for request fields and
parameters.

The broker checks these values itself (``app.broker.topics``, ``groups``, ``durations``, ``membership``,
``message_ids``) and answers 400 ``INVALID_REQUEST`` with its own words; the types here only *describe* the
same rules to ``openapi.yaml`` (``json_schema_extra``), so that a client or a fuzzer generated from the
contract knows every value the server takes: pydantic does not check them a second time, and the answers
stay as they were. The name patterns are the broker's own regular expressions; the duration patterns are
built from the broker's ranges (``durations.Range``), so a range changed there changes the contract too
(``tests/test_openapi.py`` fails until ``openapi.yaml`` is regenerated).

What the contract cannot say (a partition below *this* topic's count, a cursor the API returned, a host
that resolves) is listed with its reason in ``bench/fuzz_contract.py``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path
from pydantic import Field

from app.broker import durations, groups, topics
from app.broker.delivery import leases, membership
from app.broker.publishing import MAX_IDEMPOTENCY_KEY, MAX_KEY_BYTES
from app.broker.quotas import Quota
from app.broker.rate_limits import Category, Tier

# The server reads JSON integers as 64 bits (orjson; a larger one is read as a float and refused); the
# contract says the range every JSON parser holds exactly (JavaScript's safe integers), well inside it.
SAFE_INT = 2**53 - 1


def schema(**extra: Any) -> Any:
    """A ``Field`` that adds ``extra`` to the contract only (the broker enforces it)."""
    return Field(json_schema_extra=extra)


def _fixed_width(lo: str, hi: str) -> str:
    """A regex for the digit strings of one width from ``lo`` to ``hi`` (same width, ``lo <= hi``)."""
    if not lo:
        return ""
    if lo[0] == hi[0]:
        return lo[0] + _fixed_width(lo[1:], hi[1:])
    rest = len(lo) - 1
    if lo[1:] == "0" * rest and hi[1:] == "9" * rest:
        return _digits(int(lo[0]), int(hi[0])) + _any(rest)
    parts = [lo[0] + _group(_fixed_width(lo[1:], "9" * rest))]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(_digits(int(lo[0]) + 1, int(hi[0]) - 1) + _any(rest))
    parts.append(hi[0] + _group(_fixed_width("0" * rest, hi[1:])))
    return "(?:" + "|".join(parts) + ")"


def _digits(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"[{lo}-{hi}]"


def _any(count: int) -> str:
    return "" if count == 0 else "[0-9]" if count == 1 else f"[0-9]{{{count}}}"


def _group(regex: str) -> str:
    return regex if regex.startswith("(?:") or "|" not in regex else f"(?:{regex})"


def number_regex(lo: int, hi: int, *, max_digits: int, leading_zeros: bool) -> str:
    """A regex (unanchored, grouped) for the decimal numbers from ``lo`` to ``hi`` written with at most
    ``max_digits`` digits; with ``leading_zeros``, padded forms count too ("007")."""
    alternatives = []
    for width in range(1, max_digits + 1):
        smallest = 0 if leading_zeros else (10 ** (width - 1) if width > 1 else 0)
        start, end = max(lo, smallest), min(hi, 10**width - 1)
        if start > end:
            continue
        alternatives.append(_fixed_width(str(start).zfill(width), str(end).zfill(width)))
    return "(?:" + "|".join(alternatives) + ")"


def duration_pattern(span: durations.Range) -> str:
    """The broker's ``<n>ms|s|m|h|d`` (1-9 digits) within ``span``, as one anchored regex."""
    units = []
    for unit, ms in durations.UNIT_MS.items():
        lo, hi = -(-span.min_ms // ms), span.max_ms // ms
        if lo <= hi:
            units.append(number_regex(lo, hi, max_digits=9, leading_zeros=True) + unit)
    return "^(?:" + "|".join(units) + ")$"


def retention_pattern() -> str:
    """The broker's retention: ``<n>m|h|d`` (no leading zero, up to 7 digits) from 1m to 365d."""
    units = []
    for unit, ms in topics.UNIT_MS.items():
        lo, hi = -(-topics.RETENTION_MIN_MS // ms), topics.RETENTION_MAX_MS // ms
        units.append(number_regex(max(lo, 1), hi, max_digits=7, leading_zeros=False) + unit)
    return "^(?:" + "|".join(units) + ")$"


# Any other request string: every route but publishing refuses the NUL character (app/api/routing.py).
Text = Annotated[str, schema(pattern="^[^\\x00]*$")]

# Names: the broker's own patterns (1-249 characters).
_TOPIC_NAME: dict[str, Any] = {"pattern": topics.NAME.pattern, "maxLength": 249}
_GROUP_NAME: dict[str, Any] = {"pattern": groups.NAME.pattern, "maxLength": 249}
_MEMBER_ID: dict[str, Any] = {"pattern": membership.MEMBER_ID.pattern, "maxLength": 4 + 28}
# A message id is "msg_" and the URL-safe base64 of where the message is; one that decodes to no place is
# refused too, which no pattern can say.
MESSAGE_ID_PATTERN = "^msg_[A-Za-z0-9_-]{1,60}$"
_MESSAGE_ID: dict[str, Any] = {"pattern": MESSAGE_ID_PATTERN, "maxLength": 64}
TopicName = Annotated[str, schema(**_TOPIC_NAME)]
GroupName = Annotated[str, schema(**_GROUP_NAME)]
MemberId = Annotated[str, schema(**_MEMBER_ID)]
MessageId = Annotated[str, schema(**_MESSAGE_ID)]

# The longest string each pattern takes, said as maxLength too: 1-7 digits and a one-letter unit; 1-9
# digits and a unit of up to two letters ("ms").
RETENTION_MAX_LENGTH = 7 + 1
DURATION_MAX_LENGTH = 9 + max(len(unit) for unit in durations.UNIT_MS)
Retention = Annotated[str, schema(pattern=retention_pattern(), maxLength=RETENTION_MAX_LENGTH)]
AckTimeout = Annotated[
    str, schema(pattern=duration_pattern(durations.ACK_TIMEOUT), maxLength=DURATION_MAX_LENGTH)
]
SessionTimeout = Annotated[
    str, schema(pattern=duration_pattern(durations.SESSION_TIMEOUT), maxLength=DURATION_MAX_LENGTH)
]
RetryDelay = Annotated[
    str, schema(pattern=duration_pattern(durations.RETRY_DELAY), maxLength=DURATION_MAX_LENGTH)
]
NackDelayText = Annotated[
    str, schema(pattern=duration_pattern(durations.NACK_DELAY), maxLength=DURATION_MAX_LENGTH)
]
NackDelaySeconds = Annotated[
    float, schema(minimum=durations.NACK_DELAY.min_ms / 1000, maximum=durations.NACK_DELAY.max_ms / 1000)
]
# What the server writes for an instant (app.kit.clock.isoformat_ms): UTC to the millisecond, "…T10:42:18.003Z".
Instant = Annotated[str, schema(format="date-time", maxLength=len("2026-03-28T10:42:18.003Z"))]
# ISO-8601 with a time zone, or epoch milliseconds as digits.
Timestamp = Annotated[str, schema(anyOf=[{"format": "date-time"}, {"pattern": "^[0-9]+$"}])]
StartFrom = Annotated[str, schema(enum=list(membership.START_FROM))]

# Counts and positions.
Partitions = Annotated[int, schema(minimum=1, maximum=topics.MAX_PARTITIONS)]
Partition = Annotated[int, schema(minimum=0, maximum=topics.MAX_PARTITIONS - 1)]
LogOffset = Annotated[int, schema(minimum=0, maximum=SAFE_INT)]
Generation = Annotated[int, schema(minimum=0, maximum=membership.MAX_GENERATION)]
MaxMessages = Annotated[int, schema(minimum=1, maximum=leases.MAX_MESSAGES)]
WaitSeconds = Annotated[float, schema(minimum=0, maximum=leases.MAX_WAIT_SECONDS)]
ExtendSeconds = Annotated[float, schema(minimum=1, maximum=leases.MAX_EXTEND_SECONDS)]
MessageIds = Annotated[list[Text], schema(minItems=1, maxItems=leases.MAX_IDS)]

# How many items an answer's list holds at most: a page, its call's largest ``limit`` (the list routes'
# ``le=``; tests/test_openapi.py holds them equal); a batch's answer, a poll's, an ack's; one per partition.
PAGE_MAX = 1000


def at_most(count: int) -> Any:
    """An answer's list of at most ``count`` items, said in the contract."""
    return schema(maxItems=count)


# The admin API: a tier, and requests per second per category (a positive count each, at least one).
TierName = Annotated[str, schema(enum=[t.value for t in Tier])]
CustomLimits = Annotated[
    dict[str, int],
    schema(
        # Rate limits per category (at least 1) and quotas (at least 0, ``app/broker/quotas.py``).
        propertyNames={"enum": [c.value for c in Category] + [q.value for q in Quota]},
        additionalProperties={"type": "integer", "minimum": 0, "maximum": SAFE_INT},
        minProperties=1,
    ),
]

# Publishing: a key of at most MAX_KEY_BYTES *bytes* of UTF-8 (a length in characters is what JSON Schema
# can say: at most that many, and fewer when they are not ASCII).
MessageKey = Annotated[str, schema(maxLength=MAX_KEY_BYTES)]
# 1-256 printable characters: the contract names the printable ASCII ones (the server takes any printable
# character, which no pattern without Unicode classes can list; HTTP headers are ASCII in practice).
IDEMPOTENCY_KEY_PATTERN = rf"^[\x20-\x7e]{{1,{MAX_IDEMPOTENCY_KEY}}}$"
IdempotencyKey = Annotated[str, schema(pattern=IDEMPOTENCY_KEY_PATTERN, maxLength=MAX_IDEMPOTENCY_KEY)]

# Path parameters (described, not checked by FastAPI: the broker answers a bad one as before).
# A name in a path that is no valid name is refused (no such topic or group, 404; or 400 where a group is
# created by the call).
TopicNamePath = Annotated[str, Path(json_schema_extra=_TOPIC_NAME)]
GroupNamePath = Annotated[str, Path(json_schema_extra=_GROUP_NAME)]
MemberIdPath = Annotated[str, Path(json_schema_extra=_MEMBER_ID)]
MessageIdPath = Annotated[str, Path(json_schema_extra=_MESSAGE_ID)]
PartitionPath = Annotated[int, Path(json_schema_extra={"minimum": 0, "maximum": topics.MAX_PARTITIONS - 1})]
