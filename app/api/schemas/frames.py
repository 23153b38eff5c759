"""Wire shapes of the push WebSocket (``GET /v1/topics/{name}/consume``): every frame either side sends,
the close codes, and the refusals at the upgrade — the one source ``asyncapi.yaml`` is generated from
(``python -m app.asyncapi``, ``make asyncapi``).

The server does not build frames through these models: the delivery path renders them with orjson from
the stored bytes (``app/broker/delivery/frames.py``, ``push.py``, ``acks.py``; ``app/api/ws.py`` for
``error``), and parses client frames itself. These models *describe* the same shapes, and
``tests/api/test_ws_asyncapi.py`` checks every frame a real server sends and takes against the generated
document. Adding a frame is one class here and its entry in ``SERVER_FRAMES`` or ``CLIENT_FRAMES``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Annotated, Any, ClassVar, Literal, NamedTuple

from pydantic import ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import (
    ExtendSeconds,
    MessageId,
    NackDelaySeconds,
    NackDelayText,
    Text,
    schema,
)
from app.api.schemas.consumers import DeliveredMessage, FailedId
from app.broker.delivery.leases import MAX_IDS
from app.broker.delivery.push import FRAME_MAX
from app.errors import ErrorBody

# 1 to 1000 message ids (an id that names no message of the topic fails alone, in ``acked``).
MessageIds = Annotated[list[MessageId], schema(minItems=1, maxItems=MAX_IDS)]

_MEMBER_ID = "csr_a1b2c3d4e5f6g7h8"
_MESSAGE_ID = "msg_aaaaaaaaaaaaaaaaaaaaaaacqa"
_DELIVERED = {
    "id": _MESSAGE_ID,
    "topic": "order.events",
    "partition": 2,
    "offset": 14829,
    "key": "customer-42",
    "headers": {"source": "checkout"},
    "data": {"type": "order.created", "orderId": "ord_92jf8x", "amount": 9900},
    "timestamp": "2026-03-28T10:42:18.003Z",
    "deliverAt": None,
    "expiresAt": None,
    "attempt": 1,
    "ackDeadline": "2026-03-28T10:42:48.003Z",
}


class ServerFrame(ResponseBody):
    """A frame the server sends. Clients ignore fields they do not know (more may be added)."""

    summary: ClassVar[str]
    example: ClassVar[dict[str, Any]]


class ClientFrame(RequestBody):
    """A frame the client sends. The server ignores fields it does not know; these are all it reads."""

    summary: ClassVar[str]
    example: ClassVar[dict[str, Any]]
    # What the server answers this frame with: one ``acked``, or an ``error`` when it is malformed.
    answers: ClassVar[tuple[type[ServerFrame], ...]]


class WelcomeFrame(ServerFrame):
    """The first frame after the upgrade: the connection is a member of the group (created if needed)
    and receives the partitions in ``assignments``. Deliveries may follow at once."""

    summary: ClassVar[str] = "You are a member of the group"
    example: ClassVar[dict[str, Any]] = {
        "type": "welcome",
        "memberId": _MEMBER_ID,
        "generationId": 3,
        "assignments": [0, 2],
    }
    type: Literal["welcome"]
    memberId: str = Field(examples=[_MEMBER_ID], description="This member's id (csr_…).")
    generationId: int = Field(examples=[3], description="The group's generation, bumped at every rebalance.")
    assignments: list[int] = Field(examples=[[0, 2]], description="The partitions this member owns.")


class MessageFrame(ServerFrame, DeliveredMessage):
    """One delivery: the message's fields at the top level, as a pull consumer's poll answers them. It is
    the connection's to ack, nack or extend until ``ackDeadline``; at most ``maxInFlight`` are outstanding."""

    summary: ClassVar[str] = "One delivery"
    example: ClassVar[dict[str, Any]] = {"type": "message", **_DELIVERED}
    type: Literal["message"]


class MessagesFrame(ServerFrame):
    """Several deliveries at once (what one pass of the delivery loop leased: at most half of
    ``maxInFlight`` a frame, and never more than ``maxItems``). Clients must accept both ``message`` and
    ``messages``."""

    summary: ClassVar[str] = "Several deliveries at once"
    example: ClassVar[dict[str, Any]] = {
        "type": "messages",
        "messages": [_DELIVERED, {**_DELIVERED, "id": "msg_aaaaaaaaaaaaaaaaaaaaaaacqe", "offset": 14830}],
    }
    type: Literal["messages"]
    messages: list[DeliveredMessage] = Field(min_length=2, max_length=FRAME_MAX)


