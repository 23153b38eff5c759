from typing import Optional

from .._models import BaseModel, Timestamp

__all__ = ["BatchItem", "BatchResult"]


class BatchItem(BaseModel):
    """Where one message of a batch landed."""

    id: str
    offset: int
    partition: int
    timestamp: Timestamp
    deliver_at: Optional[Timestamp] = None
    """When consumer groups receive it (``None``: at once, not delayed)."""
    expires_at: Optional[Timestamp] = None
    """When it expires undelivered (``None``: never)."""
    replayed: Optional[bool] = None
    """True for an item whose idempotency key had been seen (it was not written again)."""


class BatchResult(BaseModel):
    """The answer to a batch publish: every message was written atomically, in the order given."""

    count: int
    latency: int
    """Server-side milliseconds."""
    durability: str
    messages: list[BatchItem]
