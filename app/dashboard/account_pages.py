"""Dashboard pages of a project environment's account side: dead letters, API keys, usage and alerts.

They hang on ``routes.router`` beside the topic and group pages (``routes.py``), and use its session,
CSRF and context helpers; like every dashboard page they call the broker, never the REST API."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

import orjson
from fastapi import Request
from starlette.responses import HTMLResponse, Response

from app.broker import alerts, dead_letters, keys, quotas
from app.broker.errors import CODED_ERRORS
from app.broker.rate_limits import limit_for
from app.dashboard.routes import (
    Ctx,
    NotFoundPage,
    _all_groups,
    _checked_form,
    _ctx,
    _message,
    _pretty,
    _services,
    _topic_ref,
    router,
    templates,
)
from app.dashboard.usage import CATEGORIES, WINDOWS, RollupUsageSource, UsageSource, window_bounds
from app.kit.clock import now_ms
from app.stores.metadata.protocol import MetadataUnit


@router.get("/p/{project_id}/{env}/dead-letters")
async def dead_letters_page(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    return ctx.render("dead_letters.html", groups=await _all_groups(ctx))


@router.get("/p/{project_id}/{env}/dead-letters/{topic}/{group}")
async def group_dead_letters_page(
    request: Request, project_id: str, env: str, topic: str, group: str
) -> Response:
    ctx = await _ctx(request, project_id, env)
    services = _services(request)
    ref = await _topic_ref(ctx, topic)
    cursor = request.query_params.get("cursor") or None
    try:
        async with services.metadata.unit(readonly=True) as uow:
            page = await dead_letters.inspect(uow, services.log, ref, group, limit=50, cursor=cursor)
            audit = await dead_letters.audit(uow, ref, group, limit=50)
    except CODED_ERRORS:
        raise NotFoundPage() from None
    letters = [orjson.loads(e) for e in page.entries]
    for letter in letters:
        letter["pretty"] = _pretty(letter.get("data"))
    return ctx.render(
        "dlq.html",
        topic=topic,
        group=group,
        letters=letters,
        total=page.total,
        next_cursor=page.next_cursor,
        audit=audit.entries,
    )


def _group_dead_letters_path(topic: str, group: str) -> str:
    return f"/dead-letters/{quote(topic, safe='')}/{quote(group, safe='')}"


@router.post("/p/{project_id}/{env}/dead-letters/{topic}/{group}/replay")
async def dead_letter_replay(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    ref = await _topic_ref(ctx, topic)
    actor = dead_letters.Actor("user", ctx.user.user_id)
    try:
        await dead_letters.replay(_services(request).metadata, ref, group, form.get("message_id", ""), actor)
    except CODED_ERRORS as e:
        return ctx.back(_group_dead_letters_path(topic, group), error=_message(e))
    return ctx.back(_group_dead_letters_path(topic, group), notice=f"Replayed {form.get('message_id')}.")


@router.post("/p/{project_id}/{env}/dead-letters/{topic}/{group}/replay-all")
async def dead_letter_replay_all(
    request: Request, project_id: str, env: str, topic: str, group: str
) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    ref = await _topic_ref(ctx, topic)
    actor = dead_letters.Actor("user", ctx.user.user_id)
    try:
        rate = dead_letters.validate_rate(float(form["rate"])) if form.get("rate") else None
        count = await dead_letters.replay_all(_services(request).metadata, ref, group, actor, rate=rate)
    except ValueError:
        return ctx.back(
            _group_dead_letters_path(topic, group), error="The rate must be a number of messages per second."
        )
    except CODED_ERRORS as e:
        return ctx.back(_group_dead_letters_path(topic, group), error=_message(e))
    return ctx.back(_group_dead_letters_path(topic, group), notice=f"Replayed {count} dead letters.")


@router.post("/p/{project_id}/{env}/dead-letters/{topic}/{group}/delete")
async def dead_letter_delete(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    ref = await _topic_ref(ctx, topic)
    actor = dead_letters.Actor("user", ctx.user.user_id)
    try:
        await dead_letters.delete(_services(request).metadata, ref, group, form.get("message_id", ""), actor)
    except CODED_ERRORS as e:
        return ctx.back(_group_dead_letters_path(topic, group), error=_message(e))
    return ctx.back(_group_dead_letters_path(topic, group), notice=f"Deleted {form.get('message_id')}.")


# API keys ----------------------------------------------------------------------------------------


async def _keys(ctx: Ctx, uow: MetadataUnit) -> list[dict[str, Any]]:
    rows = await keys.list_keys(uow, ctx.project.id)
    return [keys.key_view(r) for r in rows if r.environment == ctx.env]


@router.get("/p/{project_id}/{env}/keys")
async def keys_page(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    async with _services(request).metadata.unit(readonly=True) as uow:
        views = await _keys(ctx, uow)
    return ctx.render("keys.html", keys=views, issued=None, limit=keys.MAX_ACTIVE_KEYS_PER_ENVIRONMENT)


@router.post("/p/{project_id}/{env}/keys")
async def create_key(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    await _checked_form(request, ctx.user)
    services = _services(request)
    try:
        async with services.metadata.unit() as uow:
            issued = await keys.create_key(uow, services.settings.server_secret(), ctx.project.id, env)
    except CODED_ERRORS as e:
        return ctx.back("/keys", error=_message(e))
    async with services.metadata.unit(readonly=True) as uow:
        views = await _keys(ctx, uow)
    # The secret is in this one answer (never in a URL, a log or a later page).
    response = ctx.render("keys.html", keys=views, issued=issued, limit=keys.MAX_ACTIVE_KEYS_PER_ENVIRONMENT)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/p/{project_id}/{env}/keys/{key_id}/revoke")
async def revoke_key(request: Request, project_id: str, env: str, key_id: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    await _checked_form(request, ctx.user)
    services = _services(request)
    async with services.metadata.unit() as uow:
        if key_id not in {k["id"] for k in await _keys(ctx, uow)}:
            raise NotFoundPage()
        row = await keys.revoke_key(uow, key_id)
    services.keys.forget()  # this process refuses it at once; the others within their cache TTL
    return ctx.back("/keys", notice=f"Key {row.prefix}…{row.last_four} revoked.")


# usage -------------------------------------------------------------------------------------------


def usage_source(request: Request) -> UsageSource:
    services = _services(request)
    return RollupUsageSource(services.metadata, services.log)


@router.get("/p/{project_id}/{env}/usage")
async def usage_page(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    query = request.query_params
    window = query.get("window", "hour") if query.get("window") in WINDOWS else "hour"
    key_id = query.get("key") or None
    category = query.get("category") if query.get("category") in CATEGORIES else None
    start, end, bucket = window_bounds(window, now_ms())
    series = await usage_source(request).series(
        ctx.project.id, env, start_ms=start, end_ms=end, bucket_ms=bucket, key_id=key_id, category=category
    )
    services = _services(request)
    stored = await services.stored_bytes.measure(ctx.project.id)
    async with services.metadata.unit(readonly=True) as uow:
        key_views = await _keys(ctx, uow)
        quota_uses = await quotas.usage(
            uow,
            ctx.project.id,
            env,
            quotas.QuotaLimits(ctx.project.tier, ctx.project.custom_limits),
            stored,
        )
    limits = {c: limit_for(ctx.project.tier, ctx.project.custom_limits, c) for c in CATEGORIES}
    stamps = [(start + i * bucket) // 1000 for i in range(len(series.requests))]
    charts = {
        "requests": {"x": stamps, "y": series.requests, "label": "Requests"},
        "peak": {
            "x": stamps,
            "y": series.peak_per_second,
            "label": "Busiest second (req/s)",
            "limit": limits[category] if category else None,
        },
        "messages": {"x": stamps, "y": series.messages, "label": "Messages"},
        "bytes": {"x": stamps, "y": series.bytes, "label": "Bytes", "unit": "bytes"},
        "throttled": {"x": stamps, "y": series.throttled, "label": "429 responses"},
    }
    return ctx.render(
        "usage.html",
        window=window,
        windows=list(WINDOWS),
        key_id=key_id or "",
        category=category or "",
        categories=CATEGORIES,
        keys=key_views,
        totals=series.totals,
        limits=limits,
        quotas=quota_uses,
        charts=charts,
        charts_json=json.dumps(charts),
    )


# alerts ------------------------------------------------------------------------------------------


@router.get("/p/{project_id}/{env}/alerts")
async def alerts_page(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    return await _alerts(ctx)


async def _alerts(ctx: Ctx, secret: str | None = None) -> HTMLResponse:
    services = _services(ctx.request)
    async with services.metadata.unit(readonly=True) as uow:
        try:
            endpoint: alerts.EndpointView | None = await alerts.get_endpoint(
                uow, services.alerts.policy, ctx.project.id, ctx.env
            )
        except CODED_ERRORS:
            endpoint = None
        attempts = await alerts.deliveries(uow, ctx.project.id, ctx.env, limit=50)
    response = ctx.render("alerts.html", endpoint=endpoint, attempts=attempts.entries, secret=secret)
    if secret:
        response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/p/{project_id}/{env}/alerts/endpoint")
async def set_alert_endpoint(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    services = _services(request)
    try:
        async with services.metadata.unit() as uow:
            view = await alerts.set_endpoint(
                uow, services.alerts.policy, ctx.project.id, env, form.get("url", "").strip(), None
            )
    except CODED_ERRORS as e:
        return ctx.back("/alerts", error=_message(e))
    return await _alerts(ctx, secret=view.secret)


@router.post("/p/{project_id}/{env}/alerts/test")
async def send_test_alert(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    await _checked_form(request, ctx.user)
    services = _services(request)
    try:
        async with services.metadata.unit() as uow:
            event_id = await alerts.send_test_event(uow, ctx.project.id, env)
    except CODED_ERRORS as e:
        return ctx.back("/alerts", error=_message(e))
    services.alerts.wake()
    return ctx.back("/alerts", notice=f"Test event {event_id} queued.")


def _since(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


templates.env.filters["since"] = _since


def _bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


templates.env.filters["bytes"] = _bytes
templates.env.globals["now"] = time.time
