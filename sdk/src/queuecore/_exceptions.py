"""Every error the SDK raises.

    QueueCoreError
     ├── APIError                       anything that went wrong talking to the API
     │    ├── APIStatusError            the API answered a non-2xx status (carries the response)
     │    │    ├── BadRequestError              400 INVALID_REQUEST, OFFSET_OUT_OF_RANGE (``ValidationError``,
     │    │    │                                 its old name, is a deprecated alias)
     │    │    ├── AuthenticationError          401 INVALID_API_KEY
     │    │    ├── PermissionDeniedError        403 FORBIDDEN
     │    │    ├── NotFoundError                404 TOPIC_NOT_FOUND, MESSAGE_NOT_FOUND, NOT_FOUND, ...
     │    │    ├── ConflictError                409 TOPIC_ALREADY_EXISTS, ...
     │    │    ├── PayloadTooLargeError         413 PAYLOAD_TOO_LARGE
     │    │    ├── RateLimitError               429 RATE_LIMIT_EXCEEDED (``retry_after``)
     │    │    ├── InternalServerError          500 INTERNAL_ERROR (and other 5xx but 503)
     │    │    └── ServiceUnavailableError      503 SERVICE_UNAVAILABLE
     │    ├── APIConnectionError        no answer: connection refused or reset, DNS, TLS, ...
     │    │    └── APITimeoutError      no answer in time
     │    └── APIResponseValidationError  a 2xx answer that is not what the API promises
     ├── AckError                       a consumer's ack/nack/extend the server refused (``ACK_EXPIRED``),
     │                                  reported to ``on("error")``
     └── (client misuse, e.g. no API key, raises QueueCoreError itself)

Every ``APIError`` carries ``code``, ``status``, ``request_id`` and ``message``; ``str()`` leads with the
request id, which is what support needs. The names are those of the Node.js SDK, and the Go SDK's
``Err*`` values match the same classes (sdk/README.md has the table).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from ._ratelimit import RateLimit, parse_rate_limit

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AckError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "InternalServerError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "QueueCoreError",
    "RateLimitError",
    "ServiceUnavailableError",
    "ValidationError",
]


class QueueCoreError(Exception):
    """The base of every exception this package raises."""


class APIError(QueueCoreError):
    """Something went wrong with a request to the QueueCore API."""

    message: str
    """A human-readable description (the envelope's ``message`` when the API answered one)."""
    request: httpx.Request
    code: str | None
    """The API's machine-readable code, e.g. ``TOPIC_NOT_FOUND``; ``None`` when there was no answer."""
    status: int | None
    """The HTTP status; ``None`` when there was no answer."""
    request_id: str | None
    """The ``X-Request-Id`` of the answer: quote it to support."""
    body: object | None
    """The decoded JSON body of the answer, if any."""

    def __init__(
        self,
        message: str,
        request: httpx.Request,
        *,
        body: object | None = None,
        code: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.request = request
        self.body = body
        self.code = code
        self.status = status
        self.request_id = request_id

    def __str__(self) -> str:
        parts = []
        if self.status is not None:
            parts.append(str(self.status))
        if self.code:
            parts.append(self.code)
        head = " ".join(parts)
        text = f"{head}: {self.message}" if head else self.message
        return f"Request {self.request_id}: {text}" if self.request_id else text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(message={self.message!r}, code={self.code!r}, "
            f"status={self.status!r}, request_id={self.request_id!r})"
        )


class APIStatusError(APIError):
    """The API answered with a non-2xx status."""

    response: httpx.Response
    status: int
    details: list[dict[str, Any]] | None
    """For validation errors: ``[{"field": ..., "issue": ...}]``."""

    def __init__(
        self,
        message: str,
        *,
        response: httpx.Response,
        body: object | None,
        code: str | None = None,
        request_id: str | None = None,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(
            message,
            response.request,
            body=body,
            code=code,
            status=response.status_code,
            request_id=request_id,
        )
        self.response = response
        self.details = details

    @property
    def status_code(self) -> int:
        """Alias of ``status``, as httpx names it."""
        return self.status

    @property
    def rate_limit(self) -> RateLimit | None:
        """The key's rate-limit state this answer reported (``RateLimit``/``RateLimit-Policy``, else the
        older ``RateLimit-*`` fields); ``None`` on routes without a limit."""
        return parse_rate_limit(self.response.headers)


class BadRequestError(APIStatusError):
    """400: the request was malformed or a value is out of range (``details`` says which field);
    ``INVALID_REQUEST``, or ``OFFSET_OUT_OF_RANGE`` for a read beyond a partition's end."""


ValidationError = BadRequestError
"""Deprecated: the old name of ``BadRequestError`` (the name every QueueCore SDK now uses). Kept so that
existing ``except queuecore.ValidationError`` code goes on working."""


class AuthenticationError(APIStatusError):
    """401: the API key is missing, malformed, unknown or revoked."""


class PermissionDeniedError(APIStatusError):
    """403: the key may not do this."""


class NotFoundError(APIStatusError):
    """404: no such topic, message or route."""


class ConflictError(APIStatusError):
    """409: the call conflicts with the current state (e.g. the topic already exists)."""


class PayloadTooLargeError(APIStatusError):
    """413: a message over 256 KiB, or a request body over 10 MiB."""


class RateLimitError(APIStatusError):
    """429: over the key's rate limit. Raised once the client's retries are used up."""

    @property
    def retry_after(self) -> float | None:
        """Seconds the API asked to wait before retrying (its ``Retry-After``), if it said."""
        return parse_retry_after(self.response.headers)


class InternalServerError(APIStatusError):
    """500 (and any other 5xx but 503): a fault on the server's side; quote the request id."""


class ServiceUnavailableError(APIStatusError):
    """503: a dependency of the service is down, or a publish could not be made durable. Transient."""


def address(request: httpx.Request) -> str:
    """``host:port`` a request went to (the scheme's default port when the URL names none)."""
    url = request.url
    port = url.port or {"https": 443, "wss": 443}.get(url.scheme, 80)
    return f"{url.host}:{port}"


def connection_message(request: httpx.Request, error: BaseException) -> str:
    """What a connection failure says: where it tried, then the transport's reason."""
    return f"Connection error: could not reach {address(request)} ({error or type(error).__name__})"


class APIConnectionError(APIError):
    """No answer: the connection could not be made, or broke before the answer arrived."""

    def __init__(self, *, request: httpx.Request, message: str = "Connection error.") -> None:
        super().__init__(message, request)


class APITimeoutError(APIConnectionError):
    """No answer within the client's timeout."""

    def __init__(self, request: httpx.Request) -> None:
        super().__init__(request=request, message=f"Request to {address(request)} timed out.")


class AckError(QueueCoreError):
    """The server refused to settle a consumed message: reported to the consumer's ``on("error")``
    handlers, never raised by ``ack()``. ``code`` is the reason (``ACK_EXPIRED``: the ack deadline passed or
    the partition moved to another member, so the message was or will be redelivered)."""

    code: str
    message_id: str
    action: str
    """``"ack"``, ``"nack"`` or ``"extend"``."""

    def __init__(self, message_id: str, code: str, action: str = "ack") -> None:
        super().__init__(f"The {action} of {message_id} failed: {code}")
        self.message_id = message_id
        self.code = code
        self.action = action


class APIResponseValidationError(APIError):
    """A 2xx answer whose body is not what the API promises (a proxy in the way, or a version skew)."""

    response: httpx.Response

    def __init__(self, response: httpx.Response, body: object | None, message: str) -> None:
        super().__init__(
            message,
            response.request,
            body=body,
            status=response.status_code,
            request_id=response.headers.get("x-request-id"),
        )
        self.response = response


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    429: RateLimitError,
    500: InternalServerError,
    503: ServiceUnavailableError,
}


def make_status_error(response: httpx.Response, body: object) -> APIStatusError:
    """The exception for a non-2xx answer, read from the ``{"error": {...}}`` envelope when there is one."""
    status = response.status_code
    error = body.get("error") if isinstance(body, dict) else None
    code: str | None = None
    message = ""
    details: list[dict[str, Any]] | None = None
    request_id = response.headers.get("x-request-id")
    if isinstance(error, dict):
        raw_code, raw_message, raw_details = error.get("code"), error.get("message"), error.get("details")
        code = raw_code if isinstance(raw_code, str) else None
        message = raw_message if isinstance(raw_message, str) else ""
        details = raw_details if isinstance(raw_details, list) else None
        if not request_id and isinstance(error.get("requestId"), str):
            request_id = error["requestId"]
    if not message:
        reason = response.reason_phrase or "error"
        message = f"HTTP {status} {reason}"
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = InternalServerError if status >= 500 else APIStatusError
    return cls(message, response=response, body=body, code=code, request_id=request_id, details=details)


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """``Retry-After`` as seconds: an integer or decimal number, or an HTTP date. ``None`` if absent or bad."""
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)
