"""The clients: ``QueueCore`` (blocking, over ``httpx.Client``) and ``AsyncQueueCore`` (asyncio, over
``httpx.AsyncClient``). This is the only module that reads the environment.

Calls are grouped in resources, built on first use and cached (``client.topics``, ``client.messages``);
the two publishes are also on the client itself, as in the docs (``client.publish(...)``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from functools import cached_property
from types import TracebackType
from typing import Any

import httpx
from typing_extensions import Self

from ._base_client import AsyncAPIClient, RequestOptions, SyncAPIClient, TimeoutTypes, parse_model
from ._constants import DEFAULT_BASE_URL, DEFAULT_CONNECTION_LIMITS, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT
from ._consumer import AsyncConsumer, StartFrom, Transport
from ._exceptions import APIError, QueueCoreError
from ._raw_response import AsyncRawResponse, RawResponse
from ._sync_consumer import Consumer
from .resources.alerts import Alerts, AsyncAlerts
from .resources.consumer_groups import AsyncConsumerGroups, ConsumerGroups, DeadLetterParam
from .resources.dlq import AsyncDlq, Dlq
from .resources.messages import AsyncMessages, DurationParam, Messages, TimestampParam
from .resources.offsets import AsyncOffsets, Offsets
from .resources.schedules import AsyncSchedules, Schedules
from .resources.topics import AsyncTopics, Topics
from .types.batch_message import BatchMessage
from .types.batch_result import BatchResult
from .types.health import Health
from .types.publish_result import PublishResult

__all__ = ["AsyncQueueCore", "QueueCore"]


ENV_API_KEY = "QUEUECORE_API_KEY"
ENV_BASE_URL = "QUEUECORE_BASE_URL"
_REGION = re.compile(r"^[a-z]{2,}(-[a-z0-9]+)+$")


class NotGiven:
    """The default of an option that was not passed (``None`` is a meaningful timeout: wait forever)."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = NotGiven()


def region_base_url(region: str) -> str:
    """The base URL of a region: ``https://<region>.api.queuecore.cloud`` (the rule of every SDK)."""
    if not _REGION.match(region):
        raise QueueCoreError(f"Invalid region {region!r}: expected a name like 'us-east-1'.")
    return f"https://{region}.api.queuecore.cloud"


def _resolve(api_key: str | None, base_url: str | None, region: str | None = None) -> tuple[str, str]:
    if api_key is None:
        api_key = os.environ.get(ENV_API_KEY)
    # A key read from a file or a variable often ends in a newline: surrounding whitespace is not part of it.
    api_key = (api_key or "").strip()
    if not api_key:
        raise QueueCoreError(
            f"No API key: pass api_key= to the client or set the {ENV_API_KEY} environment variable."
        )
    if not api_key.isascii() or any(c.isspace() or not c.isprintable() for c in api_key):
        raise QueueCoreError(
            "The API key contains whitespace, control or non-ASCII characters: a QueueCore key is "
            "pq_live_sk_ or pq_test_sk_ followed by 32 letters and digits."
        )
    regional = region_base_url(region) if region else None  # checked even when a base URL wins
    if base_url is None:
        base_url = os.environ.get(ENV_BASE_URL) or regional or DEFAULT_BASE_URL
    return api_key, base_url


def _health_options() -> RequestOptions:
    # No key; a 503 carrying a health body is the answer "down", not an error to retry.
    return RequestOptions("GET", "/v1/health", authenticated=False, accept_statuses=frozenset({503}))


