"""The dashboard's schedules page of a project environment: list (with each schedule's last runs),
create, pause, resume and delete. Same rules as ``routes.py``: the session checked, the broker called
(the same ``app/broker/schedules`` calls the REST routes make), a template rendered."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from starlette.responses import Response

from app.broker import topics
from app.broker.errors import CODED_ERRORS, InvalidRequest
from app.broker.schedules import service
from app.dashboard.routes import Ctx, _checked_form, _ctx, _message, _services, router
from app.kit.clock import isoformat_ms

LAST_RUNS = 5


async def _render(ctx: Ctx, status: int = 200, **values: Any) -> Response:
    async with _services(ctx.request).metadata.unit(readonly=True) as uow:
        schedules, _ = await service.list_schedules(uow, ctx.scope, limit=1000)
        rows = []
        for schedule in schedules:
            runs = await service.schedule_runs(uow, ctx.scope, schedule.id, limit=LAST_RUNS)
            rows.append(
                {
                    "schedule": schedule,
                    "next_run": isoformat_ms(schedule.next_run_ms) if schedule.next_run_ms else None,
                    "runs": [{"at": isoformat_ms(r.at_ms), "message_id": r.message_id} for r in runs],
                }
            )
        names = [t.name for t in (await topics.list_topics(uow, ctx.scope, limit=1000))[0]]
    return ctx.render("schedules.html", status, rows=rows, topic_names=names, **values)


@router.get("/p/{project_id}/{env}/schedules")
async def schedules_page(request: Request, project_id: str, env: str) -> Response:
    return await _render(await _ctx(request, project_id, env))


@router.post("/p/{project_id}/{env}/schedules")
async def create_schedule(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    kind, expression = form.get("kind", "cron"), form.get("expression", "").strip()
    try:
        try:
            data = json.loads(form.get("data", ""))
        except ValueError:
            raise InvalidRequest.field("data", "not valid JSON") from None
        async with _services(request).metadata.unit() as uow:
            created = await service.create_schedule(
                uow,
                ctx.scope,
                topic=form.get("topic", ""),
                cron=expression if kind == "cron" else None,
                every=expression if kind == "every" else None,
                timezone=form.get("timezone", "").strip() or None,
                data=data,
            )
    except CODED_ERRORS as e:
        return await _render(ctx, 400, error=_message(e), form=form)
    return ctx.back("/schedules", notice=f"Schedule {created.id} created.")


async def _act(request: Request, project_id: str, env: str, schedule_id: str, action: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    await _checked_form(request, ctx.user)
    calls = {
        "pause": service.pause_schedule,
        "resume": service.resume_schedule,
        "delete": service.delete_schedule,
    }
    try:
        async with _services(request).metadata.unit() as uow:
            await calls[action](uow, ctx.scope, schedule_id)
    except CODED_ERRORS as e:
        return ctx.back("/schedules", error=_message(e))
    done = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[action]
    return ctx.back("/schedules", notice=f"Schedule {schedule_id} {done}.")


@router.post("/p/{project_id}/{env}/schedules/{schedule_id}/pause")
async def pause_schedule(request: Request, project_id: str, env: str, schedule_id: str) -> Response:
    return await _act(request, project_id, env, schedule_id, "pause")


@router.post("/p/{project_id}/{env}/schedules/{schedule_id}/resume")
async def resume_schedule(request: Request, project_id: str, env: str, schedule_id: str) -> Response:
    return await _act(request, project_id, env, schedule_id, "resume")


@router.post("/p/{project_id}/{env}/schedules/{schedule_id}/delete")
async def delete_schedule(request: Request, project_id: str, env: str, schedule_id: str) -> Response:
    return await _act(request, project_id, env, schedule_id, "delete")
