"""Wire shapes of the consumer group calls."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import (
    AckTimeout,
    GroupName,
    LogOffset,
    MemberId,
    Partition,
    RetryDelay,
    SessionTimeout,
    TopicName,
    at_most,
    schema,
)
from app.broker import topics

Reset = Annotated[str, schema(enum=["earliest", "latest"])]


class DeadLetterIn(RequestBody):
    maxRetries: Annotated[int, schema(minimum=0, maximum=100)] | None = Field(
        None, description="0 to 100; default 5"
    )
    retryDelay: RetryDelay | None = Field(None, description="0s to 1h; default 30s")
    alertThreshold: Annotated[int, schema(minimum=1, maximum=1_000_000)] | None = Field(
        None, description="1 to 1000000; default 100"
    )


class GroupConfigUpdate(RequestBody):
    ackTimeout: AckTimeout | None = Field(None, examples=["30s"], description="1s to 12h")
    sessionTimeout: SessionTimeout | None = Field(None, examples=["10s"], description="2s to 5m")
    deadLetter: DeadLetterIn | None = Field(None, description="null removes the dead-letter queue")


class DeadLetter(ResponseBody):
    maxRetries: int
    retryDelay: str
    alertThreshold: int


class GroupConfig(ResponseBody):
    ackTimeout: str = Field(examples=["30s"])
    sessionTimeout: str = Field(examples=["10s"])
    deadLetter: DeadLetter | None


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


class Group(ResponseBody):
    name: GroupName
    topic: TopicName
    consumers: int
    partitions: Annotated[list[GroupPartition], at_most(topics.MAX_PARTITIONS)]
    config: GroupConfig
    expired: int = Field(
        0,
        examples=[0],
        description="Messages whose TTL (ttl / expiresAt) passed before the group delivered them, since "
        "its creation.",
    )


class ResetOffsetsIn(RequestBody):
    to: Reset | LogOffset = Field(examples=["earliest"], description="earliest, latest or an offset")


class PartitionPosition(ResponseBody):
    partition: Partition
    current: int


class Positions(ResponseBody):
    data: Annotated[list[PartitionPosition], at_most(topics.MAX_PARTITIONS)]
