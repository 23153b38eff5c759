from typing import Literal, Optional

from .._models import BaseModel, Timestamp
from .push import PushConfig

__all__ = [
    "Breaker",
    "ConsumerGroup",
    "ConsumerGroupConfig",
    "ConsumerGroupPartition",
    "ConsumerGroupSummary",
    "DeadLetter",
    "FilterStart",
    "GroupPause",
    "PartitionPosition",
]


class Breaker(BaseModel):
    """The DLQ breaker: when, within ``window``, at least ``min_attempts`` deliveries ended and more than
    ``failure_rate`` of them failed, the group pauses itself (``paused_reason="dlq-breaker"``) and the
    alert endpoint gets a ``dlq.breaker_tripped`` event. Unset fields take the server's defaults
    (``0.5``, ``100``, ``"60s"``)."""

    failure_rate: Optional[float] = None
    """0 to below 1."""
    min_attempts: Optional[int] = None
    """1 to 1,000,000."""
    window: Optional[str] = None
    """``1s`` to ``1d``."""


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
    breaker: Optional[Breaker] = None
    """The DLQ breaker (on by default); ``breaker=None`` given explicitly turns it off."""


class ConsumerGroupConfig(BaseModel):
    """A group's settings."""

    ack_timeout: str
    """How long a delivered message may stay unacked before redelivery (``1s`` to ``12h``)."""
    session_timeout: str
    """How long a member may go without a heartbeat before it is dropped (``2s`` to ``5m``)."""
    dead_letter: Optional[DeadLetter] = None
    """``None`` when the group has no dead-letter queue."""
    max_in_flight: Optional[int] = None
    """Unacked messages across all members of the group (1 to 100,000); ``None``: no limit."""
    rate: Optional[float] = None
    """Messages per second delivered to the group; ``None``: no limit."""
    filter: Optional[str] = None
    """Only messages matching it are delivered (the grammar: docs/consuming.md, "Filters"); ``None``: all."""

    push: Optional[PushConfig] = None
    """``None`` unless the group POSTs its messages to a URL (a push group)."""


class FilterStart(BaseModel):
    """Where a changed filter starts to decide, in one partition (``ConsumerGroup.filter_applies_from``)."""

    partition: int
    offset: int


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
    filter_applies_from: Optional[list[FilterStart]] = None
    """Only in the answer of an ``update`` that changed the filter: per partition, the offset from which
    the new filter decides (messages before it were delivered, or passed over, under the old one)."""
    paused: bool = False
    """No member receives messages while paused (``consumer_groups.pause``)."""
    paused_until: Optional[Timestamp] = None
    """When the pause ends by itself; ``None`` until resumed."""
    paused_reason: Optional[Literal["user", "dlq-breaker"]] = None
    expired: int = 0
    """Messages whose TTL passed before the group delivered them, since its creation."""


class GroupPause(BaseModel):
    """The answer to ``consumer_groups.pause`` and ``resume``."""

    paused: bool
    until: Optional[Timestamp] = None


class PartitionPosition(BaseModel):
    """Where a partition of a group now stands after a reset."""

    partition: int
    current: int
