"""schemathesis hooks of the contract fuzzing (``bench/fuzz_contract.py`` loads them with
``SCHEMATHESIS_HOOKS``): the positive-data check (ST202, "schema-valid request rejected") with the
rejections the contract cannot express, each named with its reason.

``openapi.yaml`` carries every rule of a single value the server enforces (patterns, lengths, ranges,
enums: ``app/api/schemas/constraints.py``). What is left depends on state or on several fields at once, so
no schema can say it; a 400 for one of these fields (the envelope's ``details[].field``) on its operation
is allowed, any other 400 is still a failure. Everything else of schemathesis's check is unchanged.

One rejection holds on every operation: an integer written with a fraction (``3.0``). JSON Schema's
``integer`` includes it; the server reads request bodies strictly (``app/api/schemas/common.py``: wrong
JSON types are refused, never coerced) and takes an integer only as one. A 400 naming a field whose value
in the request is such a number is allowed for that field.
"""

from __future__ import annotations

import json
import re
from typing import Any

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import positive_data_acceptance

_PARTITION = "a partition number below the topic's partition count (the topic's state, not its schema)"
_CURSOR = "an opaque cursor: only one this API returned is taken"
_MESSAGE_ID = "a message id that decodes to a place in this topic (one this API issued), not just its form"

# Not yet in the contract either (app/broker/publishing.py; the contract's headers schema says neither).
_HEADER_NAMES = "at most 64 header names, each 1-256 bytes of UTF-8"
# Any JSON value: no schema of "anything" can bound its nesting, nor every integer somewhere inside it.
_DATA = (
    "any JSON nested at most 64 levels, its integers within 64 bits (larger ones would not be kept exactly)"
)
# operation -> {field as the error names it ("messages[].x" for every item): why the contract cannot say it}
# Delays and TTL (docs/scheduling.md): rules across fields and against the clock, which a schema cannot say.
_TIMED = (
    "a duration or instant at most 30 days ahead (TTL: 365 days), not both of delay and deliverAt (nor of ttl "
    "and expiresAt), and an expiry later than the due time"
)

EXCLUSIONS: dict[str, dict[str, str]] = {
    "POST /v1/topics": {
        "replicas": "the counts the log engine in use offers (the local engine: 1 only; JetStream: 1, 3, 5 "
        "and no more than its servers)",
    },
    "PATCH /v1/topics/{name}": {"partitions": "only an increase over the topic's current count"},
    "GET /v1/topics": {"cursor": _CURSOR},
    "GET /v1/topics/{name}/groups/{group}/dlq": {"cursor": _CURSOR},
    "GET /v1/topics/{name}/groups/{group}/dlq/audit": {"cursor": _CURSOR},
    "GET /v1/alerts/deliveries": {"cursor": _CURSOR},
    "GET /v1/topics/{name}/partitions/{partition}/messages": {
        "partition": _PARTITION,
        "fromOffset": "at most the partition's latest offset (the log's state)",
    },
    "GET /v1/topics/{name}/partitions/{partition}/records": {
        "partition": _PARTITION,
        "fromOffset": "at most the partition's latest offset (the log's state)",
    },
    "GET /v1/topics/{name}/groups/{group}/offsets": {"partition": _PARTITION},
    "POST /v1/topics/{name}/groups/{group}/offsets/seek": {
        "partition": _PARTITION,
        "offset": "exactly one of offset and timestamp (a rule across two fields)",
    },
    "POST /v1/topics/{name}/groups/{group}/offsets/reset": {"partition": _PARTITION},
    "POST /v1/topics/{name}/messages": {
        "partition": _PARTITION,
        "key": "at most 4096 bytes of UTF-8 (JSON Schema counts characters)",
        "headers": _HEADER_NAMES,
        "data": _DATA,
        "delay": _TIMED,
        "deliverAt": _TIMED,
        "ttl": _TIMED,
        "expiresAt": _TIMED,
    },
    "POST /v1/topics/{name}/messages/batch": {
        "messages[].delay": _TIMED,
        "messages[].deliverAt": _TIMED,
        "messages[].ttl": _TIMED,
        "messages[].expiresAt": _TIMED,
        "messages[].partition": _PARTITION,
        "messages[].key": "at most 4096 bytes of UTF-8 (JSON Schema counts characters)",
        "messages[].headers": _HEADER_NAMES,
        "messages[].data": _DATA,
    },
    "GET /v1/topics/{name}/messages/{message_id}": {"messageId": _MESSAGE_ID},
    "POST /v1/topics/{name}/groups/{group}/dlq/replay": {"messageId": _MESSAGE_ID},
    "DELETE /v1/topics/{name}/groups/{group}/dlq/{message_id}": {"messageId": _MESSAGE_ID},
    "PUT /v1/topics/{name}/groups/{group}": {
        "filter": "an expression of the filter grammar (docs/consuming.md, 'Filters'), which no JSON Schema "
        "pattern can state (nested parentheses)",
        "push.url": "required the first time a group gets push (the group's state, not the request's); a URL "
        "whose host resolves, to a public address unless the operator allows internal ones",
        "push.timeout": "a duration of 100ms to 5m",
        "push.rate": "messages per second above 0",
        "deadLetter.breaker.window": "a duration of 1s to 1d",
        "deadLetter.breaker.minAttempts": "an integer of 1 to 1000000 (the schema of an optional integer "
        "leaves the bounds to the server)",
        "deadLetter.breaker.failureRate": "a share above 0 and at most 1",
        "maxInFlight": "an integer of 1 to 100000 or null",
        "rate": "messages per second above 0 (at most 1000000) or null",
    },
    "POST /v1/topics/{name}/groups/{group}/pause": {
        "until": "an instant in the future (a rule against the clock)",
    },
    "PUT /v1/alerts/endpoint": {
        "url": "a URL whose host resolves, to a public address unless the operator allows internal ones",
    },
    "POST /v1/schedules": {
        "cron": "a cron expression whose five fields name real minutes, hours, days and months (a grammar); "
        "exactly one of cron and every (a rule across two fields)",
        "every": "a period of 1s to 366d (the units differ in size); exactly one of cron and every",
        "timezone": "a name of the IANA time zone database",
        "key": "at most 4096 bytes of UTF-8 (JSON Schema counts characters)",
        "headers": _HEADER_NAMES + ", none of them queuecore-schedule or queuecore-scheduled-at",
        "data": _DATA,
    },
    "GET /v1/schedules": {"cursor": _CURSOR},
    # A group's state the contract cannot say of a request: these calls need a push group.
    "POST /v1/topics/{name}/groups/{group}/push/rotate-secret": {
        "push": "a group whose config has push (a push group): the state of the group, not of the request",
    },
    "GET /v1/topics/{name}/groups/{group}/push/attempts": {
        "push": "a group whose config has push (a push group): the state of the group, not of the request",
    },
    "PUT /v1/admin/projects/{project}/tier": {
        "limits": "custom limits for the enterprise tier only (a rule across two fields)",
    },
}

