"""Wire shapes of the pull consumer calls: join, heartbeat, poll, ack, nack, extend."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import (
    ExtendSeconds,
    Generation,
    Instant,
    MaxMessages,
    MemberId,
    MessageIds,
    NackDelaySeconds,
    NackDelayText,
    Partition,
    SessionTimeout,
    StartFrom,
    Text,
    WaitSeconds,
    at_most,
)
from app.api.schemas.messages import Message
from app.broker import topics
from app.broker.delivery import leases


class JoinIn(RequestBody):
    memberId: MemberId | None = Field(
        None, description="Rejoin as this member (after shouldRejoin or eviction)."
    )
    startFrom: StartFrom = Field(
        "latest", description="earliest or latest; applies while the group has no committed offset"
    )
    sessionTimeout: SessionTimeout | None = Field(
        None, examples=["10s"], description="2s to 5m; default: the group's"
    )


class Joined(ResponseBody):
    memberId: MemberId = Field(examples=["csr_a1b2c3d4e5f6g7h8"])
    generationId: int = Field(examples=[3])
    assignments: Annotated[list[Partition], at_most(topics.MAX_PARTITIONS)] = Field(examples=[[0, 2]])
    sessionTimeout: str = Field(examples=["10s"])


class HeartbeatIn(RequestBody):
    generationId: Generation


class HeartbeatOut(ResponseBody):
    generationId: int
    shouldRejoin: bool
    assignments: Annotated[list[Partition], at_most(topics.MAX_PARTITIONS)]


class PollIn(RequestBody):
    memberId: Text
    generationId: Generation
    maxMessages: MaxMessages = Field(100, description="1 to 1000")
    waitSeconds: WaitSeconds = Field(0, description="0 to 30: long poll until a message arrives")


class DeliveredMessage(Message):
    attempt: int = Field(examples=[1], description="1 on first delivery, +1 on every redelivery")
    ackDeadline: Instant = Field(examples=["2026-03-28T10:42:48.003Z"])


class Polled(ResponseBody):
    messages: Annotated[list[DeliveredMessage], at_most(leases.MAX_MESSAGES)]


class AckIn(RequestBody):
    memberId: Text
    generationId: Generation
    ids: MessageIds = Field(description="1 to 1000 message ids")


class NackIn(RequestBody):
    memberId: Text
    generationId: Generation
    id: Text
    reason: Text | None = Field(None, max_length=1024)
    delay: NackDelayText | NackDelaySeconds | None = Field(
        None, examples=["30s"], description="Redeliver after this: a duration string or seconds (default 0)"
    )
    deadLetter: bool = Field(
        False, description="Move the message to the group's DLQ at once (400 when the group has no DLQ)"
    )


class ExtendIn(RequestBody):
    memberId: Text
    generationId: Generation
    ids: MessageIds = Field(description="1 to 1000 message ids")
    seconds: ExtendSeconds = Field(description="The new deadline, from now: 1 to 43200")


class FailedId(ResponseBody):
    id: str
    code: str = Field(examples=["ACK_EXPIRED"])


class Settled(ResponseBody):
    ids: Annotated[list[str], at_most(leases.MAX_IDS)]
    failed: Annotated[list[FailedId], at_most(leases.MAX_IDS)]
