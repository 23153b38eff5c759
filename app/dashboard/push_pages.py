"""Dashboard page of a push group: its endpoint and options, the breaker, recent attempts (status,
latency, error), and "send a test event" (a signed POST to the URL now, its answer shown).

It hangs on ``routes.router`` beside the group page (``routes.py``) and, like every dashboard page, calls
the broker, never the REST API."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Request
from starlette.responses import Response

from app.broker import push_groups
from app.broker.delivery import url_push
from app.broker.errors import CODED_ERRORS
from app.dashboard.routes import NotFoundPage, _checked_form, _ctx, _message, _services, _topic_ref, router


def _push_path(topic: str, group: str) -> str:
    return f"/groups/{quote(topic, safe='')}/{quote(group, safe='')}/push"


@router.get("/p/{project_id}/{env}/groups/{topic}/{group}/push")
async def push_page(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    services = _services(request)
    ref = await _topic_ref(ctx, topic)
    async with services.metadata.unit(readonly=True) as uow:
        config = await push_groups.push_view(uow, services.push_policy, ref, group)
        attempts = []
        if config is not None:
            try:
                attempts = await push_groups.recent_attempts(uow, ref, group, 50)
            except CODED_ERRORS:
                raise NotFoundPage() from None
    return ctx.render("push.html", topic=topic, group=group, push=config, attempts=attempts)


@router.post("/p/{project_id}/{env}/groups/{topic}/{group}/push/test")
async def push_test(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    await _checked_form(request, ctx.user)
    services = _services(request)
    ref = await _topic_ref(ctx, topic)
    try:
        async with services.metadata.unit(readonly=True) as uow:
            endpoint = await push_groups.endpoint_of(uow, ref, group)
        outcome = await url_push.send_test_event(
            services.push_workers.client, services.push_policy, endpoint, topic, group
        )
    except CODED_ERRORS as e:
        return ctx.back(_push_path(topic, group), error=_message(e))
    if outcome.ok:
        return ctx.back(
            _push_path(topic, group),
            notice=f"Test event answered {outcome.status} in {outcome.latency_ms} ms.",
        )
    return ctx.back(_push_path(topic, group), error=f"Test event failed: {outcome.error}")
