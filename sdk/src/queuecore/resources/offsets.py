"""``client.offsets``: a group's offsets per partition; seek and reset, also while consuming."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Union, overload

import httpx

from .._base_client import RequestOptions, parse_model
from .._models import wire_timestamp
from .._resource import AsyncAPIResource, SyncAPIResource, path_segment
from ..types.consumer_group import PartitionPosition
from ..types.offset import Offset, PartitionOffset, SeekResult
from ._lists import parse_list

__all__ = ["AsyncOffsets", "Offsets"]

SeekTimestamp = Union[datetime, str, int]


def _path(topic: str, group: str) -> str:
    return f"/v1/topics/{path_segment(topic)}/groups/{path_segment(group)}/offsets"


def _get_options(topic: str, group: str, partition: int | None) -> RequestOptions:
    return RequestOptions("GET", _path(topic, group), params={"partition": partition})


def _read_get(response: httpx.Response, partition: int | None) -> Offset | list[PartitionOffset]:
    if partition is not None:
        return parse_model(Offset, response)
    return parse_list(PartitionOffset, response)


def _seek_options(
    topic: str, group: str, partition: int, offset: int | None, timestamp: SeekTimestamp | None
) -> RequestOptions:
    if (offset is None) == (timestamp is None):
        raise TypeError("seek takes exactly one of offset= and timestamp=")
    body: dict[str, Any] = {"partition": partition}
    if offset is not None:
        body["offset"] = offset
    else:
        body["timestamp"] = wire_timestamp(timestamp) if isinstance(timestamp, datetime) else timestamp
    return RequestOptions("POST", f"{_path(topic, group)}/seek", json=body)


def _landed(client: Any, topic: str, group: str, offset: int | None, result: SeekResult) -> SeekResult:
    """Warn when a seek to an offset landed elsewhere (clamped into the partition's range)."""
    if offset is not None and result.offset != offset:
        client._logger.warning(
            "seek %s/%s partition %d: asked for offset %d, landed at %d (the partition's range ends there)",
            topic,
            group,
            result.partition,
            offset,
            result.offset,
        )
    return result


def _reset_options(
    topic: str, group: str, to: Literal["earliest", "latest"], partition: int | None
) -> RequestOptions:
    body: dict[str, Any] = {"to": to}
    if partition is not None:
        body["partition"] = partition
    return RequestOptions("POST", f"{_path(topic, group)}/reset", json=body)


class Offsets(SyncAPIResource):
    """A consumer group's offsets."""

    @overload
    def get(self, topic: str, *, group: str, partition: int) -> Offset: ...

    @overload
    def get(self, topic: str, *, group: str, partition: None = None) -> list[PartitionOffset]: ...

    def get(self, topic: str, *, group: str, partition: int | None = None) -> Offset | list[PartitionOffset]:
        """``{current, latest, lag}`` of one partition; without ``partition``, one entry per partition.

        Raises:
            NotFoundError: no such topic or group.
        """
        return _read_get(self._client.request(_get_options(topic, group, partition)), partition)

    def seek(
        self,
        topic: str,
        *,
        group: str,
        partition: int,
        offset: int | None = None,
        timestamp: SeekTimestamp | None = None,
    ) -> SeekResult:
        """Move one partition to an offset, or to the first message at or after a time (a ``datetime``,
        an ISO-8601 string or epoch milliseconds). Works while consuming: in-flight messages of the
        partition are dropped and delivery resumes there. An offset outside the partition's range is
        clamped into it: the answer says where it landed, and a warning is logged when that differs.
        """
        options = _seek_options(topic, group, partition, offset, timestamp)
        result = parse_model(SeekResult, self._client.request(options))
        return _landed(self._client, topic, group, offset, result)

    def reset(
        self,
        topic: str,
        *,
        group: str,
        to: Literal["earliest", "latest"],
        partition: int | None = None,
    ) -> list[PartitionPosition]:
        """Move every partition (or one) to ``"earliest"`` or ``"latest"``, also while consuming."""
        options = _reset_options(topic, group, to, partition)
        return parse_list(PartitionPosition, self._client.request(options))


class AsyncOffsets(AsyncAPIResource):
    """A consumer group's offsets."""

    @overload
    async def get(self, topic: str, *, group: str, partition: int) -> Offset: ...

    @overload
    async def get(self, topic: str, *, group: str, partition: None = None) -> list[PartitionOffset]: ...

    async def get(
        self, topic: str, *, group: str, partition: int | None = None
    ) -> Offset | list[PartitionOffset]:
        """A group's offsets. See ``Offsets.get``."""
        return _read_get(await self._client.request(_get_options(topic, group, partition)), partition)

    async def seek(
        self,
        topic: str,
        *,
        group: str,
        partition: int,
        offset: int | None = None,
        timestamp: SeekTimestamp | None = None,
    ) -> SeekResult:
        """Move one partition to an offset or a time. See ``Offsets.seek``."""
        options = _seek_options(topic, group, partition, offset, timestamp)
        result = parse_model(SeekResult, await self._client.request(options))
        return _landed(self._client, topic, group, offset, result)

    async def reset(
        self,
        topic: str,
        *,
        group: str,
        to: Literal["earliest", "latest"],
        partition: int | None = None,
    ) -> list[PartitionPosition]:
        """Move every partition (or one) to earliest or latest. See ``Offsets.reset``."""
        options = _reset_options(topic, group, to, partition)
        return parse_list(PartitionPosition, await self._client.request(options))
