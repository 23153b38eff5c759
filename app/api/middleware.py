"""The request envelope around every call, as one pure ASGI middleware (no per-request task or copy).

It gives each request an id (echoing a valid ``X-Request-Id``), refuses bodies over the cap with 413
before they are read whole, and a path or query holding NUL with 400, answers anything unhandled with the 500 envelope (never internals), adds
rate-limit headers set by the auth dependency, logs one JSON line, and counts the request in metrics
by route template and status.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.metrics import HttpMetrics
from app.errors import UNHANDLED_ANSWERED, error_response, internal_error_response
from app.kit.ids import new_request_id, valid_request_id

logger = logging.getLogger("queuecore.request")


class _BodyTooLarge(Exception):
    pass


class RequestEnvelopeMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, metrics: HttpMetrics) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        incoming = ""
        content_length = -1
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
            elif name == b"content-length":
                try:
                    content_length = int(value)
                except ValueError:
                    content_length = -1
        request_id = incoming if incoming and valid_request_id(incoming) else new_request_id()
        state: dict[str, Any] = scope.setdefault("state", {})
        state["request_id"] = request_id
        status = 500
        response_started = False
        too_large = False
        bytes_in = 0
        bytes_out = 0

        async def send_with_envelope(message: Message) -> None:
            nonlocal status, response_started, bytes_out
            kind = message["type"]
            if too_large and kind.startswith("http.response"):
                # The app caught the refused read and answered its own way (FastAPI turns body-read
                # errors into a 400): drop that; the client gets the 413 envelope below.
                return
            if kind == "http.response.start":
                response_started = True
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                headers.extend(state.get("response_headers", ()))
                message["headers"] = headers
            elif kind == "http.response.body":
                bytes_out += len(message.get("body", b""))
            elif kind == "websocket.accept":
                response_started = True
                status = 101
            elif kind == "websocket.http.response.start":
                # An upgrade refused with an HTTP answer (401, 404, 429…): that status, not a 500.
                response_started = True
                status = message["status"]
            await send(message)

        async def receive_capped() -> Message:
            nonlocal bytes_in, too_large
            message = await receive()
            if message["type"] == "http.request":
                bytes_in += len(message.get("body", b""))
                if bytes_in > self.max_body_bytes:
                    too_large = True
                    raise _BodyTooLarge
            return message

        try:
            if scope["type"] == "http" and content_length > self.max_body_bytes:
                too_large = True
            elif "\x00" in scope["path"] or b"%00" in scope.get("query_string", b""):
                # No name, id or parameter may hold NUL (Postgres cannot store it in text): refused
                # here, for every route and the WebSocket upgrade alike, before any store sees it.
                await error_response(
                    request_id,
                    "INVALID_REQUEST",
                    "The request's path or query contains the NUL character (%00).",
                    400,
                )(scope, receive, send_with_envelope)
            else:
                await self.app(
                    scope, receive_capped if scope["type"] == "http" else receive, send_with_envelope
                )
        except _BodyTooLarge:
            pass
        except ClientDisconnect:
            # The client went before its request was read (or its body timed out in the protocol):
            # nothing to answer, and nothing wrong with the server.
            status = 499
            logger.info("client disconnected", extra={"requestId": request_id})
        except Exception:
            logger.exception("unhandled error", extra={"requestId": request_id})
            if state.get(UNHANDLED_ANSWERED):
                pass  # Starlette's error layer answered with the 500 envelope (errors.py)
            elif response_started or scope["type"] != "http":
                raise
            else:
                await internal_error_response(request_id)(scope, receive, send_with_envelope)
        finally:
            if too_large and not response_started:
                too_large = False  # let our own answer through
                limit_mib = self.max_body_bytes // (1024 * 1024)
                await error_response(
                    request_id,
                    "PAYLOAD_TOO_LARGE",
                    f"The request body exceeds {limit_mib} MiB.",
                    413,
                    headers={"Connection": "close"},
                )(scope, receive, send_with_envelope)
            self._account(scope, state, request_id, status, started, bytes_in, bytes_out)

    def _account(
        self,
        scope: Scope,
        state: dict[str, Any],
        request_id: str,
        status: int,
        started: float,
        bytes_in: int,
        bytes_out: int,
    ) -> None:
        """Metrics, the access log line and the usage event of one finished request."""
        elapsed = time.perf_counter() - started
        route = scope.get("route")
        template = getattr(route, "path", None) or "unmatched"
        method = scope.get("method", "WS")
        self.metrics.observe(method, template, status, elapsed)
        if logger.isEnabledFor(logging.INFO):  # the line's fields cost more than the disabled call
            logger.info(
                "request",
                extra={
                    "requestId": request_id,
                    "keyId": state.get("key_id"),
                    "method": method,
                    "route": template,
                    "status": status,
                    "latencyMs": round(elapsed * 1000, 3),
                    "bytesIn": bytes_in,
                    "bytesOut": bytes_out,
                },
            )
        principal = state.get("principal")
        if principal is not None and state.get("messages"):
            topic = scope.get("path_params", {}).get("name", "")
            self.metrics.observe_publish(
                principal.project_id,
                principal.environment,
                topic,
                state["messages"],
                state.get("data_bytes", 0),
            )
        usage = state.get("usage")
        if principal is not None and usage is not None:
            usage.record(
                {
                    "acceptedAtUs": state.get("accepted_at_us"),
                    "requestId": request_id,
                    "projectId": principal.project_id,
                    "environment": principal.environment,
                    "keyId": principal.key_id,
                    "category": state.get("category"),
                    "method": method,
                    "route": template,
                    "status": status,
                    "bytesIn": bytes_in,
                    "bytesOut": bytes_out,
                    "messages": state.get("messages", 0),
                    "latencyMs": round(elapsed * 1000, 3),
                }
            )
