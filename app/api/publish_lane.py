"""``POST /v1/topics/{name}/messages`` served straight from the middleware stack.

The single publish is the hottest call and its endpoint is small (auth and rate limit in line, an
orjson body, one append); on the way to it Starlette's routing, FastAPI's exception and exit-stack
middlewares and its request-handler wrapping cost about as much again (py-spy, bench/README.md). This
middleware sits right inside the request envelope, so ids, the body cap, logs, metrics and usage stay
exactly as for every call, and hands that one path and method to the same endpoint function, its
errors to the app's own exception handlers. The route stays registered: the OpenAPI description, 405s
for other methods, and every other path go through the app as before.
"""

from __future__ import annotations

import re

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api import messages
from app.broker.errors import BrokerError
from app.errors import ApiError

_PATH = re.compile(r"^/v1/topics/([^/]+)/messages$")
_TEMPLATE = "/v1/topics/{name}/messages"


class PublishLane:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The registered route, for the route template in metrics and logs.
        self._route = next(
            r for r in messages.router.routes if isinstance(r, APIRoute) and r.path == _TEMPLATE
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _PATH.match(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        app = scope["app"]
        name = match.group(1)
        scope["route"] = self._route
        scope["path_params"] = {"name": name}
        request = Request(scope, receive)
        try:
            response = await messages.publish(name, request)
        except (ApiError, BrokerError) as error:
            handler = app.exception_handlers[ApiError if isinstance(error, ApiError) else BrokerError]
            response = await handler(request, error)
        await response(scope, receive, send)
