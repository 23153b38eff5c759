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
    replicas: int = 1
    """How many copies of each message the server keeps: 1, 3 or 5, fixed at creation (1 when a server
    that predates the field answers)."""
    status: str
    """``active``."""
    created_at: Timestamp
