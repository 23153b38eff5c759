"""The error envelope, in one place.

Every non-2xx answer is ``{"error": {code, message, status, requestId, details?}}``: raised ``ApiError``s,
domain ``BrokerError``s, the stores' ``StoreUnavailable`` and the log engine's ``UnknownLog`` (a topic
deleted under the call: 404 ``TOPIC_NOT_FOUND``) (mapped by ``STATUS_BY_CODE``), FastAPI's
validation errors (400, never 422), Starlette's 404/405, and anything unhandled (500, no internals;
answered by the request middleware).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match

from app.broker.errors import CODED_ERRORS, BrokerError, CodedError, TopicNotFound
from app.stores.errors import StoreUnavailable
from app.stores.log.protocol import UnknownLog

logger = logging.getLogger("queuecore.errors")

STATUS_BY_CODE: dict[str, int] = {
    "INVALID_API_KEY": 401,
    "FORBIDDEN": 403,
    "TOPIC_NOT_FOUND": 404,
    "GROUP_NOT_FOUND": 404,
    "MESSAGE_NOT_FOUND": 404,
    "MEMBER_NOT_FOUND": 404,
    "ALERT_ENDPOINT_NOT_FOUND": 404,
    "NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "NOT_ACCEPTABLE": 406,
    "INVALID_REQUEST": 400,
    "OFFSET_OUT_OF_RANGE": 400,
    "QUOTA_EXCEEDED": 403,
    "TOPIC_ALREADY_EXISTS": 409,
    "GROUP_ACTIVE": 409,
    "STALE_GENERATION": 409,
    "KEY_LIMIT_REACHED": 409,
    "CONFLICT": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "RATE_LIMIT_EXCEEDED": 429,
    "SERVICE_UNAVAILABLE": 503,
    "INTERNAL_ERROR": 500,
}


class ApiError(Exception):
    """An error answered with the envelope; raise it from the edge."""

    def __init__(
        self,
        code: str,
        message: str,
        status: int | None = None,
        details: list[dict[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or STATUS_BY_CODE.get(code, 500)
        self.details = details
        self.headers = dict(headers or {})

    @classmethod
    def from_broker(cls, exc: CodedError) -> ApiError:
        return cls(exc.code, exc.message, STATUS_BY_CODE.get(exc.code, 500), exc.details)


class ErrorDetail(BaseModel):
    field: str
    issue: str
    # OFFSET_OUT_OF_RANGE only: the partition's bounds.
    earliestOffset: int | None = None
    latestOffset: int | None = None


class ErrorBody(BaseModel):
    code: str
    message: str
    status: int
    requestId: str
    details: list[ErrorDetail] | None = None


class ErrorEnvelope(BaseModel):
    """Every non-2xx answer."""

    error: ErrorBody


def coded_error_body(request_id: str, error: Any) -> dict[str, Any]:
    """The envelope's ``error`` object for a coded error (a ``BrokerError``, a store's ``StoreUnavailable``),
    as frames and events carry it where no HTTP answer can (WebSocket ``error`` frames, SSE ``error``
    events)."""
    body: dict[str, Any] = {
        "code": error.code,
        "message": error.message,
        "status": STATUS_BY_CODE.get(error.code, 500),
        "requestId": request_id,
    }
    if error.details:
        body["details"] = error.details
    return body


def error_response(
    request_id: str,
    code: str,
    message: str,
    status: int,
    details: list[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {"code": code, "message": message, "status": status, "requestId": request_id}
    if details:
        body["details"] = details
    return Response(
        orjson.dumps({"error": body}), status_code=status, media_type="application/json", headers=headers
    )


def request_id_of(request: Request) -> str:
    return str(
        getattr(request.state, "request_id", "") or request.scope.get("state", {}).get("request_id", "")
    )


def responses(*codes: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` for a route: the envelope, with one example per code."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        status = STATUS_BY_CODE[code]
        entry = out.setdefault(
            status,
            {"model": ErrorEnvelope, "description": code, "content": {"application/json": {"examples": {}}}},
        )
        entry["content"]["application/json"]["examples"][code] = {
            "value": {
                "error": {
                    "code": code,
                    "message": _EXAMPLE_MESSAGES.get(code, code.replace("_", " ").capitalize() + "."),
                    "status": status,
                    "requestId": "req_7x9k2m4n",
                    **({"details": _EXAMPLE_DETAILS[code]} if code in _EXAMPLE_DETAILS else {}),
                }
            }
        }
        if code not in entry["description"].split(", "):
            entry["description"] = ", ".join(
                filter(None, [entry["description"] if entry["description"] != code else "", code])
            )
    return out


_EXAMPLE_MESSAGES = {
    "INVALID_API_KEY": "The API key is missing, malformed, or has been revoked.",
    "TOPIC_NOT_FOUND": "The topic 'user.events' does not exist in the current environment.",
    "TOPIC_ALREADY_EXISTS": "A topic named 'order.events' already exists in the current environment.",
    "INVALID_REQUEST": "Invalid value for 'partitions': must be between 1 and 256.",
    "RATE_LIMIT_EXCEEDED": "Rate limit of 10 admin requests per second exceeded; retry after 1 second.",
    "PAYLOAD_TOO_LARGE": "The request body exceeds 10 MiB.",
    "NOT_ACCEPTABLE": "/v1/topics/user.events/partitions/0/records answers only "
    "application/vnd.queuecore.records, which the request's Accept header does not admit: accept it, "
    "or a wildcard (*/*).",
    "QUOTA_EXCEEDED": "Quota exceeded: topics per environment are limited to 100 on this project's tier, "
    "and 100 are used.",
    "SERVICE_UNAVAILABLE": "QueueCore is temporarily unavailable.",
    "INTERNAL_ERROR": "An internal error occurred; quote the request id to support.",
}
_INTERNAL_ERROR_MESSAGE = _EXAMPLE_MESSAGES["INTERNAL_ERROR"]


_EXAMPLE_DETAILS = {"QUOTA_EXCEEDED": [{"field": "topics", "issue": "limit 100, used 100"}]}


def _field_of(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) if parts else "body"


def _validation_details(exc: RequestValidationError) -> tuple[str, list[dict[str, str]]]:
    details: list[dict[str, str]] = []
    for err in exc.errors():
        kind = err.get("type", "")
        loc = tuple(err.get("loc", ()))
        if kind == "json_invalid":
            return "The request body is not valid JSON.", [{"field": "body", "issue": "malformed JSON"}]
        if kind == "fixed_field":  # a request model names the field it refuses (``ctx``)
            loc = (*loc, str((err.get("ctx") or {}).get("field", "")))
            issue = str(err.get("msg", "cannot be changed"))
        elif kind == "extra_forbidden":
            issue = "unknown field"
        elif kind == "missing":
            issue = "required"
        else:
            issue = str(err.get("msg", "invalid value"))
        details.append({"field": _field_of(loc), "issue": issue})
    first = details[0] if details else {"field": "body", "issue": "invalid"}
    return f"Invalid value for '{first['field']}': {first['issue']}.", details


def _allowed_methods(request: Request) -> str:
    """What ``Allow`` says: the methods the contract documents for the most specific path template that
    matches (the fewest parameters: ``…/messages/batch`` is its own path, not a ``{message_id}``); for a
    path outside the contract (the dashboard), every method a route serves there."""
    path = request.url.path
    documented = _documented_methods(request.app, path)
    if documented is not None:
        return ", ".join(documented)
    methods = []
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
        probe = {**request.scope, "method": method}
        if any(route.matches(probe)[0] is Match.FULL for route in request.app.router.routes):
            methods.append(method)
    return ", ".join(methods)


_TEMPLATES: dict[int, list[tuple[int, re.Pattern[str], list[str]]]] = {}


def _documented_methods(app: Any, path: str) -> list[str] | None:
    spec = app.openapi()
    templates = _TEMPLATES.get(id(spec))
    if templates is None:
        templates = []
        for template, operations in spec.get("paths", {}).items():
            regex = re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template))
            methods = [
                m.upper() for m in operations if m in ("get", "head", "post", "put", "patch", "delete")
            ]
            templates.append((template.count("{"), re.compile(regex), methods))
        templates.sort(key=lambda t: t[0])
        _TEMPLATES.clear()
        _TEMPLATES[id(spec)] = templates
    for _, compiled, methods in templates:
        if compiled.fullmatch(path):
            return methods
    return None


UNHANDLED_ANSWERED = "unhandled_answered"  # request state: the 500 envelope went out already


def internal_error_response(request_id: str) -> Response:
    """The 500 envelope: never the error's internals."""
    return error_response(request_id, "INTERNAL_ERROR", _INTERNAL_ERROR_MESSAGE, 500)