class RebalanceFrame(ServerFrame):
    """The group rebalanced (a member joined, left or was evicted, or the topic gained partitions):
    delivery follows the new assignment. Messages of partitions that moved away stay the connection's to
    ack until their deadline."""

    summary: ClassVar[str] = "The group rebalanced"
    example: ClassVar[dict[str, Any]] = {"type": "rebalance", "generationId": 4, "assignments": [0]}
    type: Literal["rebalance"]
    generationId: int = Field(examples=[4])
    assignments: list[int] = Field(examples=[[0]])


class DrainingFrame(ServerFrame):
    """This API node is shutting down (a deploy): the connection closes next with 1012. Reconnect, to
    another node behind the same address; the member's partitions go to the other members at once, and
    messages it held but did not ack are delivered again (acks already sent are kept)."""

    summary: ClassVar[str] = "The node is shutting down; reconnect"
    example: ClassVar[dict[str, Any]] = {"type": "draining"}
    type: Literal["draining"]


class AckedFrame(ServerFrame):
    """The answer to one ``ack``, ``nack`` or ``extend`` frame, once durable: the ids it settled, and per
    id why not (``ACK_EXPIRED``, ``MESSAGE_NOT_FOUND``, ``INVALID_REQUEST``), in the order named."""

    summary: ClassVar[str] = "The answer to an ack, nack or extend"
    example: ClassVar[dict[str, Any]] = {
        "type": "acked",
        "ids": [_MESSAGE_ID],
        "failed": [{"id": "msg_bogus", "code": "MESSAGE_NOT_FOUND"}],
    }
    type: Literal["acked"]
    ids: list[str]
    failed: list[FailedId]


class ErrorFrame(ServerFrame):
    """The error envelope's body, in a frame: a malformed client frame (``INVALID_REQUEST``; the
    connection stays open), or the end of the member, followed by a close — ``TOPIC_NOT_FOUND`` when its
    topic is deleted (1000), ``RATE_LIMIT_EXCEEDED`` past the client frames allowed in a second (1008)."""

    summary: ClassVar[str] = "A refused frame, or why the connection ends"
    example: ClassVar[dict[str, Any]] = {
        "type": "error",
        "error": {
            "code": "INVALID_REQUEST",
            "message": "Invalid value for 'type': expected 'ack', 'nack' or 'extend'.",
            "status": 400,
            "requestId": "req_7x9k2m4n",
            "details": [{"field": "type", "issue": "expected 'ack', 'nack' or 'extend'"}],
        },
    }
    type: Literal["error"]
    error: ErrorBody


class AckFrame(ClientFrame):
    """Acknowledge messages held by this connection: ``id`` for one, ``ids`` for up to 1000 (batch acks
    for throughput). Answered by one ``acked``."""

    summary: ClassVar[str] = "Acknowledge"
    example: ClassVar[dict[str, Any]] = {"type": "ack", "ids": [_MESSAGE_ID]}
    answers: ClassVar[tuple[type[ServerFrame], ...]] = (AckedFrame, ErrorFrame)
    model_config = ConfigDict(json_schema_extra={"anyOf": [{"required": ["id"]}, {"required": ["ids"]}]})
    type: Literal["ack"]
    id: MessageId | SkipJsonSchema[None] = Field(
        None, description="One message id (ignored when `ids` is given)."
    )
    ids: MessageIds | SkipJsonSchema[None] = Field(None, description="1 to 1000 message ids.")


class NackFrame(ClientFrame):
    """Give a message back: redelivered at once, or after ``delay``. A failed attempt (the group's retry
    budget and DLQ apply). Answered by one ``acked``."""

    summary: ClassVar[str] = "Give a message back"
    example: ClassVar[dict[str, Any]] = {
        "type": "nack",
        "id": _MESSAGE_ID,
        "reason": "timeout",
        "delay": "30s",
    }
    answers: ClassVar[tuple[type[ServerFrame], ...]] = (AckedFrame, ErrorFrame)
    type: Literal["nack"]
    id: MessageId
    reason: Text | None = Field(
        None, description="Kept with the failed attempt (the DLQ's history); its first 1024 characters."
    )
    delay: NackDelayText | NackDelaySeconds | None = Field(
        None, examples=["30s"], description="Redeliver after this: a duration string or seconds, up to 12h."
    )
    deadLetter: bool | None = Field(
        None,
        description="true: move the message to the group's DLQ at once, whatever retries remain "
        "(an `error` frame, INVALID_REQUEST, when the group has no DLQ).",
    )


class ExtendFrame(ClientFrame):
    """Move the ack deadline of held messages to ``seconds`` from now. Answered by one ``acked``."""

    summary: ClassVar[str] = "Move the ack deadline"
    example: ClassVar[dict[str, Any]] = {"type": "extend", "ids": [_MESSAGE_ID], "seconds": 120}
    answers: ClassVar[tuple[type[ServerFrame], ...]] = (AckedFrame, ErrorFrame)
    model_config = ConfigDict(json_schema_extra={"anyOf": [{"required": ["id"]}, {"required": ["ids"]}]})
    type: Literal["extend"]
    id: MessageId | SkipJsonSchema[None] = Field(
        None, description="One message id (ignored when `ids` is given)."
    )
    ids: MessageIds | SkipJsonSchema[None] = Field(None, description="1 to 1000 message ids.")
    seconds: ExtendSeconds = Field(description="The new deadline, from now: 1 to 43200.")


