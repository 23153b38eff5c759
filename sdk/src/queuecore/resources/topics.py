"""``client.topics``: create, list, describe, update and delete topics."""

from __future__ import annotations

from typing import Any, Literal

import httpx
import pydantic

from .._base_client import RequestOptions, parse_model, read_json
from .._exceptions import APIResponseValidationError
from .._resource import AsyncAPIResource, SyncAPIResource, path_segment
from ..pagination import AsyncCursorPage, AsyncPaginator, SyncCursorPage
from ..types.topic import Topic
from ..types.topic_detail import TopicDetail

__all__ = ["AsyncTopics", "Delivery", "Topics"]

Delivery = Literal["exactly-once", "at-least-once"]


def _create_body(
    name: str,
    retention: str | None,
    delivery: str | None,
    partitions: int | None,
    replicas: int | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name}
    if retention is not None:
        body["retention"] = retention
    if delivery is not None:
        body["delivery"] = delivery
    if partitions is not None:
        body["partitions"] = partitions
    if replicas is not None:
        body["replicas"] = replicas
    return body


def _update_body(partitions: int | None, retention: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if partitions is not None:
        body["partitions"] = partitions
    if retention is not None:
        body["retention"] = retention
    return body


def _list_options(limit: int | None, cursor: str | None) -> RequestOptions:
    return RequestOptions("GET", "/v1/topics", params={"limit": limit, "cursor": cursor})


def _read_page(response: httpx.Response) -> tuple[list[Topic], str | None]:
    body = read_json(response)
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise APIResponseValidationError(response, body, "The answer is not a {data, nextCursor} page.")
    request_id = response.headers.get("x-request-id")
    try:
        topics = [Topic.model_validate(item) for item in body["data"]]
    except pydantic.ValidationError as exc:
        raise APIResponseValidationError(response, body, f"The answer does not list topics: {exc}") from exc
    for topic in topics:
        topic._request_id = request_id
    next_cursor = body.get("nextCursor")
    return topics, next_cursor if isinstance(next_cursor, str) and next_cursor else None


class Topics(SyncAPIResource):
    """Topics of the key's environment."""

    def create(
        self,
        name: str,
        *,
        retention: str | None = None,
        delivery: Delivery | None = None,
        partitions: int | None = None,
        replicas: int | None = None,
    ) -> Topic:
        """Create a topic.

        Args:
            name: 1–249 chars of ``a-z 0-9 . _ -``, starting with a letter or digit (``order.events``).
            retention: how long messages are kept, ``<n>m|h|d`` from ``1m`` to ``365d`` (server default ``7d``).
            delivery: ``exactly-once`` (server default) or ``at-least-once``.
            partitions: 1 to 256 (server default 3); can be increased later with ``update``.
            replicas: copies of each message the server keeps, 1, 3 or 5, fixed at creation (server
                default: 3 on the replicated JetStream engine, 1 on the local engine, which offers only 1).

        Raises:
            ConflictError: a topic of that name exists (``TOPIC_ALREADY_EXISTS``).
            BadRequestError: a value is out of range, or more replicas than the server's engine keeps.
        """
        options = RequestOptions(
            "POST", "/v1/topics", json=_create_body(name, retention, delivery, partitions, replicas)
        )
        return parse_model(Topic, self._client.request(options))

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> SyncCursorPage[Topic]:
        """Topics by name. Iterating the answer walks every topic, fetching further pages lazily.

        Args:
            limit: page size, 1–1000 (server default 50).
            cursor: start after this page cursor (a previous page's ``next_cursor``).
        """

        def fetch(cursor: str | None) -> SyncCursorPage[Topic]:
            data, next_cursor = _read_page(self._client.request(_list_options(limit, cursor)))
            return SyncCursorPage(data, next_cursor, fetch)

        return fetch(cursor)

    def describe(self, name: str) -> TopicDetail:
        """A topic with per-partition offsets, message counts and sizes (``partition_details``).

        Raises:
            NotFoundError: no such topic (``TOPIC_NOT_FOUND``).
        """
        response = self._client.request(RequestOptions("GET", f"/v1/topics/{path_segment(name)}"))
        return parse_model(TopicDetail, response)

    def update(self, name: str, *, partitions: int | None = None, retention: str | None = None) -> Topic:
        """Increase a topic's partitions and/or change its retention.

        Raises:
            BadRequestError: a partition decrease, or a value out of range.
            NotFoundError: no such topic.
        """
        options = RequestOptions(
            "PATCH", f"/v1/topics/{path_segment(name)}", json=_update_body(partitions, retention)
        )
        return parse_model(Topic, self._client.request(options))

    def delete(self, name: str) -> None:
        """Delete a topic with its messages, consumer groups and dead-letter queues.

        Raises:
            NotFoundError: no such topic.
        """
        self._client.request(RequestOptions("DELETE", f"/v1/topics/{path_segment(name)}"))


class AsyncTopics(AsyncAPIResource):
    """Topics of the key's environment."""

    async def create(
        self,
        name: str,
        *,
        retention: str | None = None,
        delivery: Delivery | None = None,
        partitions: int | None = None,
        replicas: int | None = None,
    ) -> Topic:
        """Create a topic. See ``Topics.create``."""
        options = RequestOptions(
            "POST", "/v1/topics", json=_create_body(name, retention, delivery, partitions, replicas)
        )
        return parse_model(Topic, await self._client.request(options))

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> AsyncPaginator[Topic]:
        """Topics by name: ``async for topic in client.topics.list()`` walks every topic, fetching pages
        lazily; ``await client.topics.list()`` is the first page (an ``AsyncCursorPage``).

        Args:
            limit: page size, 1–1000 (server default 50).
            cursor: start after this page cursor (a previous page's ``next_cursor``).
        """

        async def fetch(cursor: str | None) -> AsyncCursorPage[Topic]:
            data, next_cursor = _read_page(await self._client.request(_list_options(limit, cursor)))
            return AsyncCursorPage(data, next_cursor, fetch)

        return AsyncPaginator(lambda: fetch(cursor))

    async def describe(self, name: str) -> TopicDetail:
        """A topic with per-partition offsets, message counts and sizes. See ``Topics.describe``."""
        response = await self._client.request(RequestOptions("GET", f"/v1/topics/{path_segment(name)}"))
        return parse_model(TopicDetail, response)

    async def update(
        self, name: str, *, partitions: int | None = None, retention: str | None = None
    ) -> Topic:
        """Increase a topic's partitions and/or change its retention. See ``Topics.update``."""
        options = RequestOptions(
            "PATCH", f"/v1/topics/{path_segment(name)}", json=_update_body(partitions, retention)
        )
        return parse_model(Topic, await self._client.request(options))

    async def delete(self, name: str) -> None:
        """Delete a topic with its messages, consumer groups and dead-letter queues."""
        await self._client.request(RequestOptions("DELETE", f"/v1/topics/{path_segment(name)}"))
