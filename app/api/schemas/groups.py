"""Wire shapes of the consumer group calls."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import (
    AckTimeout,
    GroupName,
    Instant,
    LogOffset,
    MemberId,
    Partition,
    RetryDelay,
    SessionTimeout,
    TopicName,
    at_most,
    schema,
)
from app.api.schemas.push import PushConfig, PushConfigIn
from app.broker import topics

Reset = Annotated[str, schema(enum=["earliest", "latest"])]


class BreakerIn(RequestBody):
    failureRate: float | None = Field(None, description="0 to below 1; default 0.5")
    minAttempts: int | None = Field(None, description="1 to 1000000; default 100")
    window: str | None = Field(None, examples=["60s"], description="1s to 1d; default 60s")


class Breaker(ResponseBody):
    failureRate: float
    minAttempts: int
    window: str


class DeadLetterIn(RequestBody):
    maxRetries: Annotated[int, schema(minimum=0, maximum=100)] | None = Field(
        None, description="0 to 100; default 5"
    )
    retryDelay: RetryDelay | None = Field(None, description="0s to 1h; default 30s")
    alertThreshold: Annotated[int, schema(minimum=1, maximum=1_000_000)] | None = Field(
        None, description="1 to 1000000; default 100"
    )
    breaker: BreakerIn | None = Field(
        None,
        description="The DLQ breaker (pauses the group when too many deliveries fail); null turns it off",
    )


class GroupConfigUpdate(RequestBody):
    ackTimeout: AckTimeout | None = Field(None, examples=["30s"], description="1s to 12h")
    sessionTimeout: SessionTimeout | None = Field(None, examples=["10s"], description="2s to 5m")
    deadLetter: DeadLetterIn | None = Field(None, description="null removes the dead-letter queue")
    maxInFlight: Annotated[int, schema(minimum=1, maximum=100_000)] | None = Field(
        None, description="Unacked messages across all members of the group, 1 to 100000; null removes it"
    )
    rate: Annotated[float, schema(exclusiveMinimum=0, maximum=1_000_000)] | None = Field(
        None, examples=[50], description="Messages per second delivered to the group (> 0); null removes it"
    )
    filter: Annotated[str, schema(maxLength=1024)] | None = Field(
        None,
        examples=['headers.type IN ("order.created", "order.paid") AND NOT hasPrefix(key, "test-")'],
        description="Only matching messages are delivered (docs/consuming.md, Filters); null removes it",
    )
    push: PushConfigIn | None = Field(None, description="POST each message to a URL; null turns push off")


class DeadLetter(ResponseBody):
    maxRetries: int
    retryDelay: str
    alertThreshold: int
    breaker: Breaker | None


class GroupConfig(ResponseBody):
    ackTimeout: str = Field(examples=["30s"])
    sessionTimeout: str = Field(examples=["10s"])
    deadLetter: DeadLetter | None
    maxInFlight: int | None = Field(None, description="Unacked messages across all members; null: no limit")
    rate: float | None = Field(None, description="Messages per second delivered to the group; null: no limit")
    filter: str | None = Field(None, description="Only matching messages are delivered; null: all of them")
    push: PushConfig | None = None


class GroupSummary(ResponseBody):
    name: GroupName = Field(examples=["order-processing"])
    consumers: int = Field(examples=[3])
    lag: int = Field(examples=[42])


class GroupList(ResponseBody):
    data: list[GroupSummary]


class GroupPartition(ResponseBody):
    id: Partition
    consumer: MemberId | None = Field(examples=["csr_a1"])
    offset: int = Field(examples=[4821], description="The committed offset (current)")
    lag: int = Field(examples=[12])


class FilterStart(ResponseBody):
    partition: Partition
    offset: int = Field(description="The first offset the new filter decides")


class Group(ResponseBody):
    name: GroupName
    topic: TopicName
    consumers: int
    partitions: Annotated[list[GroupPartition], at_most(topics.MAX_PARTITIONS)]
    config: GroupConfig
    filterAppliesFrom: Annotated[list[FilterStart], at_most(topics.MAX_PARTITIONS)] | None = Field(
        None,
        description=(
            "Only in the answer to a config PUT that changed the filter: per partition, the offset from "
            "which the new filter decides (the group's read position there; the messages before it were "
            "delivered, or passed over, under the old one). Redeliveries are decided by the new filter too."
        ),
    )
    paused: bool = Field(description="No member receives messages while paused")
    pausedUntil: Instant | None = Field(description="When the pause ends by itself (null: until resumed)")
    pausedReason: Literal["user", "dlq-breaker"] | None
    expired: int = Field(
        0,
        examples=[0],
        description="Messages whose TTL (ttl / expiresAt) passed before the group delivered them, since "
        "its creation.",
    )


class PauseIn(RequestBody):
    # Checked by the broker (``pauses.parse_until``), so that a refusal names ``until`` itself.
    until: Any = Field(
        None,
        json_schema_extra={"anyOf": [{"type": "string", "format": "date-time"}, {"type": "integer"}]},
        description="ISO-8601 or epoch milliseconds, in the future; omitted or null: until resumed",
    )


class Paused(ResponseBody):
    paused: Literal[True]
    until: Instant | None = Field(description="When it resumes by itself (null: until resumed)")


class Resumed(ResponseBody):
    paused: Literal[False]


class ResetOffsetsIn(RequestBody):
    to: Reset | LogOffset = Field(examples=["earliest"], description="earliest, latest or an offset")


class PartitionPosition(ResponseBody):
    partition: Partition
    current: int


class Positions(ResponseBody):
    data: Annotated[list[PartitionPosition], at_most(topics.MAX_PARTITIONS)]
