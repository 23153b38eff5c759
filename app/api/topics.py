"""Topic calls: create, list, describe, update, delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from app.api.deps import AdminKey, ServicesDep, UnitDep, scope_of
from app.api.routing import JsonRoute
from app.api.schemas.constraints import TopicNamePath
from app.api.schemas.topics import (
    PartitionDetail,
    ReplicaDetail,
    Topic,
    TopicCreate,
    TopicDetail,
    TopicList,
    TopicUpdate,
)
from app.broker import topics
from app.errors import responses
from app.kit.clock import isoformat_ms

router = APIRouter(prefix="/v1/topics", tags=["topics"], route_class=JsonRoute)

_AUTH = ("INVALID_API_KEY", "RATE_LIMIT_EXCEEDED")


def _topic(view: topics.TopicView) -> Topic:
    return Topic(
        id=view.id,
        name=view.name,
        partitions=view.partitions,
        retention=view.retention,
        delivery=view.delivery,
        replicas=view.replicas,
        status=view.status,
        createdAt=isoformat_ms(view.created_at),
    )


@router.post(
    "",
    status_code=201,
    response_model=Topic,
    responses=responses(
        "INVALID_REQUEST", *_AUTH, "QUOTA_EXCEEDED", "TOPIC_ALREADY_EXISTS", "PAYLOAD_TOO_LARGE"
    ),
)
async def create_topic(body: TopicCreate, key: AdminKey, services: ServicesDep, uow: UnitDep) -> Topic:
    """Create a topic in the key's environment; 403 ``QUOTA_EXCEEDED`` past the environment's topics or
    partitions quota."""
    row = await topics.create_topic(
        uow,
        services.log,
        scope_of(key),
        body.name,
        retention=body.retention,
        delivery=body.delivery,
        partitions=body.partitions,
        replicas=body.replicas,
    )
    services.publisher.topic_changed(scope_of(key), body.name)
    return _topic(row)


@router.get("", response_model=TopicList, responses=responses("INVALID_REQUEST", *_AUTH))
async def list_topics(
    key: AdminKey,
    uow: UnitDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: str | None = None,
) -> TopicList:
    """Topics of the key's environment by name, a page at a time (``nextCursor`` until the last)."""
    rows, next_cursor = await topics.list_topics(uow, scope_of(key), limit=limit, cursor=cursor)
    return TopicList(data=[_topic(r) for r in rows], nextCursor=next_cursor)


@router.get("/{name}", response_model=TopicDetail, responses=responses(*_AUTH, "TOPIC_NOT_FOUND"))
async def describe_topic(
    name: TopicNamePath, key: AdminKey, services: ServicesDep, uow: UnitDep
) -> TopicDetail:
    """A topic with per-partition offsets, sizes and where each partition's copies live."""
    row = await topics.get_topic(uow, scope_of(key), name)
    details = await topics.partition_details(services.log, row)
    return TopicDetail(
        **_topic(row).model_dump(),
        partitionDetails=[
            PartitionDetail(
                id=p.partition,
                earliestOffset=p.earliest_offset,
                latestOffset=p.latest_offset,
                messages=p.latest_offset - p.earliest_offset,
                bytes=p.size_bytes,
                replicas=[
                    ReplicaDetail(server=r.server, zone=r.zone, leader=r.leader, current=r.current, lag=r.lag)
                    for r in p.replicas
                ],
            )
            for p in details
        ],
    )


@router.patch(
    "/{name}",
    response_model=Topic,
    responses=responses("INVALID_REQUEST", *_AUTH, "QUOTA_EXCEEDED", "TOPIC_NOT_FOUND"),
)
async def update_topic(
    name: TopicNamePath, body: TopicUpdate, key: AdminKey, services: ServicesDep, uow: UnitDep
) -> Topic:
    """Increase partitions (403 ``QUOTA_EXCEEDED`` past the environment's partitions quota) and/or change
    retention."""
    row = await topics.update_topic(
        uow, services.log, scope_of(key), name, partitions=body.partitions, retention=body.retention
    )
    services.publisher.topic_changed(scope_of(key), name)
    return _topic(row)


@router.delete("/{name}", status_code=204, responses=responses(*_AUTH, "TOPIC_NOT_FOUND"))
async def delete_topic(name: TopicNamePath, key: AdminKey, services: ServicesDep) -> Response:
    """Delete a topic with its messages, groups and dead-letter queues."""
    topic_id = await topics.delete_topic(services.metadata, services.log, scope_of(key), name)
    services.publisher.topic_deleted(scope_of(key), name, topic_id)
    return Response(status_code=204)
