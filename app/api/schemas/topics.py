"""Wire shapes of the topic calls."""

from __future__ import annotations

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody


class TopicCreate(RequestBody):
    name: str = Field(examples=["order.events"])
    retention: str = Field("7d", examples=["30d"], description="<n>m, <n>h or <n>d, from 1m to 365d")
    delivery: str = Field(
        "exactly-once", examples=["exactly-once"], description="exactly-once or at-least-once"
    )
    partitions: int = Field(3, examples=[6], description="1 to 256")


class TopicUpdate(RequestBody):
    partitions: int | None = Field(None, description="increase only")
    retention: str | None = None


class Topic(ResponseBody):
    id: str = Field(examples=["top_8xk2m9"])
    name: str = Field(examples=["order.events"])
    partitions: int = Field(examples=[6])
    retention: str = Field(examples=["30d"])
    delivery: str = Field(examples=["exactly-once"])
    status: str = Field(examples=["active"])
    createdAt: str = Field(examples=["2026-03-28T10:42:18.003Z"])


class PartitionDetail(ResponseBody):
    id: int
    earliestOffset: int
    latestOffset: int
    messages: int
    bytes: int


class TopicDetail(Topic):
    partitionDetails: list[PartitionDetail]


class TopicList(ResponseBody):
    data: list[Topic]
    nextCursor: str | None
