"""The admin dashboard at ``/dashboard``: a second edge beside ``app/api``, server-rendered (Jinja2 +
htmx), calling the broker directly. ``install(app)`` adds its router (outside the OpenAPI schema), its
static files and its error pages; it adds no middleware, so the API's hot paths do not see it."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from app.dashboard import (  # noqa: F401 - the page modules register their pages
    account_pages,
    auth,
    group_controls,
    group_flow,
    project_pages,
    push_pages,
    schedule_pages,
)
from app.dashboard.routes import HERE, CsrfRefused, NotFoundPage, SignInRequired, router, templates
from app.dashboard.security import StaticAssets, secure

STATIC_DIR = HERE / "static"


async def _not_found(request: Request, exc: Exception) -> Response:
    return secure(
        templates.TemplateResponse(request, "error.html", {"title": "Not found", "status": 404}, 404)
    )


async def _sign_in(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    response: Response
    if request.headers.get("hx-request"):
        response = HTMLResponse("", headers={"HX-Redirect": "/dashboard/login"})
    else:
        response = RedirectResponse(f"/dashboard/login?next={exc.next_path}", status_code=303)
    # A session that is no longer good (password changed) must not send the sign-in page back here.
    response.delete_cookie(auth.SESSION_COOKIE, path=auth.COOKIE_PATH)
    return secure(response)


async def _csrf(request: Request, exc: Exception) -> Response:
    return secure(
        templates.TemplateResponse(
            request, "error.html", {"title": "Form expired or forged (CSRF check failed)", "status": 403}, 403
        )
    )


def install(application: FastAPI) -> None:
    application.include_router(router)
    application.mount(
        "/dashboard/static", StaticAssets(directory=STATIC_DIR, check_dir=False), name="dashboard"
    )
    application.add_exception_handler(NotFoundPage, _not_found)
    application.add_exception_handler(SignInRequired, _sign_in)
    application.add_exception_handler(CsrfRefused, _csrf)
