"""Schedule calls: create, list, get, pause, resume, delete, runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from app.api.deps import AdminKey, UnitDep, scope_of
from app.api.routing import JsonRoute
from app.api.schemas.schedules import (
    SCHEDULE_ID_PATTERN,
    Schedule,
    ScheduleCreate,
    ScheduleList,
    ScheduleRun,
    ScheduleRuns,
)
from app.broker.schedules import service
from app.errors import responses
from app.kit.clock import isoformat_ms

router = APIRouter(prefix="/v1/schedules", tags=["schedules"], route_class=JsonRoute)

_AUTH = ("INVALID_API_KEY", "RATE_LIMIT_EXCEEDED")
# Described, not checked by FastAPI: an id of no schedule (of any shape) is 404 NOT_FOUND.
ScheduleIdPath = Annotated[str, Path(json_schema_extra={"pattern": SCHEDULE_ID_PATTERN, "maxLength": 20})]


def _schedule(view: service.ScheduleView) -> Schedule:
    return Schedule(
        id=view.id,
        topic=view.topic,
        cron=view.cron,
        every=view.every,
        timezone=view.timezone,
        status=view.status,
        nextRunAt=isoformat_ms(view.next_run_ms) if view.next_run_ms is not None else None,
        createdAt=isoformat_ms(view.created_at),
        data=view.data,
        key=view.key,
        headers=view.headers,
    )


@router.post(
    "",
    status_code=201,
    response_model=Schedule,
    responses=responses("INVALID_REQUEST", *_AUTH, "QUOTA_EXCEEDED", "TOPIC_NOT_FOUND", "PAYLOAD_TOO_LARGE"),
)
async def create_schedule(body: ScheduleCreate, key: AdminKey, uow: UnitDep) -> Schedule:
    """Publish ``data`` to ``topic`` at every due time of ``cron`` (in ``timezone``) or ``every``; 403
    ``QUOTA_EXCEEDED`` past the environment's schedules quota."""
    view = await service.create_schedule(
        uow,
        scope_of(key),
        topic=body.topic,
        cron=body.cron,
        every=body.every,
        timezone=body.timezone,
        data=body.data,
        key=body.key,
        headers=body.headers,
    )
    return _schedule(view)


@router.get("", response_model=ScheduleList, responses=responses("INVALID_REQUEST", *_AUTH))
async def list_schedules(
    key: AdminKey,
    uow: UnitDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: str | None = None,
) -> ScheduleList:
    """Schedules of the key's environment, a page at a time (``nextCursor`` until the last)."""
    rows, next_cursor = await service.list_schedules(uow, scope_of(key), limit=limit, cursor=cursor)
    return ScheduleList(data=[_schedule(r) for r in rows], nextCursor=next_cursor)


@router.get("/{schedule_id}", response_model=Schedule, responses=responses(*_AUTH, "NOT_FOUND"))
async def get_schedule(schedule_id: ScheduleIdPath, key: AdminKey, uow: UnitDep) -> Schedule:
    """One schedule."""
    return _schedule(await service.get_schedule(uow, scope_of(key), schedule_id))


@router.delete("/{schedule_id}", status_code=204, responses=responses(*_AUTH, "NOT_FOUND"))
async def delete_schedule(schedule_id: ScheduleIdPath, key: AdminKey, uow: UnitDep) -> Response:
    """Delete a schedule and its runs (messages already published stay in the topic)."""
    await service.delete_schedule(uow, scope_of(key), schedule_id)
    return Response(status_code=204)


@router.post("/{schedule_id}/pause", response_model=Schedule, responses=responses(*_AUTH, "NOT_FOUND"))
async def pause_schedule(schedule_id: ScheduleIdPath, key: AdminKey, uow: UnitDep) -> Schedule:
    """Stop publishing runs (``status: "paused"``) until resumed."""
    return _schedule(await service.pause_schedule(uow, scope_of(key), schedule_id))


@router.post("/{schedule_id}/resume", response_model=Schedule, responses=responses(*_AUTH, "NOT_FOUND"))
async def resume_schedule(schedule_id: ScheduleIdPath, key: AdminKey, uow: UnitDep) -> Schedule:
    """Publish runs again from the first due time after now (``status: "active"``)."""
    return _schedule(await service.resume_schedule(uow, scope_of(key), schedule_id))


@router.get("/{schedule_id}/runs", response_model=ScheduleRuns, responses=responses(*_AUTH, "NOT_FOUND"))
async def schedule_runs(schedule_id: ScheduleIdPath, key: AdminKey, uow: UnitDep) -> ScheduleRuns:
    """The schedule's last runs, newest first: each due time's message."""
    runs = await service.schedule_runs(uow, scope_of(key), schedule_id)
    return ScheduleRuns(
        data=[
            ScheduleRun(
                at=isoformat_ms(r.at_ms), messageId=r.message_id, partition=r.partition, offset=r.offset
            )
            for r in runs
        ]
    )
