"""``client.schedules``: publish a message to a topic on a cron expression or a fixed period."""

from __future__ import annotations

import builtins
from typing import Any

import httpx
import pydantic

from .._base_client import RequestOptions, parse_model, read_json
from .._exceptions import APIResponseValidationError
from .._resource import AsyncAPIResource, SyncAPIResource, path_segment
from ..pagination import AsyncCursorPage, AsyncPaginator, SyncCursorPage
from ..types.schedule import Schedule, ScheduleRun, ScheduleRunList

__all__ = ["AsyncSchedules", "Schedules"]

_NO_DATA: Any = object()


def _create_body(
    topic: str,
    data: Any,
    cron: str | None,
    every: str | None,
    timezone: str | None,
    key: str | None,
    headers: dict[str, str] | None,
) -> dict[str, Any]:
    if data is _NO_DATA:
        raise TypeError("schedules.create() needs data= (any JSON value, None included)")
    body: dict[str, Any] = {"topic": topic, "data": data}
    for name, value in (("cron", cron), ("every", every), ("timezone", timezone), ("key", key)):
        if value is not None:
            body[name] = value
    if headers is not None:
        body["headers"] = headers
    return body


def _path(schedule_id: str, action: str = "") -> str:
    return f"/v1/schedules/{path_segment(schedule_id)}" + (f"/{action}" if action else "")


def _list_options(limit: int | None, cursor: str | None) -> RequestOptions:
    return RequestOptions("GET", "/v1/schedules", params={"limit": limit, "cursor": cursor})


def _read_page(response: httpx.Response) -> tuple[list[Schedule], str | None]:
    body = read_json(response)
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise APIResponseValidationError(response, body, "The answer is not a {data, nextCursor} page.")
    request_id = response.headers.get("x-request-id")
    try:
        schedules = [Schedule.model_validate(item) for item in body["data"]]
    except pydantic.ValidationError as exc:
        raise APIResponseValidationError(
            response, body, f"The answer does not list schedules: {exc}"
        ) from exc
    for schedule in schedules:
        schedule._request_id = request_id
    next_cursor = body.get("nextCursor")
    return schedules, next_cursor if isinstance(next_cursor, str) and next_cursor else None


class Schedules(SyncAPIResource):
    """Schedules of the key's environment: each publishes one message per due time, exactly once."""

    def create(
        self,
        topic: str,
        *,
        data: Any = _NO_DATA,
        cron: str | None = None,
        every: str | None = None,
        timezone: str | None = None,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Schedule:
        """Create a schedule of ``topic``; give exactly one of ``cron`` and ``every``.

        Args:
            topic: a topic of the key's environment.
            data: what every run publishes: any JSON value (``None`` included).
            cron: five fields, ``minute hour day-of-month month day-of-week`` (``"0 9 * * MON-FRI"``).
            every: a period ``<n>ms|s|m|h|d`` of at least ``1s``, counted from creation.
            timezone: an IANA name for ``cron`` (server default ``UTC``).
            key: the message's key; headers: its headers (each run adds ``queuecore-schedule`` and
                ``queuecore-scheduled-at``).

        Raises:
            BadRequestError: a bad cron, period or zone, both or neither of them (``e.details`` names it).
            NotFoundError: no such topic (``TOPIC_NOT_FOUND``).
            PermissionDeniedError: past the environment's schedules quota (``QUOTA_EXCEEDED``).
        """
        body = _create_body(topic, data, cron, every, timezone, key, headers)
        return parse_model(Schedule, self._client.request(RequestOptions("POST", "/v1/schedules", json=body)))

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> SyncCursorPage[Schedule]:
        """Schedules by id. Iterating the answer walks every schedule, fetching further pages lazily."""

        def fetch(cursor: str | None) -> SyncCursorPage[Schedule]:
            data, next_cursor = _read_page(self._client.request(_list_options(limit, cursor)))
            return SyncCursorPage(data, next_cursor, fetch)

        return fetch(cursor)

    def get(self, schedule_id: str) -> Schedule:
        """One schedule. ``NotFoundError`` (``NOT_FOUND``) when there is none of this id."""
        return parse_model(Schedule, self._client.request(RequestOptions("GET", _path(schedule_id))))

    def pause(self, schedule_id: str) -> Schedule:
        """Stop publishing runs until resumed (``status == "paused"``)."""
        return parse_model(
            Schedule, self._client.request(RequestOptions("POST", _path(schedule_id, "pause")))
        )

    def resume(self, schedule_id: str) -> Schedule:
        """Publish again from the first due time after now (``status == "active"``)."""
        return parse_model(
            Schedule, self._client.request(RequestOptions("POST", _path(schedule_id, "resume")))
        )

    def delete(self, schedule_id: str) -> None:
        """Delete a schedule (the messages it published stay in the topic)."""
        self._client.request(RequestOptions("DELETE", _path(schedule_id)))

    def runs(self, schedule_id: str) -> builtins.list[ScheduleRun]:
        """The schedule's last runs, newest first: each due time and the message it published."""
        response = self._client.request(RequestOptions("GET", _path(schedule_id, "runs")))
        return parse_model(ScheduleRunList, response).data


class AsyncSchedules(AsyncAPIResource):
    """Schedules of the key's environment. See ``Schedules``."""

    async def create(
        self,
        topic: str,
        *,
        data: Any = _NO_DATA,
        cron: str | None = None,
        every: str | None = None,
        timezone: str | None = None,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Schedule:
        """Create a schedule of ``topic``. See ``Schedules.create``."""
        body = _create_body(topic, data, cron, every, timezone, key, headers)
        response = await self._client.request(RequestOptions("POST", "/v1/schedules", json=body))
        return parse_model(Schedule, response)

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> AsyncPaginator[Schedule]:
        """Schedules by id: ``async for schedule in client.schedules.list()`` walks every one."""

        async def fetch(cursor: str | None) -> AsyncCursorPage[Schedule]:
            data, next_cursor = _read_page(await self._client.request(_list_options(limit, cursor)))
            return AsyncCursorPage(data, next_cursor, fetch)

        return AsyncPaginator(lambda: fetch(cursor))

    async def get(self, schedule_id: str) -> Schedule:
        """One schedule. See ``Schedules.get``."""
        return parse_model(Schedule, await self._client.request(RequestOptions("GET", _path(schedule_id))))

    async def pause(self, schedule_id: str) -> Schedule:
        """Stop publishing runs until resumed."""
        response = await self._client.request(RequestOptions("POST", _path(schedule_id, "pause")))
        return parse_model(Schedule, response)

    async def resume(self, schedule_id: str) -> Schedule:
        """Publish again from the first due time after now."""
        response = await self._client.request(RequestOptions("POST", _path(schedule_id, "resume")))
        return parse_model(Schedule, response)

    async def delete(self, schedule_id: str) -> None:
        """Delete a schedule."""
        await self._client.request(RequestOptions("DELETE", _path(schedule_id)))

    async def runs(self, schedule_id: str) -> builtins.list[ScheduleRun]:
        """The schedule's last runs, newest first."""
        response = await self._client.request(RequestOptions("GET", _path(schedule_id, "runs")))
        return parse_model(ScheduleRunList, response).data