def add_exception_handlers(app: FastAPI) -> None:
    """Map every error the app can raise to the envelope."""

    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(
            request_id_of(request), exc.code, exc.message, exc.status, exc.details, exc.headers
        )

    async def on_broker_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, CODED_ERRORS)
        err = ApiError.from_broker(exc)
        return error_response(request_id_of(request), err.code, err.message, err.status, err.details)

    async def on_unknown_log(request: Request, exc: Exception) -> Response:
        # The topic was found, then deleted under the call (PRODUCT.md "Deletion races"): the same 404
        # as a topic that is not there, naming it when the path does.
        assert isinstance(exc, UnknownLog)
        name = request.scope.get("path_params", {}).get("name")
        message = TopicNotFound(name).message if isinstance(name, str) else exc.message
        return error_response(request_id_of(request), exc.code, message, STATUS_BY_CODE[exc.code])

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        message, details = _validation_details(exc)
        return error_response(request_id_of(request), "INVALID_REQUEST", message, 400, details)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        rid = request_id_of(request)
        if exc.status_code == 404:
            return error_response(rid, "NOT_FOUND", f"No route matches {request.url.path}.", 404)
        if exc.status_code == 405:
            allow = _allowed_methods(request)
            return error_response(
                rid,
                "METHOD_NOT_ALLOWED",
                f"{request.method} is not allowed on {request.url.path}.",
                405,
                headers={"Allow": allow} if allow else None,
            )
        code = {
            400: "INVALID_REQUEST",
            401: "INVALID_API_KEY",
            403: "FORBIDDEN",
            406: "NOT_ACCEPTABLE",
            413: "PAYLOAD_TOO_LARGE",
        }.get(exc.status_code, "INTERNAL_ERROR" if exc.status_code >= 500 else "INVALID_REQUEST")
        return error_response(rid, code, str(exc.detail), exc.status_code)

    async def on_unhandled(request: Request, exc: Exception) -> Response:
        # Starlette's outermost error layer answers with this and re-raises; the request envelope
        # (outside it) logs the error once and does not answer again.
        request.scope.setdefault("state", {})[UNHANDLED_ANSWERED] = True
        return internal_error_response(request_id_of(request))

    app.add_exception_handler(Exception, on_unhandled)
    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(BrokerError, on_broker_error)
    app.add_exception_handler(StoreUnavailable, on_broker_error)
    app.add_exception_handler(UnknownLog, on_unknown_log)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
