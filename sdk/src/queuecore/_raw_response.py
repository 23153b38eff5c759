"""``client.with_raw_response``: every call, answering the HTTP response around its result.

::

    response = client.with_raw_response.topics.describe("order.events")
    # or: client.topics.with_raw_response.describe("order.events")
    response.status_code, response.headers, response.request_id, response.rate_limit
    topic = response.parse()  # what client.topics.describe(...) returns

The call runs on a copy of the client (``with_options``: same pool, same settings, same rate-limit state)
that records the final answer of its request; errors are raised as by the plain call.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

import httpx

from ._exceptions import QueueCoreError
from ._ratelimit import RateLimit, parse_rate_limit

if TYPE_CHECKING:
    from ._client import AsyncQueueCore, QueueCore

__all__ = ["APIResponse", "AsyncRawResponse", "RawResponse"]

_T = TypeVar("_T")

_RESOURCES = frozenset({"topics", "messages", "consumer_groups", "offsets", "dlq", "alerts"})
_CLIENT_CALLS = frozenset({"publish", "publish_batch"})


class APIResponse(Generic[_T]):
    """The HTTP answer of one call, with the call's result (``parse()``)."""

    http_response: httpx.Response
    """The final ``httpx.Response`` (after retries)."""

    def __init__(self, http_response: httpx.Response, parsed: _T) -> None:
        self.http_response = http_response
        self._parsed = parsed

    @property
    def status_code(self) -> int:
        return self.http_response.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self.http_response.headers

    @property
    def request_id(self) -> str | None:
        """The answer's ``X-Request-Id``: quote it to support."""
        request_id: str | None = self.http_response.headers.get("x-request-id")
        return request_id

    @property
    def rate_limit(self) -> RateLimit | None:
        """The key's rate-limit state this answer reported; ``None`` on routes without a limit."""
        return parse_rate_limit(self.http_response.headers)

    @property
    def text(self) -> str:
        return self.http_response.text

    def json(self) -> Any:
        return self.http_response.json()

    def parse(self) -> _T:
        """What the plain call returns (a model, a page, ``None`` for a delete)."""
        return self._parsed

    def __repr__(self) -> str:
        return (
            f"<APIResponse [{self.status_code}] {self.http_response.request.method} {self.http_response.url}>"
        )


def _target_name(namespace: Any, name: str) -> None:
    if name.startswith("_") or name == "with_raw_response":
        raise AttributeError(name)
    if not callable(getattr(namespace, name)):
        raise AttributeError(name)  # noqa: TRY004 — attribute lookup: AttributeError is the protocol


def _lookup(client: Any, build: Callable[[Any], Any], name: str, nested: Callable[..., Any]) -> Any:
    """What ``with_raw_response.<name>`` is: a resource (``nested`` over it), or the call to wrap."""
    target = build(client)
    if target is client:
        if name in _RESOURCES:
            return nested(client, lambda each: getattr(each, name))
        if name not in _CLIENT_CALLS:
            raise AttributeError(name)
    _target_name(target, name)
    return getattr(target, name)


def _answer(captured: list[httpx.Response], result: Any) -> APIResponse[Any]:
    if not captured:  # pragma: no cover - every wrapped call makes a request
        raise QueueCoreError("the call made no request")
    return APIResponse(captured[0], result)


class RawResponse:
    """``client.with_raw_response`` (and ``client.<resource>.with_raw_response``) of ``QueueCore``."""

    def __init__(self, client: QueueCore, build: Callable[[QueueCore], Any]) -> None:
        self._client = client
        self._build = build

    def __getattr__(self, name: str) -> Any:
        found = _lookup(self._client, self._build, name, RawResponse)
        if isinstance(found, RawResponse):
            return found
        build, client = self._build, self._client

        @functools.wraps(found)
        def call(*args: Any, **kwargs: Any) -> APIResponse[Any]:
            captured: list[httpx.Response] = []
            copy = client.with_options()
            copy._response_hook = captured.append
            result = getattr(build(copy), name)(*args, **kwargs)
            return _answer(captured, result)

        return call


class AsyncRawResponse:
    """``client.with_raw_response`` (and ``client.<resource>.with_raw_response``) of ``AsyncQueueCore``:
    each call is awaited (``await client.with_raw_response.topics.list()`` answers the first page)."""

    def __init__(self, client: AsyncQueueCore, build: Callable[[AsyncQueueCore], Any]) -> None:
        self._client = client
        self._build = build

    def __getattr__(self, name: str) -> Any:
        found = _lookup(self._client, self._build, name, AsyncRawResponse)
        if isinstance(found, AsyncRawResponse):
            return found
        build, client = self._build, self._client

        @functools.wraps(found)
        async def call(*args: Any, **kwargs: Any) -> APIResponse[Any]:
            captured: list[httpx.Response] = []
            copy = client.with_options()
            copy._response_hook = captured.append
            result = getattr(build(copy), name)(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return _answer(captured, result)

        return call
