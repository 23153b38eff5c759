"""The Server-Sent Events transport of a consumer: ``GET …/groups/{group}/events`` streams the messages of a
member the server polls for; acks, nacks and extends go back through the pull calls (batched, as the pull
transport sends them), with the member id and generation the stream announced. The stream is the
membership: closing it leaves the group.

Reconnects by itself with exponential backoff and jitter (a dropped stream, 429/5xx before it starts) and
joins again as a new member; at once, reporting nothing, after the server said ``draining``. Refusals that
retrying cannot fix (401, 403, 404, 400, and an ``error`` event: a revoked key, a deleted topic) end
``start()`` with the typed exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ._base_client import RequestOptions
from ._exceptions import APIConnectionError, APIStatusError, address, make_status_error
from .types.consumed_message import ConsumedMessage

if TYPE_CHECKING:
    from ._consumer import AsyncConsumer

MAX_BACKOFF = 5.0
ACK_FLUSH_INTERVAL = 0.1
# The server sends a keepalive comment at least every 15 s: a stream silent for longer than this is dead.
READ_TIMEOUT = 45.0
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass
class ServerEvent:
    """One event of a ``text/event-stream`` (``event`` defaults to ``"message"``, as for an EventSource)."""

    event: str = "message"
    data: str = ""
    id: str | None = None


async def read_events(response: httpx.Response) -> AsyncIterator[ServerEvent]:
    """The events of a streamed answer as they arrive (comments, such as keepalives, are skipped)."""
    event, fields = ServerEvent(), 0
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if fields and (data or event.event != "message"):
                event.data = "\n".join(data)
                yield event
            event, data, fields = ServerEvent(), [], 0
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        fields += 1
        if name == "event":
            event.event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            event.id = value


def _error(url: str, status: int, body: bytes) -> APIStatusError:
    response = httpx.Response(status, content=body, request=httpx.Request("GET", url))
    try:
        parsed: object = json.loads(body) if body else None
    except ValueError:
        parsed = None
    return make_status_error(response, parsed)


class _Ended(Exception):
    """The server ended the stream (``draining`` said first, or not)."""


class SseSession:
    """Runs one consumer over event streams until it is stopped."""

    def __init__(self, consumer: AsyncConsumer) -> None:
        self.consumer = consumer
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._queues: dict[int, asyncio.Queue[ConsumedMessage | None]] = {}
        self._accepting = True
        self._draining = False

    async def run(self) -> None:
        consumer = self.consumer
        flusher = asyncio.ensure_future(self._flush_loop())
        failures = 0
        try:
            while not consumer._stopping:
                try:
                    await self._stream()
                    failures = 0
                except APIStatusError as exc:
                    if exc.status_code not in _RETRY_STATUSES:
                        await consumer._emit_error(exc)
                        raise
                    failures += 1
                    await consumer._emit_error(exc)
                    delay = getattr(exc, "retry_after", None) or min(MAX_BACKOFF, 0.1 * 2**failures)
                    await consumer._sleep(delay * (0.5 + random.random() / 2))
                except (httpx.TransportError, _Ended) as exc:
                    if consumer._stopping:
                        return
                    if self._draining:
                        # A deploy: reconnect at once (to another node behind the same address).
                        self._draining, failures = False, 0
                        consumer._log.info("the server is draining; reconnecting")
                        await consumer._sleep(random.random() / 10)
                        continue
                    failures += 1
                    request = httpx.Request("GET", consumer._client.base_url + consumer._path("/events"))
                    await consumer._emit_error(
                        APIConnectionError(
                            request=request,
                            message=f"Event stream from {address(request)} lost: {exc or type(exc).__name__}",
                        )
                    )
                    await consumer._sleep(min(MAX_BACKOFF, 0.1 * 2**failures) * (0.5 + random.random() / 2))
                finally:
                    await self._drop_workers()
        finally:
            consumer._stopping = True
            assert consumer._flush_event is not None
            consumer._flush_event.set()
            await asyncio.gather(flusher, return_exceptions=True)

    async def _flush_loop(self) -> None:
        """Settlements through the pull calls while a stream's member exists; between streams they wait
        for the next member."""
        consumer = self.consumer
        assert consumer._flush_event is not None
        while not consumer._stopping:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(consumer._flush_event.wait(), timeout=ACK_FLUSH_INTERVAL)
            consumer._flush_event.clear()
            if consumer._member_id is not None:
                await consumer._flush_once()

    async def _stream(self) -> None:
        consumer = self.consumer
        client = consumer._client
        request = client._build_request(
            RequestOptions(
                "GET",
                consumer._path("/events"),
                params={"startFrom": consumer.start_from, "maxInFlight": consumer.max_in_flight},
                headers={"Accept": "text/event-stream"},
            )
        )
        request.extensions["timeout"] = httpx.Timeout(10.0, read=READ_TIMEOUT).as_dict()
        response = await client._client.send(request, stream=True)
        try:
            if response.status_code != 200:
                raise _error(str(request.url), response.status_code, await response.aread())
            events = read_events(response)
            reader = asyncio.ensure_future(self._read(events))
            stop = asyncio.ensure_future(self._stopped())
            try:
                done, _ = await asyncio.wait({reader, stop}, return_when=asyncio.FIRST_COMPLETED)
                if stop in done:
                    await self._finish()
                    return
                reader.result()  # how the stream ended, as an exception
            finally:
                for task in (reader, stop):
                    task.cancel()
                await asyncio.gather(reader, stop, return_exceptions=True)
        finally:
            await response.aclose()  # the server sees the stream close: the member leaves
            member = consumer._member_id
            consumer._member_id, consumer._generation = None, 0
            if member is not None and consumer._stopping:
                # Leaving explicitly too makes ``start()`` return only once the group knows (a second
                # leave is a harmless 404).
                with contextlib.suppress(Exception):
                    await consumer._call("DELETE", f"/members/{member}")

    async def _stopped(self) -> None:
        assert self.consumer._stop_event is not None
        await self.consumer._stop_event.wait()

    async def _finish(self) -> None:
        """Graceful stop: no new messages, running handlers finish, acks are sent while the member still
        exists (the stream is open), then the stream closes."""
        self._accepting = False
        workers = list(self._workers.values())
        for queue in self._queues.values():
            while not queue.empty():
                queue.get_nowait()  # not started: the server redelivers them after we leave
            queue.put_nowait(None)
        await asyncio.gather(*workers, return_exceptions=True)
        await self.consumer._flush_once()

    async def _read(self, events: AsyncIterator[ServerEvent]) -> None:
        consumer = self.consumer
        self._accepting = True
        async for event in events:
            if event.event == "message":
                self._deliver(json.loads(event.data))
            elif event.event in ("welcome", "rebalance"):
                fields = json.loads(event.data)
                consumer._member_id = fields.get("memberId", consumer._member_id)
                consumer._generation = int(fields.get("generationId", 0))
                if event.event == "welcome":
                    consumer._log.debug(
                        "joined %s/%s as %s over SSE", consumer.topic, consumer.group, consumer._member_id
                    )
                assignments = fields.get("assignments")
                await consumer._rebalanced(assignments if isinstance(assignments, list) else [])
            elif event.event == "draining":
                self._draining = True
            elif event.event == "error":
                error = json.loads(event.data).get("error", {})
                raise _error("", int(error.get("status", 500)), event.data.encode())
        raise _Ended("the server ended the stream")

    def _deliver(self, item: dict[str, Any]) -> None:
        if not self._accepting:
            return
        message = ConsumedMessage.model_validate(item)
        message._settle = self.consumer._settler
        queue = self._queues.get(message.partition)
        if queue is None or self._workers[message.partition].done():
            queue = self._queues[message.partition] = asyncio.Queue()
            self._workers[message.partition] = asyncio.ensure_future(self._work(queue))
        queue.put_nowait(message)

    async def _work(self, queue: asyncio.Queue[ConsumedMessage | None]) -> None:
        """One partition's messages, in offset order, one at a time."""
        while True:
            message = await queue.get()
            if message is None:
                return
            await self.consumer._handle_in_order([message])

    async def _drop_workers(self) -> None:
        for task in self._workers.values():
            task.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)
        self._workers.clear()
        self._queues.clear()
