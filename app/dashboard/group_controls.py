"""A consumer group's controls on its dashboard page: pause (optionally until a time) and resume, the same
``broker/pauses.py`` calls the REST routes make. Same rules as ``routes.py``: the session and its CSRF
token checked, the broker called, back to the group page with a notice."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Request
from starlette.responses import Response

from app.broker import pauses
from app.broker.errors import CODED_ERRORS
from app.dashboard import browser
from app.dashboard.routes import _checked_form, _ctx, _message, _services, _topic_ref, router


def _group_path(topic: str, group: str) -> str:
    return f"/groups/{quote(topic, safe='')}/{quote(group, safe='')}"


@router.post("/p/{project_id}/{env}/groups/{topic}/{group}/pause")
async def group_pause(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    ref = await _topic_ref(ctx, topic)
    try:
        raw = browser.timestamp(form["until"]) if form.get("until") else None
        until = int(raw) if raw is not None and raw.isdigit() else raw
        async with _services(request).metadata.unit() as uow:
            await pauses.pause(uow, ref, group, until)
    except CODED_ERRORS as e:
        return ctx.back(_group_path(topic, group), error=_message(e))
    return ctx.back(_group_path(topic, group), notice="Group paused: no member receives messages.")


@router.post("/p/{project_id}/{env}/groups/{topic}/{group}/resume")
async def group_resume(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    await _checked_form(request, ctx.user)
    ref = await _topic_ref(ctx, topic)
    try:
        async with _services(request).metadata.unit() as uow:
            await pauses.resume(uow, ref, group)
    except CODED_ERRORS as e:
        return ctx.back(_group_path(topic, group), error=_message(e))
    return ctx.back(_group_path(topic, group), notice="Group resumed.")
