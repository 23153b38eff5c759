"""The few REST calls the connector makes, over one pooled ``httpx.Client`` per Spark task.

Errors keep the service's envelope: a non-2xx answer raises ``QueueCoreError`` whose text is
``<CODE>: <message> (request <id>)``, so a failed Spark job names the cause. A bulk read the server cannot
answer raises ``BulkReadUnsupported`` instead (see there), so the reader can fall back to the JSON pages. 429, 503 and connection errors
are retried with exponential backoff and jitter (honouring ``Retry-After``), as the SDK does; a publish keeps
its idempotency keys across retries, so a retried call appends nothing twice.
"""

from __future__ import annotations

import random
import time
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx
import orjson

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
ENV_API_KEY = "QUEUECORE_API_KEY"
ENV_ADMIN_TOKEN = "QUEUECORE_ADMIN_TOKEN"
ENV_BASE_URL = "QUEUECORE_BASE_URL"
MAX_RETRIES = 5
PAGE = 1000  # the stream read's largest page
BULK_PAGE = 20_000  # records per bulk read: smaller than the largest (50,000), so the next travels while Spark takes this one
RECORDS_MEDIA_TYPE = "application/vnd.queuecore.records"


class QueueCoreError(Exception):
    """An error answered by QueueCore (or a bad option): ``code``, ``status``, ``request_id``."""

    def __init__(self, code: str, message: str, status: int | None = None, request_id: str | None = None):
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        text = f"{code}: {message}"
        if request_id:
            text += f" (request {request_id})"
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:  # survives pickling between Spark's Python processes
        return (QueueCoreError, (self.code, self.message, self.status, self.request_id))


class BulkReadUnsupported(QueueCoreError):
    """The server does not answer bulk reads (``…/records``): a server older than them answers 404
    ``NOT_FOUND`` ("No route matches …"), which a missing topic never does (that is 404
    ``TOPIC_NOT_FOUND``); 406 and 415 say the media type is refused, by the server or a proxy before it.
    The JSON pages of ``…/messages`` read the same records."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (BulkReadUnsupported, (self.code, self.message, self.status, self.request_id))


def bulk_read_unsupported(error: QueueCoreError) -> bool:
    """Whether an error answered to a bulk read means the server has none (``BulkReadUnsupported``)."""
    if error.status in (406, 415):
        return True
    # Only the envelope's code tells an unknown route from an unknown topic: both are 404. A 404 without
    # the envelope (HTTP_ERROR) came from something that is not QueueCore, and is not guessed at.
    return error.status == 404 and error.code == "NOT_FOUND"


def invalid_option(message: str) -> QueueCoreError:
    return QueueCoreError("INVALID_OPTION", message)


class Client:
    """A pooled, retrying client of one QueueCore project environment."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 60.0) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": "queuecore-spark/0.1"},
            timeout=timeout,
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=8),
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- calls -----------------------------------------------------------------------------------

    def describe_topic(self, topic: str) -> dict[str, Any]:
        answer: dict[str, Any] = self._call("GET", f"/v1/topics/{quote(topic, safe='')}")
        return answer

    def read_page(
        self,
        topic: str,
        partition: int,
        *,
        from_offset: int | None = None,
        from_timestamp: str | None = None,
        limit: int = PAGE,
    ) -> dict[str, Any]:
        """One stream-read page ``{data, nextOffset, earliestOffset}``."""
        params: dict[str, str | int] = {"limit": limit}
        if from_offset is not None:
            params["fromOffset"] = from_offset
        if from_timestamp is not None:
            params["fromTimestamp"] = from_timestamp
        path = f"/v1/topics/{quote(topic, safe='')}/partitions/{partition}/messages"
        answer: dict[str, Any] = self._call("GET", path, params=params)
        return answer

    def read_records(
        self, topic: str, partition: int, *, from_offset: int, until_offset: int, limit: int = BULK_PAGE
    ) -> bytes:
        """One bulk read (``application/vnd.queuecore.records``, decoded by ``_records.decode``) of offsets
        from ``from_offset`` up to ``until_offset`` (exclusive), at most ``limit`` records; raises
        ``BulkReadUnsupported`` when the server has no bulk read."""
        params: dict[str, str | int] = {
            "fromOffset": from_offset,
            "untilOffset": until_offset,
            "limit": limit,
        }
        path = f"/v1/topics/{quote(topic, safe='')}/partitions/{partition}/records"
        try:
            answer: bytes = self._call("GET", path, params=params, accept=RECORDS_MEDIA_TYPE)
        except QueueCoreError as error:
            if bulk_read_unsupported(error):
                raise BulkReadUnsupported(error.code, error.message, error.status, error.request_id) from None
            raise
        return answer

    def publish_batch(self, topic: str, body: bytes) -> dict[str, Any]:
        path = f"/v1/topics/{quote(topic, safe='')}/messages/batch"
        answer: dict[str, Any] = self._call("POST", path, content=body)
        return answer

    # -- the operators' usage calls (this client then holds the admin token, not a project key) --------

    def usage_events(self, from_offset: int, limit: int) -> dict[str, Any]:
        """One page ``{data: [{offset, event}], nextOffset, earliestOffset, latestOffset}``."""
        params: dict[str, str | int] = {"fromOffset": from_offset, "limit": limit}
        answer: dict[str, Any] = self._call("GET", "/v1/admin/usage/events", params=params)
        return answer

    def usage_progress(self) -> int:
        """The first usage event not rolled up yet."""
        return int(self._call("GET", "/v1/admin/usage/rollups/progress")["nextOffset"])

    def add_rollups(self, body: bytes) -> None:
        self._call("POST", "/v1/admin/usage/rollups", content=body)

    # -- the request loop ------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str | int] | None = None,
        content: bytes | None = None,
        accept: str | None = None,
    ) -> Any:
        """The answer's JSON parsed; its bytes as they came when ``accept`` names another media type."""
        headers = {"Content-Type": "application/json"} if content is not None else {}
        if accept is not None:
            headers["Accept"] = accept
        for attempt in range(MAX_RETRIES + 1):
            try:
                response = self._http.request(method, path, params=params, content=content, headers=headers)
            except httpx.TransportError as exc:
                if attempt == MAX_RETRIES:
                    raise QueueCoreError(
                        "CONNECTION_ERROR", f"Could not reach QueueCore at {self._http.base_url}: {exc}"
                    ) from None
                time.sleep(_backoff(attempt, None))
                continue
            if response.status_code < 300:
                return response.content if accept is not None else orjson.loads(response.content)
            if response.status_code in (429, 503) and attempt < MAX_RETRIES:
                time.sleep(_backoff(attempt, response.headers.get("Retry-After")))
                continue
            raise _error(response)
        raise AssertionError("unreachable")


def _backoff(attempt: int, retry_after: str | None) -> float:
    if retry_after is not None:
        try:
            return min(float(retry_after), 30.0)
        except ValueError:
            pass
    delay: float = min(0.25 * 2**attempt, 8.0)
    return delay * random.uniform(0.75, 1.25)


def _error(response: httpx.Response) -> QueueCoreError:
    try:
        body = orjson.loads(response.content)["error"]
        return QueueCoreError(
            str(body["code"]), str(body["message"]), response.status_code, body.get("requestId")
        )
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return QueueCoreError(
            "HTTP_ERROR",
            f"QueueCore answered {response.status_code} without an error envelope",
            response.status_code,
            response.headers.get("X-Request-Id"),
        )
