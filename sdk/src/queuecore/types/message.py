from typing import Any, Optional

from pydantic import Field

from .._models import BaseModel, Timestamp

__all__ = ["Message", "MessagePage"]


class Message(BaseModel):
    """A stored message, as read by id or from a partition."""

    id: str
    topic: str
    partition: int
    offset: int
    key: Optional[str] = None
    headers: dict[str, str] = Field(default_factory=dict)
    data: Any = None
    """Any JSON value, as published (``None`` for a published ``null``)."""
    timestamp: Timestamp
    deliver_at: Optional[Timestamp] = None
    """When consumer groups receive it (``None``: at once, not delayed)."""
    expires_at: Optional[Timestamp] = None
    """When it expires undelivered (``None``: never)."""


class MessagePage(BaseModel):
    """A run of messages from one partition (``messages.read``)."""

    data: list[Message]
    next_offset: int
    """The offset to read from next."""
    earliest_offset: int
    """The first retained offset of the partition (reads below it start there)."""
