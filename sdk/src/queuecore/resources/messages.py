"""``client.messages``: publish (one or a batch), get a message by id, read a partition by offset or time.

``client.publish`` and ``client.publish_batch`` are the same calls as ``client.messages.publish`` and
``client.messages.publish_batch``.

Every publish carries an idempotency key, made before the first attempt and reused by every retry, so a
publish retried after a lost answer is appended once (the retry answers the original result, with
``replayed=True``). Pass your own ``idempotency_key`` to make a publish idempotent across processes too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Union

import httpx

from .. import _tracing
from .._base_client import RequestOptions, new_idempotency_key, parse_model
from .._models import wire_timestamp
from .._resource import AsyncAPIResource, SyncAPIResource, path_segment
from ..types.batch_message import BatchMessage
from ..types.batch_result import BatchResult
from ..types.message import Message, MessagePage
from ..types.publish_result import PublishResult

__all__ = ["AsyncMessages", "DurationParam", "Messages", "TimestampParam"]

TimestampParam = Union[datetime, int, str]
"""A point in time: an aware ``datetime``, epoch milliseconds, or an ISO-8601 string."""

DurationParam = Union[str, float, timedelta]
"""A duration: ``"90s"`` (``<n>ms|s|m|h|d``), a number of seconds, or a ``timedelta``."""


def _duration(value: DurationParam) -> str | float:
    return value.total_seconds() if isinstance(value, timedelta) else value


def _instant(value: TimestampParam) -> int | str:
    return wire_timestamp(value) if isinstance(value, datetime) else value


def _timing(
    item: dict[str, Any],
    delay: DurationParam | None,
    deliver_at: TimestampParam | None,
    ttl: DurationParam | None,
    expires_at: TimestampParam | None,
) -> None:
    """Set a publish body's ``delay`` / ``deliverAt`` / ``ttl`` / ``expiresAt`` (the server checks them)."""
    if delay is not None:
        item["delay"] = _duration(delay)
    if deliver_at is not None:
        item["deliverAt"] = _instant(deliver_at)
    if ttl is not None:
        item["ttl"] = _duration(ttl)
    if expires_at is not None:
        item["expiresAt"] = _instant(expires_at)


def _publish_options(
    topic: str,
    data: Any,
    key: str | None,
    headers: Mapping[str, str] | None,
    partition: int | None,
    idempotency_key: str | None,
    delay: DurationParam | None = None,
    deliver_at: TimestampParam | None = None,
    ttl: DurationParam | None = None,
    expires_at: TimestampParam | None = None,
) -> RequestOptions:
    body: dict[str, Any] = {"data": data}
    if key is not None:
        body["key"] = key
    if headers is not None:
        body["headers"] = dict(headers)
    if partition is not None:
        body["partition"] = partition
    _timing(body, delay, deliver_at, ttl, expires_at)
    return RequestOptions(
        "POST",
        f"/v1/topics/{path_segment(topic)}/messages",
        json=body,
        headers=_tracing.current_context() or {},
        idempotent=True,
        idempotency_key=idempotency_key,
    )


def _batch_item(message: Any, trace: dict[str, str] | None = None) -> dict[str, Any]:
    if not isinstance(message, BatchMessage):
        if trace is not None:
            return {"data": message, "headers": dict(trace), "idempotencyKey": new_idempotency_key()}
        return {"data": message, "idempotencyKey": new_idempotency_key()}
    item: dict[str, Any] = {"data": message.data}
    if message.key is not None:
        item["key"] = message.key
    headers = _tracing.with_context(message.headers, trace)
    if headers is not None:
        item["headers"] = headers
    if message.partition is not None:
        item["partition"] = message.partition
    _timing(item, message.delay, message.deliver_at, message.ttl, message.expires_at)
    item["idempotencyKey"] = message.idempotency_key or new_idempotency_key()
    return item


def _batch_options(topic: str, messages: Iterable[Any]) -> RequestOptions:
    if isinstance(messages, (Mapping, str, bytes)):
        # Iterating these would publish their keys or characters: surely not what was meant.
        raise TypeError(
            f"publish_batch takes a list of messages, not a {type(messages).__name__}; "
            "to publish one message, use publish()"
        )
    # The items' keys are made here, once: every retry sends the very same body.
    trace = _tracing.current_context()  # each item carries the publisher's context (OpenTelemetry)
    body = {"messages": [_batch_item(m, trace) for m in messages]}
    return RequestOptions("POST", f"/v1/topics/{path_segment(topic)}/messages/batch", json=body)


def _published(response: httpx.Response) -> PublishResult:
    replayed = response.headers.get("idempotent-replayed", "").lower() == "true"
    return parse_model(PublishResult, response, replayed=replayed)


def _get_options(topic: str, message_id: str) -> RequestOptions:
    return RequestOptions("GET", f"/v1/topics/{path_segment(topic)}/messages/{path_segment(message_id)}")


def _read_options(
    topic: str,
    partition: int,
    from_offset: int | None,
    from_timestamp: TimestampParam | None,
    limit: int | None,
) -> RequestOptions:
    when: int | str | None
    when = wire_timestamp(from_timestamp) if isinstance(from_timestamp, datetime) else from_timestamp
    return RequestOptions(
        "GET",
        f"/v1/topics/{path_segment(topic)}/partitions/{path_segment(partition)}/messages",
        params={"fromOffset": from_offset, "fromTimestamp": when, "limit": limit},
    )


