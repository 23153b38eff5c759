"""Wire shapes of the dead-letter queue calls."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import Instant, MessageId, Partition, at_most
from app.broker import dead_letters


class FailedAttempt(ResponseBody):
    at: Instant
    reason: str = Field(examples=["ack timeout"])


class DeadLetterEntry(ResponseBody):
    messageId: MessageId = Field(examples=["msg_x8k2n4"])
    data: Any
    key: str | None
    headers: dict[str, str]
    partition: Partition
    offset: int
    reason: str = Field(examples=["ack timeout"])
    retryCount: int = Field(description="retries made before the message was dead-lettered")
    failedAt: Instant
    firstFailedAt: Instant = Field(description="when its first failed attempt failed")
    attempts: Annotated[list[FailedAttempt], at_most(102)] = Field(
        description="every failed attempt (a nack, an ack timeout, expiry), oldest first"
    )


class DeadLetterPage(ResponseBody):
    data: Annotated[list[DeadLetterEntry], at_most(dead_letters.MAX_PAGE)]
    total: int = Field(description="the DLQ's depth")
    nextCursor: str | None


class ReplayIn(RequestBody):
    messageId: MessageId


class Replayed(ResponseBody):
    messageId: MessageId
    replayed: Literal[True]


class ReplayAllIn(RequestBody):
    rate: float | None = Field(None, gt=0, le=100_000, description="at most this many messages per second")


class ReplayedAll(ResponseBody):
    replayed: int


class Actor(ResponseBody):
    type: Literal["key", "user"]
    id: str


class AuditEntry(ResponseBody):
    id: str
    action: Literal["replay", "replay_all", "delete"]
    messageId: MessageId | None = None
    count: int | None = None
    actor: Actor
    at: Instant


class AuditPage(ResponseBody):
    data: Annotated[list[AuditEntry], at_most(dead_letters.MAX_PAGE)]
    nextCursor: str | None
