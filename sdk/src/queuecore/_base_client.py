"""The request loop shared by every call: auth, idempotency key, retries, status → exception.

One ``RequestOptions`` describes a call; ``SyncAPIClient.request`` / ``AsyncAPIClient.request`` send it:

1. A publish (``options.idempotent``) gets its ``Idempotency-Key`` here, ONCE, before the loop, so every
   retry of it carries the same key and the server appends it at most once.
2. Each attempt is built afresh (same body, same key) and sent through the injectable ``httpx`` client.
3. Retried, with exponential backoff and jitter: 429 (waiting what ``Retry-After`` says, capped), 502, 503,
   504, and answers that never came (connection refused or broken, timeouts). Never another 4xx, never 500.
4. A 2xx is returned to the resource, which reads it into a model; anything else raises the exception of
   its status (``_exceptions.make_status_error``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Generic, TypeVar, Union

import httpx
import pydantic

from ._constants import INITIAL_RETRY_DELAY, MAX_RETRY_AFTER, MAX_RETRY_DELAY
from ._exceptions import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    QueueCoreError,
    connection_message,
    make_status_error,
    parse_retry_after,
)
from ._models import BaseModel
from ._ratelimit import RateLimit, parse_rate_limit
from ._version import __version__

__all__ = ["AsyncAPIClient", "BaseClient", "RequestOptions", "SyncAPIClient", "parse_model"]

_HttpxClientT = TypeVar("_HttpxClientT", httpx.Client, httpx.AsyncClient)
_ModelT = TypeVar("_ModelT", bound=BaseModel)

TimeoutTypes = Union[float, httpx.Timeout, None]

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
"""429 is refused before any work is done; 502/503/504 mean the call did not get through or the service is
briefly unable (a publish is safe to repeat thanks to its idempotency key). 500 is a bug: not retried."""


@dataclass(frozen=True)
class RequestOptions:
    """One API call, before it becomes HTTP requests (one per attempt)."""

    method: str
    path: str
    """Starting with ``/v1/``; path segments already quoted."""
    params: Mapping[str, Any] | None = None
    """Query parameters; ``None`` values are left out."""
    json: Any | None = None
    """The JSON body, if any."""
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool = False
    """A publish: give it an ``Idempotency-Key`` (unless ``idempotency_key`` is set) once, before retries."""
    idempotency_key: str | None = None
    authenticated: bool = True
    """Send the API key (everything but ``/v1/health``)."""
    accept_statuses: frozenset[int] = frozenset()
    """Non-2xx statuses whose non-envelope body is an answer, not an error (``/v1/health``'s 503)."""


def new_idempotency_key() -> str:
    """A fresh key: unique per publish, the same across its retries."""
    return f"qc-py-{uuid.uuid4()}"


def read_json(response: httpx.Response) -> Any:
    """The decoded JSON body, or ``None`` when it is empty or not JSON."""
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def parse_model(cls: type[_ModelT], response: httpx.Response, **overrides: Any) -> _ModelT:
    """Read a 2xx answer into ``cls``; ``APIResponseValidationError`` when it does not fit."""
    body = read_json(response)
    if not isinstance(body, dict):
        raise APIResponseValidationError(response, body, "The answer is not a JSON object.")
    try:
        model = cls.model_validate({**body, **overrides})
    except pydantic.ValidationError as exc:
        raise APIResponseValidationError(
            response, body, f"The answer does not match {cls.__name__}: {exc}"
        ) from exc
    model._request_id = response.headers.get("x-request-id")
    return model


class RateLimitState:
    """The last rate-limit state a client saw; shared by a client and the copies ``with_options`` makes."""

    value: RateLimit | None = None


def _dump_json(value: Any) -> bytes:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except ValueError as exc:  # NaN or infinity: not JSON
        raise QueueCoreError(f"The request body is not valid JSON: {exc}") from exc


class BaseClient(Generic[_HttpxClientT]):
    """What the sync and async clients share: configuration, building requests, retry decisions."""

    _client: _HttpxClientT
    api_key: str
    base_url: str
    timeout: TimeoutTypes
    max_retries: int

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        timeout: TimeoutTypes,
        max_retries: int,
        logger: logging.Logger | None,
        default_headers: Mapping[str, str] | None,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        self.api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self._logger = logger or logging.getLogger("queuecore")
        self._custom_headers = dict(default_headers or {})
        self._rate_limit_state = RateLimitState()
        # Set on the copies ``with_raw_response`` makes: gets the final answer of each call.
        self._response_hook: Callable[[httpx.Response], None] | None = None

    @property
    def rate_limit(self) -> RateLimit | None:
        """The key's rate-limit state as the last answer that carried one reported it (``None`` before
        any): ``policy``, ``limit``, ``remaining``, ``reset`` seconds, ``window`` seconds."""
        return self._rate_limit_state.value

    # -- building ---------------------------------------------------------------------------------------

    @property
    def default_headers(self) -> dict[str, str]:
        """Headers sent with every request (auth is added per request)."""
        return {
            "Accept": "application/json",
            "User-Agent": f"queuecore-python/{__version__}",
            **self._custom_headers,
        }

    def _prepare(self, options: RequestOptions) -> RequestOptions:
        """Once per call, before any attempt: fix what must not change across retries."""
        if options.idempotent and options.idempotency_key is None:
            return replace(options, idempotency_key=new_idempotency_key())
        return options

    def _build_request(self, options: RequestOptions) -> httpx.Request:
        headers = dict(self.default_headers)
        if options.authenticated:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if options.idempotency_key is not None:
            headers["Idempotency-Key"] = options.idempotency_key
        content: bytes | None = None
        if options.json is not None:
            content = _dump_json(options.json)
            headers["Content-Type"] = "application/json"
        headers.update(options.headers)
        params = {k: v for k, v in (options.params or {}).items() if v is not None}
        return self._client.build_request(
            options.method,
            self.base_url + options.path,
            params=params,
            headers=headers,
            content=content,
            timeout=self.timeout,
        )

    # -- deciding ---------------------------------------------------------------------------------------

    @staticmethod
    def _is_answer(options: RequestOptions, response: httpx.Response) -> bool:
        if response.is_success:
            return True
        if response.status_code in options.accept_statuses:
            body = read_json(response)
            return isinstance(body, dict) and "error" not in body
        return False

    @staticmethod
    def _should_retry(response: httpx.Response) -> bool:
        return response.status_code in RETRYABLE_STATUSES

    def _retry_delay(self, retries_taken: int, response: httpx.Response | None) -> float:
        """Seconds to wait before retry number ``retries_taken + 1``.

        The server's ``Retry-After`` wins (clamped to ``MAX_RETRY_AFTER``): a rate-limit window frees up
        exactly then, and waiting less would only be refused again. Otherwise exponential backoff,
        ``INITIAL_RETRY_DELAY * 2**n`` capped at ``MAX_RETRY_DELAY``, less up to 25 % jitter so that many
        clients failing together do not retry together.
        """
        if response is not None:
            retry_after = parse_retry_after(response.headers)
            if retry_after is not None:
                return min(retry_after, MAX_RETRY_AFTER)
        backoff = min(INITIAL_RETRY_DELAY * 2.0**retries_taken, MAX_RETRY_DELAY)
        return backoff * (1.0 - 0.25 * random.random())

    def _log_retry(self, request: httpx.Request, delay: float, why: str) -> None:
        self._logger.info("Retrying %s %s in %.2f seconds (%s)", request.method, request.url.path, delay, why)

    def _status_error(self, response: httpx.Response) -> APIStatusError:
        return make_status_error(response, read_json(response))

    # The retry policy, shared by the sync and async loops (which differ only in awaiting).

    def _after_failure(
        self, request: httpx.Request, retries_taken: int, error: httpx.TransportError
    ) -> float:
        """The delay before resending after a transport failure; raises when giving up."""
        if isinstance(error, (httpx.UnsupportedProtocol, httpx.ProxyError)):
            raise APIConnectionError(request=request, message=connection_message(request, error)) from error
        timed_out = isinstance(error, httpx.TimeoutException)
        if retries_taken >= self.max_retries:
            if timed_out:
                raise APITimeoutError(request) from error
            raise APIConnectionError(request=request, message=connection_message(request, error)) from error
        delay = self._retry_delay(retries_taken, None)
        self._log_retry(
            request, delay, "timed out" if timed_out else f"connection error: {type(error).__name__}"
        )
        return delay

    def _after_answer(
        self, options: RequestOptions, request: httpx.Request, retries_taken: int, response: httpx.Response
    ) -> float | None:
        """None when ``response`` is the answer; else the delay before resending; raises when giving up."""
        self._logger.debug(
            "Answer: %s %s %d (%s)",
            request.method,
            request.url.path,
            response.status_code,
            response.headers.get("x-request-id"),
        )
        rate_limit = parse_rate_limit(response.headers)
        if rate_limit is not None:
            self._rate_limit_state.value = rate_limit
        if self._is_answer(options, response):
            if self._response_hook is not None:
                self._response_hook(response)
            return None
        if not self._should_retry(response) or retries_taken >= self.max_retries:
            raise self._status_error(response)
        delay = self._retry_delay(retries_taken, response)
        self._log_retry(request, delay, f"status {response.status_code}")
        return delay


class SyncAPIClient(BaseClient[httpx.Client]):
    """The blocking request loop, over an ``httpx.Client``."""

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def request(self, options: RequestOptions) -> httpx.Response:
        """Send one call, retrying what is safe to retry; the final 2xx answer, else an exception."""
        options = self._prepare(options)
        retries_taken = 0
        while True:
            request = self._build_request(options)
            self._logger.debug("Request: %s %s", request.method, request.url)
            try:
                response = self._client.send(request)
            except httpx.TransportError as exc:
                delay = self._after_failure(request, retries_taken, exc)
            else:
                wait = self._after_answer(options, request, retries_taken, response)
                if wait is None:
                    return response
                delay = wait
                response.close()
            self._sleep(delay)
            retries_taken += 1


class AsyncAPIClient(BaseClient[httpx.AsyncClient]):
    """The asyncio request loop, over an ``httpx.AsyncClient``."""

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def request(self, options: RequestOptions) -> httpx.Response:
        """Send one call, retrying what is safe to retry; the final 2xx answer, else an exception."""
        options = self._prepare(options)
        retries_taken = 0
        while True:
            request = self._build_request(options)
            self._logger.debug("Request: %s %s", request.method, request.url)
            try:
                response = await self._client.send(request)
            except httpx.TransportError as exc:
                delay = self._after_failure(request, retries_taken, exc)
            else:
                wait = self._after_answer(options, request, retries_taken, response)
                if wait is None:
                    return response
                delay = wait
                await response.aclose()
            await self._sleep(delay)
            retries_taken += 1