class Messages(SyncAPIResource):
    """Publishing and reading messages."""

    def publish(
        self,
        topic: str,
        data: Any,
        *,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        partition: int | None = None,
        idempotency_key: str | None = None,
        delay: DurationParam | None = None,
        deliver_at: TimestampParam | None = None,
        ttl: DurationParam | None = None,
        expires_at: TimestampParam | None = None,
    ) -> PublishResult:
        """Publish one message; returns once it is durable.

        Args:
            topic: the topic's name.
            data: any JSON value (``None`` too), at most 256 KiB serialized.
            key: messages with one key land on one partition, in order.
            headers: a map of strings.
            partition: an explicit partition (overrides ``key``).
            idempotency_key: the publish's idempotency key (1–256 printable chars). Default: a fresh uuid4
                key, reused by this call's retries. A key seen in the topic within 24 h appends nothing and
                answers the original result with ``replayed=True``.
            delay: deliver to consumer groups this much later (``"90s"``, seconds, or a ``timedelta``; at
                most 30 days). The message is stored, and readable, at once.
            deliver_at: or deliver from this time on (a ``datetime``, epoch ms, or ISO-8601; a past time
                means now). Not with ``delay``.
            ttl: never deliver it once this long has passed since the publish (with a DLQ it moves there
                with reason ``"expired"``).
            expires_at: or never deliver it from this time on. Not with ``ttl``.

        Raises:
            NotFoundError: no such topic.
            PayloadTooLargeError: the message is over 256 KiB.
            ServiceUnavailableError: it could not be made durable (after retries).
        """
        options = _publish_options(
            topic, data, key, headers, partition, idempotency_key, delay, deliver_at, ttl, expires_at
        )
        return _published(self._client.request(options))

    def publish_batch(self, topic: str, messages: Iterable[BatchMessage | Any]) -> BatchResult:
        """Publish 1–1000 messages atomically: all are written, or none.

        Each element is a message's data, or a ``BatchMessage`` carrying data with a key, headers, a
        partition or an idempotency key. Items without an idempotency key get one (made once, reused by
        retries); items whose key was already seen answer ``replayed=True`` and are not written again.

        Raises:
            BadRequestError: no messages, more than 1000, or an invalid item (the whole batch is refused).
            PayloadTooLargeError: an item over 256 KiB or a body over 10 MiB (the whole batch is refused).
        """
        return parse_model(BatchResult, self._client.request(_batch_options(topic, messages)))

    def get(self, topic: str, message_id: str) -> Message:
        """One message by id (``msg_…``).

        Raises:
            NotFoundError: no such topic or message (``MESSAGE_NOT_FOUND``).
            BadRequestError: a malformed message id.
        """
        return parse_model(Message, self._client.request(_get_options(topic, message_id)))

    def read(
        self,
        topic: str,
        partition: int,
        *,
        from_offset: int | None = None,
        from_timestamp: TimestampParam | None = None,
        limit: int | None = None,
    ) -> MessagePage:
        """Messages of one partition in offset order, without a consumer group (browse, replay).

        Args:
            topic: the topic's name.
            partition: the partition number.
            from_offset: the first offset to read (reads below the earliest retained offset start there).
            from_timestamp: the first message at or after this time (a ``datetime``, epoch ms, or ISO-8601).
            limit: at most this many messages, 1–1000 (server default 100).

        Continue from ``page.next_offset`` to read on.
        """
        options = _read_options(topic, partition, from_offset, from_timestamp, limit)
        return parse_model(MessagePage, self._client.request(options))


class AsyncMessages(AsyncAPIResource):
    """Publishing and reading messages."""

    async def publish(
        self,
        topic: str,
        data: Any,
        *,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        partition: int | None = None,
        idempotency_key: str | None = None,
        delay: DurationParam | None = None,
        deliver_at: TimestampParam | None = None,
        ttl: DurationParam | None = None,
        expires_at: TimestampParam | None = None,
    ) -> PublishResult:
        """Publish one message; returns once it is durable. See ``Messages.publish``."""
        options = _publish_options(
            topic, data, key, headers, partition, idempotency_key, delay, deliver_at, ttl, expires_at
        )
        return _published(await self._client.request(options))

    async def publish_batch(self, topic: str, messages: Iterable[BatchMessage | Any]) -> BatchResult:
        """Publish 1–1000 messages atomically. See ``Messages.publish_batch``."""
        return parse_model(BatchResult, await self._client.request(_batch_options(topic, messages)))

    async def get(self, topic: str, message_id: str) -> Message:
        """One message by id. See ``Messages.get``."""
        return parse_model(Message, await self._client.request(_get_options(topic, message_id)))

    async def read(
        self,
        topic: str,
        partition: int,
        *,
        from_offset: int | None = None,
        from_timestamp: TimestampParam | None = None,
        limit: int | None = None,
    ) -> MessagePage:
        """Messages of one partition in offset order. See ``Messages.read``."""
        options = _read_options(topic, partition, from_offset, from_timestamp, limit)
        return parse_model(MessagePage, await self._client.request(options))
