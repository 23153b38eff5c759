"""The account's own pages, outside any one project: its projects (create one; each project's
environments, tier and request limits) and account settings (change the password, which ends every other
session). Same rules as ``routes.py``: the session checked, the broker called, a template rendered."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Request
from starlette.responses import RedirectResponse, Response

from app.broker import inspection, sessions, tenancy, topics
from app.broker.errors import CODED_ERRORS
from app.broker.rate_limits import Tier, limit_for
from app.dashboard import auth
from app.dashboard.routes import (
    _checked_form,
    _message,
    _require_session,
    _services,
    router,
    templates,
)

CATEGORIES = ("publish", "consume", "admin")
MIN_PASSWORD = 8


def _page(request: Request, template: str, status: int = 200, **values: Any) -> Response:
    query = request.query_params
    context = {
        "notice": values.pop("notice", None) or query.get("notice"),
        "error": values.pop("error", None) or query.get("error"),
        **values,
    }
    return templates.TemplateResponse(request, template, context, status_code=status)


async def _project_rows(request: Request, user: auth.DashboardSession) -> list[dict[str, Any]]:
    async with _services(request).metadata.unit(readonly=True) as uow:
        owned = await inspection.projects_owned_by(uow, user.user_id)
        rows = []
        for project in owned:
            environments = []
            for env in tenancy.ENVIRONMENTS:
                listed, _ = await topics.list_topics(uow, topics.Scope(project.id, env), limit=1000)
                environments.append({"name": env, "topics": len(listed)})
            limits = {c: limit_for(project.tier, project.custom_limits, c) for c in CATEGORIES}
            rows.append({"project": project, "environments": environments, "limits": limits})
    return rows


@router.get("/projects")
async def projects_page(request: Request) -> Response:
    user = await _require_session(request)
    return _page(request, "projects.html", user=user, csrf=user.csrf, rows=await _project_rows(request, user))


@router.post("/projects")
async def create_project(request: Request) -> Response:
    user = await _require_session(request)
    form = await _checked_form(request, user)
    name = form.get("name", "").strip()
    try:
        async with _services(request).metadata.unit() as uow:
            project = await tenancy.create_project(uow, name, Tier.developer, owner_id=user.user_id)
    except CODED_ERRORS as e:
        rows = await _project_rows(request, user)
        return _page(
            request, "projects.html", 400, user=user, csrf=user.csrf, rows=rows, error=_message(e), name=name
        )
    notice = quote(f"Project {project.name} created.")
    return RedirectResponse(f"/dashboard/p/{project.id}/development/topics?notice={notice}", status_code=303)


@router.get("/account")
async def account_page(request: Request) -> Response:
    user = await _require_session(request)
    return _page(request, "account.html", user=user, csrf=user.csrf)


@router.post("/account/password")
async def change_password(request: Request) -> Response:
    """A new password: every session of the account ends; this browser gets a new one."""
    user = await _require_session(request)
    form = await _checked_form(request, user)
    services = _services(request)
    current, new, again = form.get("current", ""), form.get("new", ""), form.get("again", "")
    error = None
    async with services.metadata.unit() as uow:
        row = await tenancy.get_user_by_email(uow, user.email)
        if row is None or row.id != user.user_id:
            error = "The account is gone."
        elif not tenancy.verify_password(row, current):
            error = "The current password is wrong."
        elif len(new) < MIN_PASSWORD:
            error = f"The new password must be at least {MIN_PASSWORD} characters."
        elif new != again:
            error = "The new password and its confirmation differ."
        else:
            await tenancy.set_password(uow, row, new)
            await sessions.end_all(uow, row.id)
            token, _ = await sessions.open_session(uow, row)
    if error:
        return _page(request, "account.html", 400, user=user, csrf=user.csrf, error=error)
    response = RedirectResponse(
        "/dashboard/account?notice=" + quote("Password changed. Other sessions are signed out."),
        status_code=303,
    )
    response.set_cookie(
        auth.SESSION_COOKIE, token, **auth.cookie_options(services.settings, auth.SESSION_SECONDS)
    )
    return response
