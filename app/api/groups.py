"""Consumer group calls: list, describe, config upsert, delete, and the stopped-group offset reset."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from app.api.deps import AdminTopics, ServicesDep, SessionDep
from app.api.routing import JsonRoute
from app.api.schemas.constraints import GroupNamePath, TopicNamePath
from app.api.schemas.groups import (
    Group,
    GroupConfigUpdate,
    GroupList,
    GroupPartition,
    GroupSummary,
    PartitionPosition,
    Positions,
    ResetOffsetsIn,
)
from app.broker import groups, offsets
from app.errors import responses

router = APIRouter(prefix="/v1/topics/{name}/groups", tags=["groups"], route_class=JsonRoute)

_AUTH = ("INVALID_API_KEY", "RATE_LIMIT_EXCEEDED")


def _group(detail: groups.GroupDetail) -> Group:
    return Group.model_validate(
        {
            "name": detail.name,
            "topic": detail.topic,
            "consumers": detail.consumers,
            "partitions": [
                GroupPartition(id=p.partition, consumer=p.consumer, offset=p.current, lag=p.lag)
                for p in detail.partitions
            ],
            "config": detail.config,
            "expired": detail.expired,
        }
    )


def positions(moved: list[offsets.Position]) -> Positions:
    return Positions(data=[PartitionPosition(partition=m.partition, current=m.current) for m in moved])


@router.get("", response_model=GroupList, responses=responses(*_AUTH, "TOPIC_NOT_FOUND"))
async def list_groups(
    name: TopicNamePath, topics: AdminTopics, services: ServicesDep, session: SessionDep
) -> GroupList:
    """The topic's consumer groups with their live member count and total lag."""
    topic = await topics.get(name)
    rows = await groups.list_groups(session, services.log, topic)
    return GroupList(data=[GroupSummary(name=g.name, consumers=g.consumers, lag=g.lag) for g in rows])


@router.get(
    "/{group}", response_model=Group, responses=responses(*_AUTH, "TOPIC_NOT_FOUND", "GROUP_NOT_FOUND")
)
async def describe_group(
    name: TopicNamePath, group: GroupNamePath, topics: AdminTopics, services: ServicesDep, session: SessionDep
) -> Group:
    """A group: per partition its consumer, committed offset and lag; and its config."""
    topic = await topics.get(name)
    return _group(await groups.describe_group(session, services.log, topic, group))


@router.put(
    "/{group}",
    response_model=Group,
    responses=responses("INVALID_REQUEST", *_AUTH, "QUOTA_EXCEEDED", "TOPIC_NOT_FOUND"),
)
async def upsert_group(
    name: TopicNamePath,
    group: GroupNamePath,
    body: GroupConfigUpdate,
    topics: AdminTopics,
    services: ServicesDep,
    session: SessionDep,
) -> Group:
    """Create the group or merge the given config fields (``deadLetter: null`` removes the DLQ); creating
    one past the topic's groups quota is 403 ``QUOTA_EXCEEDED``."""
    topic = await topics.get(name)
    extra = {}
    if "deadLetter" in body.model_fields_set:
        extra["dead_letter"] = body.deadLetter.model_dump(exclude_unset=True) if body.deadLetter else None
    await groups.upsert_config(
        session, topic, group, ack_timeout=body.ackTimeout, session_timeout=body.sessionTimeout, **extra
    )
    return _group(await groups.describe_group(session, services.log, topic, group))


@router.delete(
    "/{group}",
    status_code=204,
    responses=responses(*_AUTH, "TOPIC_NOT_FOUND", "GROUP_NOT_FOUND", "GROUP_ACTIVE"),
)
async def delete_group(
    name: TopicNamePath, group: GroupNamePath, topics: AdminTopics, services: ServicesDep
) -> Response:
    """Delete a group with its offsets; 409 ``GROUP_ACTIVE`` while members are connected."""
    topic = await topics.get(name)
    await groups.delete_group_and_dlq(services.metadata, services.log, topic, group)
    return Response(status_code=204)


@router.post(
    "/{group}/reset-offsets",
    response_model=Positions,
    responses=responses("INVALID_REQUEST", *_AUTH, "TOPIC_NOT_FOUND", "GROUP_NOT_FOUND", "GROUP_ACTIVE"),
)
async def reset_offsets(
    name: TopicNamePath,
    group: GroupNamePath,
    body: ResetOffsetsIn,
    topics: AdminTopics,
    services: ServicesDep,
) -> Positions:
    """Move every partition of a stopped group to earliest, latest or an offset (clamped to what is
    retained); 409 ``GROUP_ACTIVE`` while members are connected."""
    topic = await topics.get(name)
    return positions(
        await services.metadata.transaction(
            lambda session: offsets.reset_stopped(session, services.log, topic, group, body.to)
        )
    )
