from .._models import BaseModel

__all__ = ["Offset", "PartitionOffset", "SeekResult"]


class Offset(BaseModel):
    """A group's position on one partition (``offsets.get(..., partition=n)``)."""

    current: int
    """Everything below it is acked."""
    latest: int
    """The next offset to be written."""
    lag: int
    """``latest - current``."""


class PartitionOffset(Offset):
    """A group's position on one partition, naming the partition (``offsets.get`` without ``partition``)."""

    partition: int


class SeekResult(BaseModel):
    """Where ``offsets.seek`` moved the partition."""

    partition: int
    offset: int
