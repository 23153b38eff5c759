from .._models import BaseModel, Timestamp

__all__ = ["Topic"]


class Topic(BaseModel):
    """A topic: a named, partitioned log with a retention and a delivery guarantee."""

    id: str
    """``top_…``"""
    name: str
    partitions: int
    """How many partitions it has (1–256; can be increased)."""
    retention: str
    """How long messages are kept: ``<n>m``, ``<n>h`` or ``<n>d``."""
    delivery: str
    """``exactly-once`` or ``at-least-once``."""
    status: str
    """``active``."""
    created_at: Timestamp