class QueueCore(SyncAPIClient):
    """The QueueCore client (blocking).

    ::

        from queuecore import QueueCore

        client = QueueCore()  # QUEUECORE_API_KEY, QUEUECORE_BASE_URL
        client.topics.create("order.events", partitions=6)
        client.publish("order.events", {"type": "order.created", "orderId": "ord_92jf8x"})

    Connections are pooled; close the client (or use it as a context manager) when done.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        region: str | None = None,
        timeout: TimeoutTypes = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        logger: logging.Logger | None = None,
        default_headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        """Make a client.

        Args:
            api_key: the project environment's key (``pq_live_sk_…`` / ``pq_test_sk_…``). Default: the
                ``QUEUECORE_API_KEY`` environment variable.
            base_url: default: ``QUEUECORE_BASE_URL``, else the ``region``'s URL, else
                ``http://127.0.0.1:8080``.
            region: a QueueCore Cloud region (``"us-east-1"``): the base URL is then
                ``https://<region>.api.queuecore.cloud``. An explicit ``base_url`` or ``QUEUECORE_BASE_URL``
                wins.
            timeout: seconds, or an ``httpx.Timeout``, per attempt; ``None`` waits forever.
            max_retries: retries of a failed attempt (429, 502/503/504, connection errors, timeouts).
            logger: where retries and requests are logged (default: the ``queuecore`` logger).
            default_headers: extra headers for every request.
            http_client: your own ``httpx.Client`` (proxies, transports, event hooks). It is used as is and
                not closed by ``close()``.
        """
        api_key, base_url = _resolve(api_key, base_url, region)
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            logger=logger,
            default_headers=default_headers,
        )
        self._owns_client = http_client is None
        self._client = http_client or httpx.Client(timeout=timeout, limits=DEFAULT_CONNECTION_LIMITS)

    @cached_property
    def topics(self) -> Topics:
        """Create, list, describe, update and delete topics."""
        return Topics(self)

    @cached_property
    def messages(self) -> Messages:
        """Publish, get by id, read a partition."""
        return Messages(self)

    @cached_property
    def consumer_groups(self) -> ConsumerGroups:
        """List, describe, update and delete consumer groups; reset a stopped group's offsets."""
        return ConsumerGroups(self)

    @cached_property
    def offsets(self) -> Offsets:
        """A group's offsets per partition; seek and reset, also while consuming."""
        return Offsets(self)

    @cached_property
    def dlq(self) -> Dlq:
        """A group's dead-letter queue: inspect, replay, replay all, delete, audit."""
        return Dlq(self)

    @cached_property
    def alerts(self) -> Alerts:
        """The project's alert webhook (DLQ depth alerts): set, get, delete, test, deliveries."""
        return Alerts(self)

    @cached_property
    def schedules(self) -> Schedules:
        """Schedules: a message published to a topic on a cron expression or a fixed period."""
        return Schedules(self)

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
        """Publish one message; returns once it is durable. Same as ``client.messages.publish``."""
        return self.messages.publish(
            topic,
            data,
            key=key,
            headers=headers,
            partition=partition,
            idempotency_key=idempotency_key,
            delay=delay,
            deliver_at=deliver_at,
            ttl=ttl,
            expires_at=expires_at,
        )

    def consume(
        self,
        topic: str,
        *,
        group: str,
        start_from: StartFrom = "latest",
        dead_letter: DeadLetterParam = None,
        max_in_flight: int = 100,
        transport: Transport = "websocket",
    ) -> Consumer:
        """A consumer of ``topic`` in ``group``: register handlers with ``on("message", ...)`` and
        ``on("error", ...)``, then ``start()`` (blocks until ``stop()``).

        Args:
            group: the consumer group; its members split the topic's partitions.
            start_from: ``"earliest"`` or ``"latest"`` (default), while the group has no committed offset.
            dead_letter: ``DeadLetter(...)`` or a dict of its fields: set as the group's dead-letter queue
                before joining.
            max_in_flight: messages delivered and not yet acked, at most (websocket, sse: 1 to 10,000);
                messages fetched per poll (pull: 1 to 1000).
            transport: ``"websocket"`` (push, the default), ``"pull"`` (REST long polls) or ``"sse"``
                (a Server-Sent Events stream; acks through the pull calls).
        """
        engine_client = AsyncQueueCore(
            api_key=self.api_key, base_url=self.base_url, timeout=self.timeout, max_retries=self.max_retries
        )
        engine_client._rate_limit_state = self._rate_limit_state
        engine = AsyncConsumer(
            engine_client,
            topic,
            group=group,
            start_from=start_from,
            dead_letter=dead_letter,
            max_in_flight=max_in_flight,
            transport=transport,
            logger=self._logger,
        )
        return Consumer(engine)

    def publish_batch(self, topic: str, messages: Iterable[BatchMessage | Any]) -> BatchResult:
        """Publish 1–1000 messages atomically. Same as ``client.messages.publish_batch``."""
        return self.messages.publish_batch(topic, messages)

    def health(self) -> Health:
        """The service's readiness; answered without using the key. A service that is down (503) answers
        a ``Health`` with ``status == "down"`` rather than raising; so does one that cannot be reached
        (``error`` says why)."""
        try:
            return parse_model(Health, self.request(_health_options()))
        except APIError as exc:
            return Health.unreachable(str(exc))

    def with_options(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: TimeoutTypes | NotGiven = NOT_GIVEN,
        max_retries: int | None = None,
        logger: logging.Logger | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> QueueCore:
        """A copy with some options changed, sharing this client's connection pool and rate-limit state
        (``default_headers`` are added to this client's)::

        client.with_options(max_retries=5).publish("order.events", {...})
        client.with_options(default_headers={"X-Request-Id": "req-import-42"}).topics.list()
        """
        copy = QueueCore(
            api_key=api_key or self.api_key,
            base_url=base_url or self.base_url,
            timeout=self.timeout if isinstance(timeout, NotGiven) else timeout,
            max_retries=self.max_retries if max_retries is None else max_retries,
            logger=logger or self._logger,
            default_headers={**self._custom_headers, **(default_headers or {})},
            http_client=self._client,
        )
        copy._rate_limit_state = self._rate_limit_state
        return copy

    @cached_property
    def with_raw_response(self) -> RawResponse:
        """The same calls, answering an ``APIResponse`` (status, headers, request id, rate-limit state;
        ``.parse()`` gives what the plain call returns)::

            response = client.with_raw_response.topics.describe("order.events")
            print(response.status_code, response.rate_limit)
            topic = response.parse()
        """
        return RawResponse(self, lambda client: client)

    def is_closed(self) -> bool:
        """Whether the connection pool is closed."""
        return self._client.is_closed

    def close(self) -> None:
        """Close the connection pool, unless it came from ``http_client=`` (a copy made by ``with_options``
        shares its origin's pool and leaves it open)."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncQueueCore(AsyncAPIClient):
    """The QueueCore client (asyncio).

    ::

        from queuecore import AsyncQueueCore

        async with AsyncQueueCore() as client:  # QUEUECORE_API_KEY, QUEUECORE_BASE_URL
            await client.publish("order.events", {"type": "order.created", "orderId": "ord_92jf8x"})
            async for topic in client.topics.list():
                print(topic.name)
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        region: str | None = None,
        timeout: TimeoutTypes = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        logger: logging.Logger | None = None,
        default_headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        """Make a client. The arguments are those of ``QueueCore``, with an ``httpx.AsyncClient``."""
        api_key, base_url = _resolve(api_key, base_url, region)
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            logger=logger,
            default_headers=default_headers,
        )
        self._owns_client = http_client is None
        self._client = http_client or httpx.AsyncClient(timeout=timeout, limits=DEFAULT_CONNECTION_LIMITS)

    @cached_property
    def topics(self) -> AsyncTopics:
        """Create, list, describe, update and delete topics."""
        return AsyncTopics(self)

    @cached_property
    def messages(self) -> AsyncMessages:
        """Publish, get by id, read a partition."""
        return AsyncMessages(self)

    @cached_property
    def consumer_groups(self) -> AsyncConsumerGroups:
        """List, describe, update and delete consumer groups; reset a stopped group's offsets."""
        return AsyncConsumerGroups(self)

    @cached_property
    def offsets(self) -> AsyncOffsets:
        """A group's offsets per partition; seek and reset, also while consuming."""
        return AsyncOffsets(self)

    @cached_property
    def dlq(self) -> AsyncDlq:
        """A group's dead-letter queue: inspect, replay, replay all, delete, audit."""
        return AsyncDlq(self)

    @cached_property
    def alerts(self) -> AsyncAlerts:
        """The project's alert webhook (DLQ depth alerts): set, get, delete, test, deliveries."""
        return AsyncAlerts(self)

    @cached_property
    def schedules(self) -> AsyncSchedules:
        """Schedules: a message published to a topic on a cron expression or a fixed period."""
        return AsyncSchedules(self)

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
        """Publish one message; returns once it is durable. Same as ``client.messages.publish``."""
        return await self.messages.publish(
            topic,
            data,
            key=key,
            headers=headers,
            partition=partition,
            idempotency_key=idempotency_key,
            delay=delay,
            deliver_at=deliver_at,
            ttl=ttl,
            expires_at=expires_at,
        )

    def consume(
        self,
        topic: str,
        *,
        group: str,
        start_from: StartFrom = "latest",
        dead_letter: DeadLetterParam = None,
        max_in_flight: int = 100,
        transport: Transport = "websocket",
    ) -> AsyncConsumer:
        """A consumer of ``topic`` in ``group``: register handlers with ``on(...)`` and
        ``await consumer.start()`` (runs until ``stop()``), or ``async for msg in consumer``.
        See ``QueueCore.consume``."""
        return AsyncConsumer(
            self,
            topic,
            group=group,
            start_from=start_from,
            dead_letter=dead_letter,
            max_in_flight=max_in_flight,
            transport=transport,
            logger=self._logger,
        )

    async def publish_batch(self, topic: str, messages: Iterable[BatchMessage | Any]) -> BatchResult:
        """Publish 1–1000 messages atomically. Same as ``client.messages.publish_batch``."""
        return await self.messages.publish_batch(topic, messages)

    async def health(self) -> Health:
        """The service's readiness; a service that is down (503) answers ``status == "down"``."""
        try:
            return parse_model(Health, await self.request(_health_options()))
        except APIError as exc:
            return Health.unreachable(str(exc))

    def with_options(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: TimeoutTypes | NotGiven = NOT_GIVEN,
        max_retries: int | None = None,
        logger: logging.Logger | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> AsyncQueueCore:
        """A copy with some options changed, sharing this client's connection pool."""
        copy = AsyncQueueCore(
            api_key=api_key or self.api_key,
            base_url=base_url or self.base_url,
            timeout=self.timeout if isinstance(timeout, NotGiven) else timeout,
            max_retries=self.max_retries if max_retries is None else max_retries,
            logger=logger or self._logger,
            default_headers={**self._custom_headers, **(default_headers or {})},
            http_client=self._client,
        )
        copy._rate_limit_state = self._rate_limit_state
        return copy

    @cached_property
    def with_raw_response(self) -> AsyncRawResponse:
        """The same calls, answering an ``APIResponse`` (status, headers, request id, rate-limit state;
        ``.parse()`` gives what the plain call returns)::

            response = await client.with_raw_response.topics.describe("order.events")
            print(response.status_code, response.rate_limit)
            topic = response.parse()
        """
        return AsyncRawResponse(self, lambda client: client)

    def is_closed(self) -> bool:
        """Whether the connection pool is closed."""
        return self._client.is_closed

    async def close(self) -> None:
        """Close the connection pool, unless it came from ``http_client=`` (a copy made by ``with_options``
        shares its origin's pool and leaves it open)."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.close()
