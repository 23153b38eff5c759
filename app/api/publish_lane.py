"""``POST /v1/topics/{name}/messages`` and ``…/messages/batch`` served straight from the middleware stack.

The publishes are the hottest calls and their endpoints are small (auth and rate limit in line, an
orjson body, one append); on the way to them Starlette's error and body-limit layers, its routing,
FastAPI's exception and exit-stack middlewares, its request-handler wrapping and Starlette's request
and response objects cost about as much again (py-spy, bench/README.md). This middleware sits right
inside the request envelope, so ids, the body cap, logs, metrics and usage stay exactly as for every
call: it reads the two headers and the body it needs from the ASGI scope, calls the same publish as the
route (``messages.publish_one`` or ``messages.publish_many``) and answers with two ASGI messages; errors
go to the app's own exception handlers. The routes stay registered: the OpenAPI description, 405s for
other methods, and every other path go through the app as before.
"""

from __future__ import annotations

import re
import time

from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api import messages
from app.api.deps import authenticate_bearer
from app.broker.errors import CODED_ERRORS
from app.broker.rate_limits import Category
from app.errors import ApiError
from app.services import Services

_PATH = re.compile(r"^/v1/topics/([^/]+)/messages(/batch)?$")
_TEMPLATE = "/v1/topics/{name}/messages"
_BATCH_TEMPLATE = "/v1/topics/{name}/messages/batch"
_JSON = (b"content-type", b"application/json")
_REPLAYED = (b"idempotent-replayed", b"true")


class PublishLane:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The registered routes, for the route template in metrics and logs.
        routes = {r.path: r for r in messages.router.routes if isinstance(r, APIRoute)}
        self._route, self._batch_route = routes[_TEMPLATE], routes[_BATCH_TEMPLATE]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = (
            _PATH.fullmatch(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        )
        if match is None:
            await self.app(scope, receive, send)
            return
        app = scope["app"]
        name, batch = match.group(1), match.group(2) is not None
        scope["route"] = self._batch_route if batch else self._route
        scope["path_params"] = {"name": name}
        authorization = ""
        idempotency_key: str | None = None
        traceparent: str | None = None
        tracestate: str | None = None
        for header, value in scope["headers"]:  # the first of each, as Starlette's ``Headers.get``
            if header == b"authorization" and not authorization:
                authorization = value.decode("latin-1")
            elif header == b"idempotency-key" and idempotency_key is None:
                idempotency_key = value.decode("latin-1")
            elif header == b"traceparent" and traceparent is None:
                traceparent = value.decode("latin-1")
            elif header == b"tracestate" and tracestate is None:
                tracestate = value.decode("latin-1")
        try:
            services: Services = app.state.services
            state = scope["state"]
            key = await authenticate_bearer(services, state, authorization, Category.publish)
            if batch:
                started = time.perf_counter()
                body, replayed = await messages.publish_many(
                    services,
                    state,
                    key,
                    name,
                    await _read(receive),
                    started,
                    messages.trace_context(traceparent, tracestate),
                )
            else:
                body, replayed = await messages.publish_one(
                    services,
                    state,
                    key,
                    name,
                    idempotency_key,
                    await _read(receive),
                    messages.trace_context(traceparent, tracestate),
                )
        except (ApiError, *CODED_ERRORS) as error:
            request = Request(scope, receive)
            # The handler registered for the error's class, found as Starlette finds it (by the MRO).
            handler = app.exception_handlers[
                next(k for k in type(error).__mro__ if k in app.exception_handlers)
            ]
            response = await handler(request, error)
            await response(scope, receive, send)
            return
        headers = [_JSON, (b"content-length", b"%d" % len(body))]
        if replayed:
            headers.append(_REPLAYED)
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _read(receive: Receive) -> bytes:
    """The whole request body (the envelope's ``receive`` enforces the size cap)."""
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        return body
    chunks = [body]
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect  # gone mid-body: never publish a part of it
        chunks.append(message.get("body", b""))
    return b"".join(chunks)
