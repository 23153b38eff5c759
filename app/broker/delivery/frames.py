"""The push connection's wire frames: what the server sends (``welcome``, ``message`` / ``messages``,
``rebalance``, ``acked``) and what it accepts from the client (``ack``, ``nack``, ``extend``), as
docs/consuming.md lists them. JSON objects with a ``type`` and their fields at the top level."""

from __future__ import annotations

from typing import Any

import orjson

from app.broker.errors import InvalidRequest

MAX_IN_FLIGHT = 10_000
# The client frames the server takes (app/api/schemas/frames.py describes each one for asyncapi.yaml).
CLIENT_FRAME_TYPES = ("ack", "nack", "extend")


def validate_max_in_flight(value: str | None) -> int:
    """``maxInFlight`` from the query string: 1 to 10,000, default 100."""
    if value is None or value == "":
        return 100
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_IN_FLIGHT:
        raise InvalidRequest.field("maxInFlight", f"must be an integer between 1 and {MAX_IN_FLIGHT}")
    return number


def server_frame(kind: str, **fields: Any) -> bytes:
    """A server frame of ``kind`` with ``fields`` at the top level."""
    return orjson.dumps({"type": kind, **fields})


def messages_frame(messages: list[bytes]) -> bytes:
    """``message`` with the fields at the top level for one, ``messages`` holding a list for several."""
    if len(messages) == 1:
        return b'{"type":"message",' + messages[0][1:]
    return b'{"type":"messages","messages":[' + b",".join(messages) + b"]}"


def parse_client_frame(text: str | bytes) -> dict[str, Any]:
    """A client frame: ``ack``, ``nack`` or ``extend``; anything else is ``InvalidRequest``."""
    try:
        frame = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise InvalidRequest("The frame is not valid JSON.") from None
    if not isinstance(frame, dict) or frame.get("type") not in CLIENT_FRAME_TYPES:
        raise InvalidRequest.field("type", "expected 'ack', 'nack' or 'extend'")
    return frame


def ids_of(frame: dict[str, Any]) -> Any:
    """The message ids a client frame names (``ids``, or one ``id``); not yet validated."""
    if "ids" in frame:
        return frame["ids"]
    if "id" in frame:
        return [frame["id"]]
    raise InvalidRequest.field("id", "required (or 'ids')")