_INDEX = re.compile(r"\[\d+\]")


# Operations whose body holds a message's ``data`` outside the publish path: every route but publishing
# refuses a NUL character anywhere in the body (app/api/routing.py: Postgres text cannot hold one), and no
# schema of "any JSON value" can say that of the strings nested in it. Elsewhere in such a body the
# contract's own patterns say it.
NUL_IN_DATA: dict[str, str] = {
    "POST /v1/schedules": "a schedule's data is stored as text: no NUL character in its strings",
}


def _holds_nul(node: Any) -> bool:
    if isinstance(node, str):
        return "\x00" in node
    if isinstance(node, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in node.items())
    if isinstance(node, list):
        return any(_holds_nul(v) for v in node)
    return False


def _nul_only_in_data(operation: str, answer: bytes | str, body: Any) -> bool:
    if (
        operation not in NUL_IN_DATA
        or not isinstance(body, dict)
        or b"NUL character" not in (answer if isinstance(answer, bytes) else answer.encode())
    ):
        return False
    rest = {k: v for k, v in body.items() if k != "data"}
    return _holds_nul(body.get("data")) and not _holds_nul(rest)


def excused(operation: str, status: int, answer: bytes | str | None, request_body: Any = None) -> bool:
    """Whether a 400 answer refused only what the contract cannot say: fields of ``EXCLUSIONS`` on
    ``operation``, integers written with a fraction in ``request_body``, and a NUL character inside the
    ``data`` of a ``NUL_IN_DATA`` operation."""
    if status != 400 or not answer:
        return False
    if _nul_only_in_data(operation, answer, request_body):
        return True
    try:
        details = json.loads(answer)["error"].get("details") or []
    except (ValueError, KeyError, TypeError, AttributeError):
        return False
    allowed = EXCLUSIONS.get(operation, {})
    fields = set()
    for detail in details:
        field = str(detail.get("field", "")) if isinstance(detail, dict) else ""
        if not _integral_float(request_body, field):
            fields.add(_INDEX.sub("[]", field))
    return bool(details) and fields <= allowed.keys()


_UNION_MEMBER = re.compile(r"\.(str|int|float|bool)$")


def _integral_float(body: Any, field: str) -> bool:
    """Whether ``field`` ("a.b", "a[2].b", "to.str": pydantic names a union's member) holds a number like
    3.0 in ``body``."""
    node = body
    for part in re.findall(r"[^.\[\]]+", _UNION_MEMBER.sub("", field)):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return isinstance(node, float) and node.is_integer()


@schemathesis.check
def positive_data_acceptance_documented(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis's ``positive_data_acceptance``, less the rejections in ``EXCLUSIONS``."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        operation = f"{case.operation.method.upper()} {case.operation.path}"
        if excused(operation, response.status_code, response.content, case.body):
            return None
        raise
