from .._models import BaseModel
from .topic import Topic

__all__ = ["PartitionDetail", "TopicDetail"]


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


class TopicDetail(Topic):
    """A topic with per-partition offsets and sizes (``topics.describe``)."""

    partition_details: list[PartitionDetail]
