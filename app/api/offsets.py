"""Group offset calls: get, seek (by offset or time), reset; seek and reset work while consuming."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import AdminTopics, ServicesDep, UnitDep
from app.api.groups import positions
from app.api.routing import JsonRoute
from app.api.schemas.constraints import GroupNamePath, TopicNamePath
from app.api.schemas.groups import Positions
from app.api.schemas.offsets import Offset, OffsetList, OffsetResetIn, PartitionOffset, Seeked, SeekIn
from app.broker import offsets
from app.errors import responses

router = APIRouter(prefix="/v1/topics/{name}/groups/{group}/offsets", tags=["offsets"], route_class=JsonRoute)

_AUTH = ("INVALID_API_KEY", "RATE_LIMIT_EXCEEDED")
_ERRORS = responses("INVALID_REQUEST", *_AUTH, "TOPIC_NOT_FOUND", "GROUP_NOT_FOUND")


@router.get("", response_model=Offset | OffsetList, responses=_ERRORS)
async def get_offsets(
    name: TopicNamePath,
    group: GroupNamePath,
    topics: AdminTopics,
    services: ServicesDep,
    uow: UnitDep,
    partition: Annotated[int | None, Query(ge=0)] = None,
) -> Offset | OffsetList:
    """``{current, latest, lag}`` of one partition; without ``partition``, one entry per partition."""
    topic = await topics.get(name)
    lags = await offsets.get_offsets(uow, services.log, topic, group, partition)
    if partition is not None:
        (one,) = lags
        return Offset(current=one.current, latest=one.latest, lag=one.lag)
    return OffsetList(
        data=[
            PartitionOffset(partition=p.partition, current=p.current, latest=p.latest, lag=p.lag)
            for p in lags
        ]
    )


@router.post("/seek", response_model=Seeked, responses=_ERRORS)
async def seek(
    name: TopicNamePath,
    group: GroupNamePath,
    body: SeekIn,
    topics: AdminTopics,
    services: ServicesDep,
) -> Seeked:
    """Move one partition to an offset or a time, also while consuming: in-flight messages of the
    partition are dropped and delivery resumes there."""
    topic = await topics.get(name)
    # A seek meets members' writes of the group: a lock conflict the database breaks is run again.
    moved = await services.metadata.run_unit(
        lambda uow: offsets.seek(
            uow, services.log, topic, group, body.partition, offset=body.offset, timestamp=body.timestamp
        )
    )
    return Seeked(partition=moved.partition, offset=moved.current)


@router.post("/reset", response_model=Positions, responses=_ERRORS)
async def reset(
    name: TopicNamePath,
    group: GroupNamePath,
    body: OffsetResetIn,
    topics: AdminTopics,
    services: ServicesDep,
) -> Positions:
    """Move every partition (or one) to earliest or latest, also while consuming."""
    topic = await topics.get(name)
    return positions(
        await services.metadata.run_unit(
            lambda uow: offsets.reset_live(uow, services.log, topic, group, body.to, body.partition)
        )
    )
