"""Security headers on every dashboard answer: pages, partials, redirects, error pages and static files.

The dashboard adds no middleware (the API's hot paths must not see it), so the headers are set where its
answers are made: its routes' class (``DashboardRoute``), its static files (``StaticAssets``) and its
exception handlers (``secure``).

The policy allows only the dashboard's own files: no inline script or style (the templates have none;
the usage charts read their data from a ``<script type="application/json">`` block, which is data, not
code), no ``eval``, nothing framed anywhere (``frame-ancestors 'none'`` and, for older browsers,
``X-Frame-Options: DENY``), forms posted only to the dashboard itself.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

_POLICY_DIRECTIVES = (
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
)
CONTENT_SECURITY_POLICY = "; ".join(_POLICY_DIRECTIVES)

SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def secure(response: Response) -> Response:
    """``response`` with the dashboard's security headers set."""
    response.headers.update(SECURITY_HEADERS)
    return response


class DashboardRoute(APIRoute):
    """A dashboard route: whatever it answers carries the security headers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def secured(request: Request) -> Response:
            return secure(await handler(request))

        return secured


class StaticAssets(StaticFiles):
    """The dashboard's static files, with the security headers too (``nosniff`` matters most here)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        return secure(await super().get_response(path, scope))
