from typing import Optional

from .._models import BaseModel

__all__ = [
    "ConsumerGroup",
    "ConsumerGroupConfig",
    "ConsumerGroupPartition",
    "ConsumerGroupSummary",
    "DeadLetter",
    "PartitionPosition",
]


class DeadLetter(BaseModel):
    """A group's dead-letter queue: after ``max_retries`` failed attempts a message moves to ``<topic>.dlq``.

    Also the ``dead_letter=`` parameter of ``consumer_groups.update``; unset fields keep the server's
    value (defaults: 5 retries, ``30s`` apart, alert at 100).
    """

    max_retries: Optional[int] = None
    """0 to 100."""
    retry_delay: Optional[str] = None
    """``0s`` to ``1h``."""
    alert_threshold: Optional[int] = None
    """Dead letters that trigger an alert."""


class ConsumerGroupConfig(BaseModel):
    """A group's settings."""

    ack_timeout: str
    """How long a delivered message may stay unacked before redelivery (``1s`` to ``12h``)."""
    session_timeout: str
    """How long a member may go without a heartbeat before it is dropped (``2s`` to ``5m``)."""
    dead_letter: Optional[DeadLetter] = None
    """``None`` when the group has no dead-letter queue."""


class ConsumerGroupSummary(BaseModel):
    """One group of ``consumer_groups.list``."""

    name: str
    consumers: int
    """Live members."""
    lag: int
    """Total over the topic's partitions."""


class ConsumerGroupPartition(BaseModel):
    """One partition of a group."""

    id: int
    consumer: Optional[str] = None
    """The member holding the partition (``csr_…``), ``None`` when unassigned."""
    offset: int
    """The committed offset: everything below it is acked."""
    lag: int


class ConsumerGroup(BaseModel):
    """A group with its partitions and config (``consumer_groups.describe``)."""

    name: str
    topic: str
    consumers: int
    partitions: list[ConsumerGroupPartition]
    config: ConsumerGroupConfig
    expired: int = 0
    """Messages whose TTL passed before the group delivered them, since its creation."""


class PartitionPosition(BaseModel):
    """Where a partition of a group now stands after a reset."""

    partition: int
    current: int
