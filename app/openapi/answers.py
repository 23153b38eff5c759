"""What the contract says beside each route's own answers: the answers every route can give, the
rate-limit headers of the limited ones, the tags, and the integer formats.

Each addition states something the server really does (the OWASP rules of the outside checkers ask for
them, ``tests/test_outside_checkers.py``); what does not apply is listed with its reason in
``tools/checkers/accepted-findings.yaml`` rather than described here.
"""

from __future__ import annotations

from typing import Any

from app.api.schemas.constraints import SAFE_INT
from app.broker.rate_limits import Category
from app.errors import responses

# The limiter's window for every API charge (app/api/deps.py ``charge_state``: ``w=1``).
_WINDOW_SECONDS = 1
_CATEGORY = "(?:" + "|".join(c.value for c in Category) + ")"
_LONGEST_CATEGORY = max(len(c.value) for c in Category)
_DIGITS = len(str(SAFE_INT))

_WHEN = (
    " Sent on every answer once the key is authenticated and charged: not on a 401, nor on a request "
    "refused before it is read (413 by its Content-Length, 408, a NUL in the path or query)."
)

HEADERS: dict[str, dict[str, Any]] = {
    "RateLimit-Limit": {
        "description": "Requests per second the key may make in this route's category." + _WHEN,
        "schema": {"type": "integer", "minimum": 1, "maximum": SAFE_INT},
    },
    "RateLimit-Remaining": {
        "description": "Requests left in the current one-second window." + _WHEN,
        "schema": {"type": "integer", "minimum": 0, "maximum": SAFE_INT},
    },
    "RateLimit-Reset": {
        "description": "Whole seconds until the window frees a request." + _WHEN,
        "schema": {"type": "integer", "minimum": 0, "maximum": _WINDOW_SECONDS},
    },
    "RateLimit-Policy": {
        "description": "The current IETF draft's policy: the category, its limit (q) and window (w)." + _WHEN,
        "schema": {
            "type": "string",
            "pattern": f'^"{_CATEGORY}";q=[0-9]{{1,{_DIGITS}}};w=1$',
            "maxLength": _LONGEST_CATEGORY + 2 + 3 + _DIGITS + 4,
        },
    },
    "RateLimit": {
        "description": "The current IETF draft's state: the category, requests remaining (r) and seconds to "
        "reset (t)." + _WHEN,
        "schema": {
            "type": "string",
            "pattern": f'^"{_CATEGORY}";r=[0-9]{{1,{_DIGITS}}};t=[0-9]$',
            "maxLength": _LONGEST_CATEGORY + 2 + 3 + _DIGITS + 4,
        },
    },
}
RETRY_AFTER: dict[str, Any] = {
    "description": "Whole seconds to wait before the next request in this category.",
    "schema": {"type": "integer", "minimum": 1, "maximum": _WINDOW_SECONDS},
}

TAGS: dict[str, str] = {
    "health": "Whether this API process and its stores can serve (no key).",
    "topics": "Create, list, change and delete a project environment's topics.",
    "messages": "Publish messages and read them back by id or by partition and offset.",
    "groups": "Consumer groups of a topic: their settings, lag and stopped-group offset resets.",
    "offsets": "A consumer group's committed positions: read, seek and reset while consuming.",
    "consumers": "The pull consumer: join a group, heartbeat, poll, ack, nack, extend and leave.",
    "dlq": "A group's dead letters: list, replay, delete and the audit of what was done.",
    "push": "Push groups: rotate the signing secret of a group that POSTs its messages to a URL, and its recent attempts.",
    "alerts": "The project's alert webhook endpoint and its delivery log.",
    "schedules": "Publish a message to a topic on a cron expression or a fixed period; each run's message.",
    "tokens": "Short-lived tokens for the WebSocket push consumer.",
    "admin": "The operators' API (QUEUECORE_ADMIN_TOKEN): a project's tier and limits.",
}


def add_common_answers(schema: dict[str, Any], limited: set[tuple[str, str]]) -> None:
    """Every operation answers 400 (a NUL in its path or query is refused before any route runs) and 500
    (an unhandled error, without internals); the ``limited`` ones (path, method) carry the rate-limit
    headers on their 2xx and 4xx answers but 401, and ``Retry-After`` on their 429."""
    components = schema.setdefault("components", {})
    header_refs = components.setdefault("headers", {})
    header_refs.update(HEADERS)
    header_refs["Retry-After"] = RETRY_AFTER
    common = {**responses("INVALID_REQUEST"), **responses("INTERNAL_ERROR")}
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            answers = operation.setdefault("responses", {})
            for status, entry in common.items():
                if str(status) not in answers:
                    answers[str(status)] = _envelope(entry)
            if (path, method) not in limited:
                continue
            for status, answer in answers.items():
                if status.startswith(("2", "4")) and status != "401":
                    headers = answer.setdefault("headers", {})
                    headers.update({name: {"$ref": f"#/components/headers/{name}"} for name in HEADERS})
                    if status == "429":
                        headers["Retry-After"] = {"$ref": "#/components/headers/Retry-After"}
    answers_in_order(schema)


def _envelope(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "description": entry["description"],
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/ErrorEnvelope"},
                "examples": entry["content"]["application/json"]["examples"],
            }
        },
    }


def answers_in_order(schema: dict[str, Any]) -> None:
    """Each operation's answers by status, so the document reads (and diffs) the same way every time."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            answers = operation.get("responses", {})
            operation["responses"] = dict(sorted(answers.items()))


_INT32 = (-(2**31), 2**31 - 1)


def add_integer_formats(node: Any) -> None:
    """Every integer says its width: ``int32`` when its bounds fit in 32 bits, ``int64`` otherwise (the
    server reads and writes JSON integers as 64 bits)."""
    if isinstance(node, dict):
        if node.get("type") == "integer" and "format" not in node:
            low = node.get("minimum", node.get("exclusiveMinimum"))
            high = node.get("maximum", node.get("exclusiveMaximum"))
            if "enum" in node:
                low, high = min(node["enum"]), max(node["enum"])
            fits = low is not None and high is not None and _INT32[0] <= low and high <= _INT32[1]
            node["format"] = "int32" if fits else "int64"
        for value in node.values():
            add_integer_formats(value)
    elif isinstance(node, list):
        for value in node:
            add_integer_formats(value)


def add_tags(schema: dict[str, Any]) -> None:
    """Declare every tag the operations use, with what it groups."""
    used: list[str] = []
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            used.extend(t for t in operation.get("tags", ()) if t not in used)
    schema["tags"] = [{"name": tag, "description": TAGS[tag]} for tag in used]
