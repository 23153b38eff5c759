"""Wire shapes of the group offset calls."""

from __future__ import annotations

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody


class Offset(ResponseBody):
    current: int = Field(examples=[4821], description="Everything below it is acked")
    latest: int = Field(examples=[4833], description="The next offset to be written")
    lag: int = Field(examples=[12])


class PartitionOffset(Offset):
    partition: int


class OffsetList(ResponseBody):
    data: list[PartitionOffset]


class SeekIn(RequestBody):
    partition: int
    offset: int | None = Field(None, examples=[4800])
    timestamp: str | int | None = Field(None, description="ISO-8601 or epoch milliseconds")


class Seeked(ResponseBody):
    partition: int
    offset: int


class OffsetResetIn(RequestBody):
    to: str = Field(examples=["earliest"], description="earliest or latest")
    partition: int | None = Field(None, description="One partition; all when omitted")
