"""Consumer group calls: list, describe, config upsert, delete, and the stopped-group offset reset."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from app.api.deps import AdminTopics, ServicesDep, UnitDep
from app.api.routing import JsonRoute
from app.api.schemas.constraints import GroupNamePath, TopicNamePath
from app.api.schemas.groups import (
    FilterStart,
    Group,
    GroupConfigUpdate,
    GroupList,
    GroupPartition,
    GroupSummary,
    PartitionPosition,
    Paused,
    PauseIn,
    Positions,
    ResetOffsetsIn,
    Resumed,
)
from app.broker import groups, offsets, pauses, push_groups
from app.errors import responses

router = APIRouter(prefix="/v1/topics/{name}/groups", tags=["groups"], route_class=JsonRoute)

_AUTH = ("INVALID_API_KEY", "RATE_LIMIT_EXCEEDED")


def _group(detail: groups.GroupDetail, push: dict[str, Any] | None = None) -> Group:
    return Group.model_validate(
        {
            "name": detail.name,
            "topic": detail.topic,
            "consumers": detail.consumers,
            "partitions": [
                GroupPartition(id=p.partition, consumer=p.consumer, offset=p.current, lag=p.lag)
                for p in detail.partitions
            ],
            "config": {**detail.config, "push": push},
            "paused": detail.pause.paused,
            "pausedUntil": detail.pause.until,
            "pausedReason": detail.pause.reason,
            "expired": detail.expired,
        }
    )


def positions(moved: list[offsets.Position]) -> Positions:
    return Positions(data=[PartitionPosition(partition=m.partition, current=m.current) for m in moved])


@router.get("", response_model=GroupList, responses=responses(*_AUTH, "TOPIC_NOT_FOUND"))
async def list_groups(
    name: TopicNamePath, topics: AdminTopics, services: ServicesDep, uow: UnitDep
) -> GroupList:
    """The topic's consumer groups with their live member count and total lag."""
    topic = await topics.get(name)
    rows = await groups.list_groups(uow, services.log, topic)
    return GroupList(data=[GroupSummary(name=g.name, consumers=g.consumers, lag=g.lag) for g in rows])


@router.get(
    "/{group}", response_model=Group, responses=responses(*_AUTH, "TOPIC_NOT_FOUND", "GROUP_NOT_FOUND")
)
async def describe_group(
    name: TopicNamePath, group: GroupNamePath, topics: AdminTopics, services: ServicesDep, uow: UnitDep
) -> Group:
    """A group: per partition its consumer, committed offset and lag; and its config."""
    topic = await topics.get(name)
    detail = await groups.describe_group(uow, services.log, topic, group)
    return _group(detail, await push_groups.push_view(uow, services.push_policy, topic, group))


@router.put(
    "/{group}",
    response_model=Group,
    responses=responses("INVALID_REQUEST", *_AUTH, "QUOTA_EXCEEDED", "TOPIC_NOT_FOUND", "GROUP_ACTIVE"),
)
async def upsert_group(
    name: TopicNamePath,
    group: GroupNamePath,
    body: GroupConfigUpdate,
    topics: AdminTopics,
    services: ServicesDep,
    uow: UnitDep,
) -> Group:
    """Create the group or merge the given config fields (``deadLetter``, ``maxInFlight``, ``rate`` or
    ``filter`` null removes it, ``push: null`` turns push off; the PUT that first sets ``push`` answers its
    secret, once); creating one past the topic's groups quota, or making a push group past the
    environment's push groups quota, is 403 ``QUOTA_EXCEEDED``. A changed filter applies from the group's
    read positions, answered as ``filterAppliesFrom``."""
    topic = await topics.get(name)
    extra: dict[str, Any] = {}
    if "deadLetter" in body.model_fields_set:
        extra["dead_letter"] = body.deadLetter.model_dump(exclude_unset=True) if body.deadLetter else None
    for wire, attribute in (("maxInFlight", "max_in_flight"), ("rate", "rate"), ("filter", "filter")):
        if wire in body.model_fields_set:
            extra[attribute] = getattr(body, wire)
    # Setting push may make a push group: its quota locks the project before the group is locked.
    sets_push = "push" in body.model_fields_set and body.push is not None
    quota = await push_groups.lock_quota(uow, topics.scope) if sets_push else None
    before = await groups.current_filter(uow, topic, group)
    row = await groups.upsert_config(
        uow, topic, group, ack_timeout=body.ackTimeout, session_timeout=body.sessionTimeout, **extra
    )
    revealed = None
    if "push" in body.model_fields_set:
        push = body.push.model_dump(exclude_unset=True) if body.push else None
        revealed = await push_groups.set_push(
            uow, services.log, services.push_policy, topic, row, push, quota
        )
        services.push_workers.wake_soon()
    detail = await groups.describe_group(uow, services.log, topic, group)
    answer = _group(detail, await push_groups.push_view(uow, services.push_policy, topic, group, revealed))
    if "filter" in body.model_fields_set and row.filter != before:
        positions = await groups.read_positions(uow, services.log, topic, row.id)
        answer.filterAppliesFrom = [FilterStart(partition=p, offset=o) for p, o in positions]
    return answer


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
    await groups.delete_group_and_dead_letters(services.metadata, services.log, topic, group)
    return Response(status_code=204)


@router.post(
    "/{group}/pause",
    response_model=Paused,
    responses=responses("INVALID_REQUEST", *_AUTH, "TOPIC_NOT_FOUND", "GROUP_NOT_FOUND"),
)
async def pause_group(
    name: TopicNamePath,
    group: GroupNamePath,
    topics: AdminTopics,
    uow: UnitDep,
    body: PauseIn | None = None,
) -> Paused:
    """Pause the group: no member receives messages (within 1 s on every node) until ``until`` or
    ``resume``; acks, nacks and extends still work."""
    topic = await topics.get(name)
    state = await pauses.pause(uow, topic, group, body.until if body is not None else None)
    return Paused(paused=True, until=state.until)


@router.post(
    "/{group}/resume",
    response_model=Resumed,
    responses=responses(*_AUTH, "TOPIC_NOT_FOUND", "GROUP_NOT_FOUND"),
)
async def resume_group(
    name: TopicNamePath, group: GroupNamePath, topics: AdminTopics, uow: UnitDep
) -> Resumed:
    """End the group's pause (a user's or the DLQ breaker's); delivery resumes."""
    topic = await topics.get(name)
    await pauses.resume(uow, topic, group)
    return Resumed(paused=False)


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
        await services.metadata.run_unit(
            lambda uow: offsets.reset_stopped(uow, services.log, topic, group, body.to)
        )
    )