SERVER_FRAMES: tuple[type[ServerFrame], ...] = (
    WelcomeFrame,
    MessageFrame,
    MessagesFrame,
    RebalanceFrame,
    AckedFrame,
    DrainingFrame,
    ErrorFrame,
)
CLIENT_FRAMES: tuple[type[ClientFrame], ...] = (AckFrame, NackFrame, ExtendFrame)


def frame_type(frame: type[ServerFrame | ClientFrame]) -> str:
    """The ``type`` a frame class carries (its one ``Literal``)."""
    (kind,) = frame.model_fields["type"].annotation.__args__  # type: ignore[union-attr]
    return str(kind)


class CloseCode(IntEnum):
    """The close codes the server ends a push connection with (RFC 6455 §7.4)."""

    NORMAL = 1000
    INVALID_TEXT = 1007
    POLICY = 1008
    TOO_BIG = 1009
    INTERNAL = 1011
    RESTART = 1012


# What each close code means on this endpoint (the WebSocket protocol, app/kit/websocket_protocol.py,
# sends 1007, 1009, 1011 on silence, and 1012 itself; the endpoint the rest).
CLOSE_CODES: dict[CloseCode, str] = {
    CloseCode.NORMAL: "Normal closure: the client closed, or the member ended after an `error` frame "
    "(`TOPIC_NOT_FOUND`: its topic was deleted).",
    CloseCode.INVALID_TEXT: "A text frame that is not valid UTF-8.",
    CloseCode.POLICY: "After an `error` frame: more client frames in one second than the server allows "
    "(`ws_max_frames_per_second`, `RATE_LIMIT_EXCEEDED`; batch acks with `ids`); the connection's key was "
    "revoked or its project deleted (`INVALID_API_KEY`, within a second, on every node); or its tier's "
    "cap on push connections was lowered past it (`RATE_LIMIT_EXCEEDED`, the newest connections first).",
    CloseCode.TOO_BIG: "A client frame larger than the server allows (`ws_max_frame_bytes`).",
    CloseCode.INTERNAL: "Nothing heard from the client (no frame, no pong) for its group's "
    "`sessionTimeout` (the server pings it a few times within that), or an unexpected server failure.",
    CloseCode.RESTART: "The server is shutting down (after a `draining` frame when it drains on SIGTERM); "
    "reconnect: another API node, or this one once restarted, takes the member's partitions.",
}


class Refusal(NamedTuple):
    """An HTTP answer that refuses the upgrade (in the error envelope), with an example of it."""

    code: str
    description: str
    message: str
    details: list[dict[str, str]] | None = None


# The HTTP answers that refuse the upgrade, by status.
REFUSALS: dict[int, Refusal] = {
    400: Refusal(
        "INVALID_REQUEST",
        "A missing or bad `group`, `startFrom` or `maxInFlight` (`details` names it), or a NUL character in "
        "the path or query.",
        "Invalid value for 'startFrom': must be 'earliest' or 'latest'",
        [{"field": "startFrom", "issue": "must be 'earliest' or 'latest'"}],
    ),
    401: Refusal(
        "INVALID_API_KEY",
        "A missing, malformed or revoked key; a malformed, expired or revoked token, or one issued for "
        "another topic or group.",
        "The API key is missing, malformed, or has been revoked.",
    ),
    404: Refusal(
        "TOPIC_NOT_FOUND",
        "No such topic in the key's environment.",
        "The topic 'order.events' does not exist in the current environment.",
    ),
    429: Refusal(
        "RATE_LIMIT_EXCEEDED",
        "Opening a connection is one `consume` request of the key's rate limit; or the key has "
        "`ws_max_connections_per_key` push connections open on this API node already. With `Retry-After`.",
        "Rate limit of 50 consume requests per second exceeded; retry after 1 second.",
    ),
    # The HTTP protocol's own (app/kit/http_protocol.py), before the app sees the upgrade.
    408: Refusal(
        "INVALID_REQUEST",
        "The request line and headers were not complete within `http_head_timeout_seconds`.",
        "The request head was not complete within 10 s.",
    ),
    431: Refusal(
        "INVALID_REQUEST",
        "The request line and headers are larger than `http_max_head_bytes`.",
        "The request line and headers exceed 64 KiB.",
    ),
    503: Refusal(
        "SERVICE_UNAVAILABLE",
        "A store the upgrade needs (metadata, rate limits) is unavailable; retry.",
        "The metadata store is unavailable.",
    ),
}
