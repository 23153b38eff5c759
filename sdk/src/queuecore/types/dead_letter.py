from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from .._models import BaseModel, Timestamp

__all__ = [
    "AuditActor",
    "AuditEntry",
    "AuditPage",
    "DeadLetterMessage",
    "DeadLetterPage",
    "FailedAttempt",
    "ReplayAllResult",
    "ReplayResult",
]


class FailedAttempt(BaseModel):
    """One failed delivery attempt of a dead letter: a nack (its reason), an ack timeout, expiry."""

    at: Timestamp
    reason: str


class DeadLetterMessage(BaseModel):
    """A message in a group's dead-letter queue: the original message and why it failed."""

    message_id: str
    """The original message id (``msg_…``); replays deliver it under this id."""
    data: Any
    key: Optional[str] = None
    headers: dict[str, str]
    partition: int
    offset: int
    reason: str
    """The last failure: a nack's reason, or ``"ack timeout"``."""
    retry_count: int
    """Retries made before it was dead-lettered."""
    failed_at: Timestamp
    first_failed_at: Optional[Timestamp] = None
    """When its first failed attempt failed."""
    attempts: list[FailedAttempt] = Field(default_factory=list)
    """Every failed attempt, oldest first (the last one is ``reason`` at ``failed_at``)."""


class DeadLetterPage(BaseModel):
    """One page of ``dlq.inspect``: oldest dead letter first."""

    data: list[DeadLetterMessage]
    total: int
    """How many messages the DLQ holds."""
    next_cursor: Optional[str] = None


class ReplayResult(BaseModel):
    message_id: str
    replayed: bool


class ReplayAllResult(BaseModel):
    replayed: int
    """How many messages went back to the group."""


class AuditActor(BaseModel):
    type: Literal["key", "user"]
    id: str


class AuditEntry(BaseModel):
    """A replay or delete in a DLQ: who, what, when."""

    id: str
    action: Literal["replay", "replay_all", "delete"]
    message_id: Optional[str] = None
    count: Optional[int] = None
    actor: AuditActor
    at: Timestamp


class AuditPage(BaseModel):
    data: list[AuditEntry]
    next_cursor: Optional[str] = None
