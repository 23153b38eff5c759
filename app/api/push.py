"""Push group calls: rotate the signing secret, list the recent delivery attempts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import AdminTopics, ServicesDep, UnitDep
from app.api.routing import JsonRoute
from app.api.schemas.constraints import GroupNamePath, TopicNamePath
from app.api.schemas.push import PushAttempt, PushAttempts, PushSecret
from app.broker import push_groups
from app.errors import responses

router = APIRouter(prefix="/v1/topics/{name}/groups/{group}/push", tags=["push"], route_class=JsonRoute)

_ERRORS = ("INVALID_REQUEST", "INVALID_API_KEY", "RATE_LIMIT_EXCEEDED", "TOPIC_NOT_FOUND", "GROUP_NOT_FOUND")


@router.post("/rotate-secret", response_model=PushSecret, responses=responses(*_ERRORS))
async def rotate_secret(
    name: TopicNamePath, group: GroupNamePath, topics: AdminTopics, services: ServicesDep, uow: UnitDep
) -> PushSecret:
    """A new signing secret, answered once; deliveries carry signatures by both the new and the previous
    secret for 24 h. 400 when the group is not a push group."""
    topic = await topics.get(name)
    secret = await push_groups.rotate_secret(uow, services.push_policy, topic, group)
    services.push_workers.wake_soon()
    return PushSecret(secret=secret)


@router.get("/attempts", response_model=PushAttempts, responses=responses(*_ERRORS))
async def list_attempts(
    name: TopicNamePath,
    group: GroupNamePath,
    topics: AdminTopics,
    uow: UnitDep,
    limit: Annotated[int, Query(ge=1, le=push_groups.MAX_ATTEMPTS_LIMIT)] = 50,
) -> PushAttempts:
    """The group's most recent deliveries, newest first (``status`` null when no answer came)."""
    topic = await topics.get(name)
    rows = await push_groups.recent_attempts(uow, topic, group, limit)
    return PushAttempts(data=[PushAttempt.model_validate(row) for row in rows])
