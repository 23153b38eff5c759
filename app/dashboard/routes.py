"""The dashboard's routes: each checks the session, scopes to a project the user owns, calls the broker
and renders a template. No business rules here: the same broker calls the REST routes make. This module
holds the router, sessions, CSRF and page context, sign-in, topics and consumer groups; dead letters, API
keys, usage and alerts are in ``account_pages.py``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import orjson
from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from app.broker import groups, inspection, offsets, publishing, sessions, tenancy, topics
from app.broker.errors import CODED_ERRORS, CodedError
from app.broker.topics import TopicRef
from app.dashboard import auth, browser
from app.dashboard.security import DashboardRoute
from app.kit.clock import isoformat_ms, now_ms
from app.kit.digits import is_ascii_digits
from app.services import Services
from app.stores.log.protocol import PartitionInfo

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
router = APIRouter(prefix="/dashboard", include_in_schema=False, route_class=DashboardRoute)

NAV = (
    ("topics", "Topics"),
    ("groups", "Consumer groups"),
    ("dead-letters", "Dead letters"),
    ("keys", "API keys"),
    ("usage", "Usage"),
    ("alerts", "Alerts"),
    ("schedules", "Schedules"),
)


class NotFoundPage(Exception):
    """Answered as the dashboard's 404 page (also for another account's project)."""


class SignInRequired(Exception):
    def __init__(self, next_path: str) -> None:
        self.next_path = next_path


class CsrfRefused(Exception):
    """A state-changing request without this session's CSRF token."""


def _services(request: Request) -> Services:
    """The services built in ``lifespan`` (``app.services``, shared with the API edge without either edge
    importing the other), typed so every store and service the dashboard reaches is checked."""
    services: Services = request.app.state.services
    return services


async def _session_of(request: Request) -> auth.DashboardSession | None:
    """The server-side session the cookie's token opens (its last use recorded), or None."""
    services = _services(request)
    token = request.cookies.get(auth.SESSION_COOKIE)
    if not token:
        return None
    async with services.metadata.unit() as uow:
        return await sessions.resolve(
            uow, token, idle_seconds=services.settings.dashboard_idle_timeout_seconds
        )


