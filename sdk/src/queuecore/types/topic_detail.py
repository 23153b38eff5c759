from typing import Optional

from .._models import BaseModel
from .topic import Topic

__all__ = ["PartitionDetail", "Replica", "TopicDetail"]


class Replica(BaseModel):
    """One copy of a partition."""

    server: str
    """The server holding it."""
    leader: bool
    """Whether this copy takes the partition's writes."""
    current: bool
    """Whether it has everything the leader acknowledged."""
    zone: Optional[str] = None
    """The availability zone of its server (a NATS server's ``az:<zone>`` tag; on a single-node server,
    the zone it is configured with); None when not known."""
    lag: Optional[int] = None
    """Operations it has yet to apply to catch up with the leader (0 for the leader and a caught-up copy);
    None when the leader cannot reach it."""


class PartitionDetail(BaseModel):
    """Offsets and size of one partition."""

    id: int
    """The partition number, from 0."""
    earliest_offset: int
    """The first retained offset."""
    latest_offset: int
    """The next offset to be written."""
    messages: int
    """``latest_offset - earliest_offset``."""
    bytes: int
    """The partition's size on disk."""
    replicas: list[Replica]
    """Where the partition's copies live (server and zone), the leader first (one on a single-node server)."""


class TopicDetail(Topic):
    """A topic with per-partition offsets and sizes (``topics.describe``)."""

    partition_details: list[PartitionDetail]
