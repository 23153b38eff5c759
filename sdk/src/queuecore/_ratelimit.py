"""The rate-limit state an answer carries.

The server sends, on every response of a limited route, the IETF draft's structured fields
(draft-ietf-httpapi-ratelimit-headers)::

    RateLimit-Policy: "publish";q=100;w=1
    RateLimit: "publish";r=37;t=1

and, beside them, the older ``RateLimit-Limit`` / ``RateLimit-Remaining`` / ``RateLimit-Reset``. The
structured fields are read when present, else the older ones. Every QueueCore SDK reads them the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["RateLimit", "parse_rate_limit"]


@dataclass(frozen=True)
class RateLimit:
    """The key's rate-limit state for one category, as an answer reported it."""

    policy: str | None
    """The policy (the limit's category: ``"publish"``, ``"consume"`` or ``"admin"``); ``None`` when only
    the older fields were sent."""
    limit: int | None
    """Requests allowed per window (``q``, or ``RateLimit-Limit``)."""
    remaining: int | None
    """Requests left in the current window (``r``, or ``RateLimit-Remaining``)."""
    reset: float | None
    """Seconds until the window resets (``t``, or ``RateLimit-Reset``)."""
    window: float | None
    """The window's length in seconds (``w``); ``None`` when not sent."""


def _split(text: str, sep: str) -> list[str]:
    """``text`` split on ``sep`` outside double quotes (structured-field strings may hold either)."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == sep and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts]


def _unquote(item: str) -> str:
    if len(item) >= 2 and item[0] == item[-1] == '"':
        return item[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return item


def _members(value: str) -> list[tuple[str, dict[str, str]]]:
    """A structured-field list of items with parameters: ``[(name, {param: value})]``."""
    members = []
    for member in _split(value, ","):
        if not member:
            continue
        name, *params = _split(member, ";")
        parsed: dict[str, str] = {}
        for param in params:
            key, _, raw = param.partition("=")
            parsed[key.strip().lower()] = raw.strip()
        members.append((_unquote(name), parsed))
    return members


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number >= 0 and number != float("inf") else None


def _integer(value: str | None) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None


def parse_rate_limit(headers: Mapping[str, str]) -> RateLimit | None:
    """The rate-limit state of an answer's headers (any case-insensitive mapping, such as
    ``httpx.Headers``); ``None`` when the answer carries none."""
    structured = headers.get("ratelimit")
    if structured:
        members = _members(structured)
        if members:
            name, params = members[0]
            policy_params: dict[str, str] = {}
            for policy_name, found in _members(headers.get("ratelimit-policy") or ""):
                if policy_name == name:
                    policy_params = found
                    break
            limit = (
                _integer(policy_params.get("q"))
                if policy_params
                else _integer(headers.get("ratelimit-limit"))
            )
            return RateLimit(
                policy=name or None,
                limit=limit,
                remaining=_integer(params.get("r")),
                reset=_number(params.get("t")),
                window=_number(policy_params.get("w")),
            )
    old_limit = headers.get("ratelimit-limit")
    old_remaining = headers.get("ratelimit-remaining")
    old_reset = headers.get("ratelimit-reset")
    if old_limit is None and old_remaining is None and old_reset is None:
        return None
    return RateLimit(
        policy=None,
        limit=_integer(old_limit),
        remaining=_integer(old_remaining),
        reset=_number(old_reset),
        window=None,
    )