async def _require_session(request: Request) -> auth.DashboardSession:
    found = await _session_of(request)
    if found is None:
        raise SignInRequired(request.url.path)
    return found


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded form body (the only kind the dashboard's forms send)."""
    raw = (await request.body()).decode("utf-8", "replace")
    return {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}


async def _checked_form(request: Request, session: auth.DashboardSession) -> dict[str, str]:
    form = await _form(request)
    presented = form.get("csrf_token") or request.headers.get("x-csrf-token")
    if not auth.tokens_match(session.csrf, presented):
        raise CsrfRefused()
    return form


@dataclass
class Ctx:
    """What every page of a project environment knows."""

    request: Request
    user: auth.DashboardSession
    projects: list[tenancy.ProjectView]
    project: tenancy.ProjectView
    env: str

    @property
    def base(self) -> str:
        return f"/dashboard/p/{self.project.id}/{self.env}"

    @property
    def scope(self) -> topics.Scope:
        return topics.Scope(self.project.id, self.env)

    def render(self, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        query = self.request.query_params
        context = {
            "ctx": self,
            "nav": NAV,
            "environments": tenancy.ENVIRONMENTS,
            "csrf": self.user.csrf,
            "notice": values.pop("notice", None) or query.get("notice"),
            "error": values.pop("error", None) or query.get("error"),
            **values,
        }
        return templates.TemplateResponse(self.request, template, context, status_code=status)

    def back(self, path: str, *, notice: str | None = None, error: str | None = None) -> RedirectResponse:
        """303 to ``path`` (which may carry a query) with the notice or error to show there."""
        url = self.base + path
        joiner = "&" if "?" in path else "?"
        if notice:
            url += joiner + "notice=" + quote(notice)
        elif error:
            url += joiner + "error=" + quote(error)
        return RedirectResponse(url, status_code=303)


async def _ctx(request: Request, project_id: str, env: str) -> Ctx:
    user = await _require_session(request)
    if env not in tenancy.ENVIRONMENTS:
        raise NotFoundPage()
    async with _services(request).metadata.unit(readonly=True) as uow:
        owned = await inspection.projects_owned_by(uow, user.user_id)
    project = next((p for p in owned if p.id == project_id), None)
    if project is None:
        raise NotFoundPage()
    return Ctx(request, user, owned, project, env)


def _message(error: CodedError) -> str:
    return browser.message_error(error)


async def _topic_ref(ctx: Ctx, name: str) -> TopicRef:
    try:
        ref: TopicRef = await _services(ctx.request).publisher.topics.resolve(ctx.scope, name)
        return ref
    except CODED_ERRORS:
        raise NotFoundPage() from None


# sign-in -----------------------------------------------------------------------------------------


def _login_page(request: Request, token: str, error: str | None = None, status: int = 200) -> HTMLResponse:
    response = templates.TemplateResponse(
        request,
        "login.html",
        {"csrf": token, "error": error, "next": request.query_params.get("next", "")},
        status_code=status,
    )
    settings = _services(request).settings
    response.set_cookie(auth.LOGIN_CSRF_COOKIE, token, **auth.cookie_options(settings, 3600))
    return response


@router.get("/login")
async def login_form(request: Request) -> Response:
    if await _session_of(request) is not None:
        return RedirectResponse("/dashboard", status_code=303)
    return _login_page(request, auth.new_token())


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    if not auth.tokens_match(request.cookies.get(auth.LOGIN_CSRF_COOKIE), form.get("csrf_token")):
        raise CsrfRefused()
    email, password = form.get("email", "").strip().lower(), form.get("password", "")
    services = _services(request)
    # The socket's peer, or what a trusted proxy says it is (QUEUECORE_TRUSTED_PROXIES, set in ``serve``):
    # X-Forwarded-For from anyone else is ignored, so a client cannot pick the address it is counted as.
    address = request.client.host if request.client else "unknown"
    device = auth.known_device(services.settings, request.cookies.get(auth.DEVICE_COOKIE), email)
    wait = await auth.backoff(services.limiter, email, address, device)
    if wait:
        refused = _login_page(
            request,
            auth.new_token(),
            f"Too many sign-in attempts. Try again in {wait} second{'s' if wait != 1 else ''}.",
            429,
        )
        refused.headers["Retry-After"] = str(wait)
        return refused
    async with services.metadata.unit(readonly=True) as uow:
        user = await tenancy.authenticate_user(uow, email, password)
    if user is None:
        await auth.count_failure(services.limiter, email, address, device)
        return _login_page(request, auth.new_token(), "Wrong email or password.", 401)
    await auth.clear_failures(services.limiter, email, device)
    target = form.get("next", "")
    if not target.startswith("/dashboard/") or target.startswith("//"):
        target = "/dashboard"
    response = RedirectResponse(target, status_code=303)
    async with services.metadata.unit() as uow:
        token, _ = await sessions.open_session(uow, user)
    response.set_cookie(
        auth.SESSION_COOKIE, token, **auth.cookie_options(services.settings, auth.SESSION_SECONDS)
    )
    response.set_cookie(
        auth.DEVICE_COOKIE,
        auth.device_cookie(services.settings, email, device),
        **auth.cookie_options(services.settings, auth.DEVICE_SECONDS),
    )
    response.delete_cookie(auth.LOGIN_CSRF_COOKIE, path=auth.COOKIE_PATH)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    user = await _require_session(request)
    await _checked_form(request, user)
    async with _services(request).metadata.unit() as uow:
        await sessions.end(uow, user.session_id)
    response = RedirectResponse("/dashboard/login", status_code=303)
    response.delete_cookie(auth.SESSION_COOKIE, path=auth.COOKIE_PATH)
    return response


@router.get("")
@router.get("/")
async def home(request: Request) -> Response:
    user = await _require_session(request)
    async with _services(request).metadata.unit(readonly=True) as uow:
        owned = await inspection.projects_owned_by(uow, user.user_id)
    if not owned:
        return templates.TemplateResponse(request, "no_projects.html", {"user": user, "csrf": user.csrf})
    return RedirectResponse(f"/dashboard/p/{owned[0].id}/development/topics", status_code=303)


@router.get("/switch")
async def switch(request: Request) -> Response:
    """The project and environment switcher: the same page in another project or environment."""
    query = request.query_params
    page = query.get("page", "topics")
    if page not in dict(NAV):
        page = "topics"
    ctx = await _ctx(request, query.get("project", ""), query.get("env", ""))
    return RedirectResponse(f"{ctx.base}/{page}", status_code=303)


@router.get("/p/{project_id}/{env}")
async def project_home(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    return RedirectResponse(ctx.base + "/topics", status_code=303)


# topics ------------------------------------------------------------------------------------------


def sparkline(values: list[int], width: int = 120, height: int = 24) -> str:
    """An SVG polyline's points for a small publish-rate chart."""
    top = max(values) or 1
    step = width / max(1, len(values) - 1)
    return " ".join(
        f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}" for i, v in enumerate(values)
    )


async def _topic_rows(ctx: Ctx) -> list[dict[str, Any]]:
    services = _services(ctx.request)
    async with services.metadata.unit(readonly=True) as uow:
        rows, _ = await topics.list_topics(uow, ctx.scope, limit=1000)
    out = []
    for row in rows:
        details = await topics.partition_details(services.log, row)
        rate = await inspection.publish_rate(services.log, row.id, row.partitions)
        out.append(
            {
                "row": row,
                "messages": sum(p.latest_offset - p.earliest_offset for p in details),
                "bytes": sum(p.size_bytes for p in details),
                "rate": rate,
                "spark": sparkline(rate),
            }
        )
    return out


async def _topics_page(ctx: Ctx, form: dict[str, str] | None = None, error: str | None = None) -> Response:
    """The topics page; after a refused create, again with the error and what was typed (status 400)."""
    log = _services(ctx.request).log
    return ctx.render(
        "topics.html",
        status=400 if error else 200,
        rows=await _topic_rows(ctx),
        replica_choices=log.replica_choices,
        default_replicas=log.default_replicas,
        form=form or {},
        error=error,
    )


@router.get("/p/{project_id}/{env}/topics")
async def topics_page(request: Request, project_id: str, env: str) -> Response:
    return await _topics_page(await _ctx(request, project_id, env))


@router.get("/p/{project_id}/{env}/topics-table")
async def topics_table(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    return ctx.render("_topics_table.html", rows=await _topic_rows(ctx))


@router.post("/p/{project_id}/{env}/topics")
async def create_topic(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    services = _services(request)
    name = form.get("name", "").strip()
    try:
        partitions = int(form.get("partitions") or 3)
        replicas = int(form["replicas"]) if form.get("replicas") else None
        async with services.metadata.unit() as uow:
            await topics.create_topic(
                uow,
                services.log,
                ctx.scope,
                name,
                retention=form.get("retention") or "7d",
                delivery=form.get("delivery") or "exactly-once",
                partitions=partitions,
                replicas=replicas,
            )
    except ValueError:
        return await _topics_page(ctx, form, "Partitions and replicas must be whole numbers.")
    except CODED_ERRORS as e:
        return await _topics_page(ctx, form, _message(e))
    services.publisher.topic_changed(ctx.scope, name)
    return ctx.back("/topics/" + quote(name, safe=""), notice=f"Topic {name} created.")


async def _partitions(ctx: Ctx, name: str) -> tuple[topics.TopicView, list[PartitionInfo]]:
    services = _services(ctx.request)
    async with services.metadata.unit(readonly=True) as uow:
        try:
            row = await topics.get_topic(uow, ctx.scope, name)
        except CODED_ERRORS:
            raise NotFoundPage() from None
    return row, await topics.partition_details(services.log, row)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


@router.get("/p/{project_id}/{env}/topics/{name}")
async def topic_page(request: Request, project_id: str, env: str, name: str) -> Response:
    return await _topic_page(await _ctx(request, project_id, env), name)


async def _topic_page(
    ctx: Ctx, name: str, form: dict[str, str] | None = None, refused: str | None = None
) -> Response:
    """A topic with its message browser; after a refused publish, again with the error and what was
    typed (status 400)."""
    request = ctx.request
    row, details = await _partitions(ctx, name)
    query = request.query_params
    browse = await browser.browse(_services(request).log, await _topic_ref(ctx, name), query)
    return ctx.render(
        "topic.html",
        topic=row,
        details=details,
        browse=browse,
        # Only a read shows the table: a notice or error redirect (?notice=…) is no read of partition 0.
        browsed="partition" in query,
        error=refused or browse.error,
        form=form or {},
        status=400 if refused else 200,
    )


@router.get("/p/{project_id}/{env}/topics/{name}/partitions")
async def topic_partitions(request: Request, project_id: str, env: str, name: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    row, details = await _partitions(ctx, name)
    return ctx.render("_partitions.html", topic=row, details=details)


@router.post("/p/{project_id}/{env}/topics/{name}/publish")
async def publish_test(request: Request, project_id: str, env: str, name: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    path = "/topics/" + quote(name, safe="")
    text = form.get("data") or "null"
    try:
        # Parsed as the API parses a body (orjson): no NaN, no lone surrogates, the same nesting limit.
        body: dict[str, Any] = {"data": orjson.loads(text)}
        if form.get("key"):
            body["key"] = form["key"]
        if form.get("headers", "").strip():
            body["headers"] = orjson.loads(form["headers"])
    except orjson.JSONDecodeError as e:
        return await _topic_page(ctx, name, form, f"Not valid JSON: {e.msg}.")
    services = _services(request)
    try:
        message = publishing.parse_message(body)
        publishing.check_integers(text, (message.data,), batch=False)
        topic, placed, _ = await services.publisher.publish(ctx.scope, name, message)
    except CODED_ERRORS as e:
        return await _topic_page(ctx, name, form, _message(e))
    result = services.publisher.result(topic, placed)
    # Back to the browser opened at the new message, so it is on the page with the notice.
    return ctx.back(
        f"{path}?partition={result['partition']}&from_offset={result['offset']}",
        notice=f"Published {result['messageId'] if 'messageId' in result else result.get('id')} "
        f"to partition {result['partition']} at offset {result['offset']}.",
    )


@router.post("/p/{project_id}/{env}/topics/{name}/delete")
async def delete_topic(request: Request, project_id: str, env: str, name: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    if form.get("confirm_name") != name:
        return ctx.back("/topics/" + quote(name, safe=""), error="Type the topic's name to delete it.")
    services = _services(request)
    try:
        topic_id = await topics.delete_topic(services.metadata, services.log, ctx.scope, name)
    except CODED_ERRORS as e:
        return ctx.back("/topics", error=_message(e))
    services.publisher.topic_deleted(ctx.scope, name, topic_id)
    return ctx.back("/topics", notice=f"Topic {name} deleted.")


# consumer groups ---------------------------------------------------------------------------------


async def _all_groups(ctx: Ctx) -> list[dict[str, Any]]:
    services = _services(ctx.request)
    out = []
    async with services.metadata.unit(readonly=True) as uow:
        rows, _ = await topics.list_topics(uow, ctx.scope, limit=1000)
        depths = await inspection.dead_letter_depths(uow)
        for row in rows:
            ref = await _topic_ref(ctx, row.name)
            for summary in await groups.list_groups(uow, services.log, ref):
                group = await groups.get_group(uow, ref, summary.name)
                out.append(
                    {
                        "topic": row.name,
                        "name": summary.name,
                        "consumers": summary.consumers,
                        "lag": summary.lag,
                        "dead_letters": depths.get(group.id, 0),
                        "keeps_dead_letters": group.dead_letter is not None,
                    }
                )
    return out


@router.get("/p/{project_id}/{env}/groups")
async def groups_page(request: Request, project_id: str, env: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    return ctx.render("groups.html", groups=await _all_groups(ctx))


async def _group_view(ctx: Ctx, topic: str, group: str) -> dict[str, Any]:
    services = _services(ctx.request)
    ref = await _topic_ref(ctx, topic)
    async with services.metadata.unit(readonly=True) as uow:
        try:
            detail = await groups.describe_group(uow, services.log, ref, group)
            health = await inspection.group_health(uow, services.log, ref, group)
        except CODED_ERRORS:
            raise NotFoundPage() from None
    now = now_ms()
    members = [
        {
            "id": m.id,
            "partitions": m.partitions,
            "heartbeat": isoformat_ms(m.last_heartbeat_ms),
            "ago": max(0.0, (now - m.last_heartbeat_ms) / 1000),
            "push": m.push,
        }
        for m in health.members
    ]
    return {
        "topic": topic,
        "group": group,
        "config": detail.config,
        "members": members,
        "partitions": health.partitions,
        "lag": sum(p.lag for p in health.partitions),
        "dead_letter_depth": health.dead_letter_depth,
        "pause": detail.pause,
    }


@router.get("/p/{project_id}/{env}/groups/{topic}/{group}")
async def group_page(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    return ctx.render("group.html", **await _group_view(ctx, topic, group))


@router.get("/p/{project_id}/{env}/groups/{topic}/{group}/live")
async def group_live(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    return ctx.render("_group_live.html", **await _group_view(ctx, topic, group))


@router.post("/p/{project_id}/{env}/groups/{topic}/{group}/config")
async def group_config(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    path = f"/groups/{quote(topic, safe='')}/{quote(group, safe='')}"
    ref = await _topic_ref(ctx, topic)
    dead_letter: dict[str, Any] | None = None
    try:
        if form.get("dlq_enabled"):
            dead_letter = {
                "maxRetries": int(form.get("max_retries") or 5),
                "retryDelay": form.get("retry_delay") or "30s",
                "alertThreshold": int(form.get("alert_threshold") or 100),
                "breaker": {
                    "failureRate": float(form.get("breaker_failure_rate") or 0.5),
                    "minAttempts": int(form.get("breaker_min_attempts") or 100),
                    "window": form.get("breaker_window") or "60s",
                }
                if form.get("breaker_enabled")
                else None,
            }
        async with _services(request).metadata.unit() as uow:
            await groups.upsert_config(
                uow,
                ref,
                group,
                ack_timeout=form.get("ack_timeout") or None,
                session_timeout=form.get("session_timeout") or None,
                dead_letter=dead_letter,
            )
    except ValueError:
        error = "Max retries, alert threshold and minimum attempts must be whole numbers; the failure rate a number."
    except CODED_ERRORS as e:
        error = _message(e)
    else:
        return ctx.back(path, notice="Configuration saved.")
    # Refused: the page again with the error and what was typed, not the saved values.
    view = await _group_view(ctx, topic, group)
    return ctx.render("group.html", status=400, error=error, form=form, **view)


@router.post("/p/{project_id}/{env}/groups/{topic}/{group}/reset")
async def group_reset(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    path = f"/groups/{quote(topic, safe='')}/{quote(group, safe='')}"
    ref = await _topic_ref(ctx, topic)
    target: object = form.get("to", "")
    if target == "offset":
        raw = form.get("offset", "")
        target = int(raw) if is_ascii_digits(raw) else raw
    services = _services(request)
    try:
        async with services.metadata.unit() as uow:
            if target == "time":
                # The API's seek by timestamp, every partition: the first message at or after the time.
                at = browser.timestamp(form.get("time", ""))
                for partition in range(ref.partitions):
                    await offsets.seek(uow, services.log, ref, group, partition, timestamp=at)
            else:
                await offsets.reset_stopped(uow, services.log, ref, group, target)
    except CODED_ERRORS as e:
        return ctx.back(path, error=_message(e))
    return ctx.back(path, notice="Offsets moved to the time." if target == "time" else "Offsets reset.")


# dead letters ------------------------------------------------------------------------------------
