"""Dead-letter queue calls: inspect, replay one, replay all, delete one, and the audit list."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Body, Query
from starlette.responses import Response

from app.api.deps import AdminKey, AdminTopics, ServicesDep, UnitDep
from app.api.routing import JsonRoute
from app.api.schemas.constraints import GroupNamePath, MessageIdPath, TopicNamePath
from app.api.schemas.dead_letters import (
    AuditPage,
    DeadLetterPage,
    ReplayAllIn,
    Replayed,
    ReplayedAll,
    ReplayIn,
)
from app.broker import dead_letters
from app.broker.keys import Principal
from app.errors import ApiError, responses

router = APIRouter(prefix="/v1/topics/{name}/groups/{group}/dlq", tags=["dlq"], route_class=JsonRoute)

_AUTH = ("INVALID_API_KEY", "RATE_LIMIT_EXCEEDED")
_FOUND = ("TOPIC_NOT_FOUND", "GROUP_NOT_FOUND")


def _actor(key: Principal) -> dead_letters.Actor:
    return dead_letters.Actor("key", key.key_id)


@router.get("", response_model=DeadLetterPage, responses=responses("INVALID_REQUEST", *_AUTH, *_FOUND))
async def inspect(
    name: TopicNamePath,
    group: GroupNamePath,
    topics: AdminTopics,
    services: ServicesDep,
    uow: UnitDep,
    limit: Annotated[int, Query(ge=1, le=dead_letters.MAX_PAGE)] = 50,
    cursor: str | None = None,
) -> Response:
    """The group's dead letters, oldest first, with the original message and why it failed; ``total``
    is the DLQ's depth. A group without a DLQ lists an empty one."""
    topic = await topics.get(name)
    page = await dead_letters.inspect(uow, services.log, topic, group, limit=limit, cursor=cursor)
    return Response(page.render(), media_type="application/json")


@router.post(
    "/replay",
    response_model=Replayed,
    responses=responses("INVALID_REQUEST", *_AUTH, *_FOUND, "MESSAGE_NOT_FOUND"),
)
async def replay(
    name: TopicNamePath,
    group: GroupNamePath,
    body: ReplayIn,
    key: AdminKey,
    topics: AdminTopics,
    services: ServicesDep,
) -> Replayed:
    """Send one dead letter back to this group (only), under its original id, partition and offset, with
    ``attempt`` back at 1 and a fresh retry budget."""
    topic = await topics.get(name)
    message_id = await dead_letters.replay(services.metadata, topic, group, body.messageId, _actor(key))
    return Replayed(messageId=message_id, replayed=True)


@router.post(
    "/replay-all", response_model=ReplayedAll, responses=responses("INVALID_REQUEST", *_AUTH, *_FOUND)
)
async def replay_all(
    name: TopicNamePath,
    group: GroupNamePath,
    key: AdminKey,
    topics: AdminTopics,
    services: ServicesDep,
    body: Annotated[ReplayAllIn | None, Body()] = None,
) -> ReplayedAll:
    """Send every dead letter back to this group, streamed in chunks, at most ``rate`` per second when
    given; answers the count once done."""
    topic = await topics.get(name)
    rate = dead_letters.validate_rate(body.rate if body else None)
    count = await dead_letters.replay_all(services.metadata, topic, group, _actor(key), rate=rate)
    return ReplayedAll(replayed=count)


@router.get("/audit", response_model=AuditPage, responses=responses("INVALID_REQUEST", *_AUTH, *_FOUND))
async def audit(
    name: TopicNamePath,
    group: GroupNamePath,
    topics: AdminTopics,
    services: ServicesDep,
    uow: UnitDep,
    limit: Annotated[int, Query(ge=1, le=dead_letters.MAX_PAGE)] = 50,
    cursor: str | None = None,
) -> Response:
    """Every replay and delete of this DLQ: who (key or dashboard user), what, when; newest first."""
    topic = await topics.get(name)
    page = await dead_letters.audit(uow, topic, group, limit=limit, cursor=cursor)
    # Rendered as is: ``messageId`` and ``count`` are left out where they do not apply.
    return Response(
        orjson.dumps({"data": page.entries, "nextCursor": page.next_cursor}), media_type="application/json"
    )


# The DLQ's other paths, and what they serve: DELETE on them is a method they lack, not a dead letter.
_SIBLINGS = {"audit": "GET", "replay": "POST", "replay-all": "POST"}


@router.delete(
    "/{message_id}",
    status_code=204,
    responses=responses("INVALID_REQUEST", *_AUTH, *_FOUND, "MESSAGE_NOT_FOUND"),
)
async def delete(
    name: TopicNamePath,
    group: GroupNamePath,
    message_id: MessageIdPath,
    key: AdminKey,
    topics: AdminTopics,
    services: ServicesDep,
) -> Response:
    """Remove one dead letter for good."""
    if message_id in _SIBLINGS:  # /dlq/audit, /dlq/replay…: a path of its own, not a message id
        raise ApiError(
            "METHOD_NOT_ALLOWED",
            f"DELETE is not allowed on /dlq/{message_id}.",
            405,
            headers={"Allow": _SIBLINGS[message_id]},
        )
    topic = await topics.get(name)
    await dead_letters.delete(services.metadata, topic, group, message_id, _actor(key))
    return Response(status_code=204)
