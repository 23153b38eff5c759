"""Wire shapes of the topic calls."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import (
    PAGE_MAX,
    Instant,
    Partition,
    Partitions,
    Retention,
    TopicName,
    at_most,
    schema,
)
from app.broker import topics

# The contract's allowed values; the broker refuses others (and those the engine does not offer) with 400.
_REPLICAS = {"enum": [1, 3, 5]}
Replicas = Annotated[int, Field(json_schema_extra=_REPLICAS)]


Delivery = Annotated[str, schema(enum=["exactly-once", "at-least-once"])]


class TopicCreate(RequestBody):
    name: TopicName = Field(examples=["order.events"])
    retention: Retention = Field("7d", examples=["30d"], description="<n>m, <n>h or <n>d, from 1m to 365d")
    delivery: Delivery = Field(
        "exactly-once", examples=["exactly-once"], description="exactly-once or at-least-once"
    )
    partitions: Partitions = Field(3, examples=[6], description="1 to 256")
    replicas: Replicas | None = Field(
        None,
        examples=[3],
        description="copies of each message the engine keeps: 1, 3 or 5, fixed at creation; default 3 on "
        "the JetStream engine, 1 on the local engine (which offers only 1)",
    )


# Fields of a topic fixed at creation: a PATCH naming them is told so (not "unknown field").
_FIXED = {
    "name": "a topic cannot be renamed; create a topic with the new name",
    "delivery": "cannot be changed after the topic is created; create a topic with the delivery you want",
    "replicas": "cannot be changed after the topic is created; create a topic with the replicas you want",
}


class TopicUpdate(RequestBody):
    partitions: Partitions | None = Field(None, description="increase only")
    retention: Retention | None = None

    @model_validator(mode="before")
    @classmethod
    def _refuse_fixed_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for field, why in _FIXED.items():
                if field in data:
                    raise PydanticCustomError("fixed_field", why, {"field": field})
        return data


class Topic(ResponseBody):
    id: str = Field(examples=["top_8xk2m9"])
    name: TopicName = Field(examples=["order.events"])
    partitions: Partitions = Field(examples=[6])
    retention: str = Field(examples=["30d"])
    delivery: str = Field(examples=["exactly-once"])
    replicas: Replicas = Field(examples=[3], description="copies of each message the engine keeps")
    status: str = Field(examples=["active"])
    createdAt: Instant = Field(examples=["2026-03-28T10:42:18.003Z"])


class ReplicaDetail(ResponseBody):
    server: str = Field(examples=["n1"], description="the server holding this copy")
    zone: str | None = Field(
        examples=["zone-b"],
        description="the availability zone of that server (on JetStream its az:<zone> server tag; on the "
        "local engine QUEUECORE_LOG__ZONE); null when not known",
    )
    leader: bool = Field(description="this copy takes the partition's writes")
    current: bool = Field(description="this copy has everything the leader acknowledged")
    lag: int | None = Field(
        examples=[0],
        description="operations this copy has yet to apply to catch up with the leader (0 for the leader "
        "and a caught-up copy); null when the leader cannot reach it",
    )


class PartitionDetail(ResponseBody):
    id: Partition
    earliestOffset: int
    latestOffset: int
    messages: int
    bytes: int
    replicas: Annotated[list[ReplicaDetail], at_most(5)] = Field(
        description="where the partition's copies live (server and zone), the leader first (one on the "
        "local engine)"
    )


class TopicDetail(Topic):
    partitionDetails: Annotated[list[PartitionDetail], at_most(topics.MAX_PARTITIONS)]


class TopicList(ResponseBody):
    data: Annotated[list[Topic], at_most(PAGE_MAX)]
    nextCursor: str | None
