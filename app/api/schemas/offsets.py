"""Wire shapes of the group offset calls."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import LogOffset, Partition, Timestamp, at_most, schema
from app.broker import topics


class Offset(ResponseBody):
    current: int = Field(examples=[4821], description="Everything below it is acked")
    latest: int = Field(examples=[4833], description="The next offset to be written")
    lag: int = Field(examples=[12])


class PartitionOffset(Offset):
    partition: Partition


class OffsetList(ResponseBody):
    data: Annotated[list[PartitionOffset], at_most(topics.MAX_PARTITIONS)]


class SeekIn(RequestBody):
    partition: Partition
    offset: LogOffset | None = Field(None, examples=[4800], description="Give this or timestamp")
    timestamp: Timestamp | LogOffset | None = Field(None, description="ISO-8601 or epoch milliseconds")


class Seeked(ResponseBody):
    partition: Partition
    offset: int


class OffsetResetIn(RequestBody):
    to: Annotated[str, schema(enum=["earliest", "latest"])] = Field(
        examples=["earliest"], description="earliest or latest"
    )
    partition: Partition | None = Field(None, description="One partition; all when omitted")
