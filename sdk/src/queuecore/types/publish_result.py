from typing import Optional

from .._models import BaseModel, Timestamp

__all__ = ["PublishResult"]


class PublishResult(BaseModel):
    """Where a published message landed. Answered once the message is durable."""

    id: str
    """``msg_…``; it encodes topic, partition and offset."""
    offset: int
    partition: int
    timestamp: Timestamp
    latency: int
    """Server-side milliseconds."""
    durability: str
    """``fsync`` or ``replicated:<n>``: on what terms the message is durable."""
    deliver_at: Optional[Timestamp] = None
    """When consumer groups receive it (``None``: at once, not delayed)."""
    expires_at: Optional[Timestamp] = None
    """When it expires undelivered (``None``: never)."""

    replayed: bool = False
    """True when the idempotency key had been seen: nothing was appended, this is the original result."""
