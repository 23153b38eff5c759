"""The WebSocket transport of a consumer: ``GET /v1/topics/{topic}/consume`` pushes messages; acks, nacks and
extends go back as frames, batched; the connection is the membership (closing it leaves the group).

Reconnects by itself with exponential backoff and jitter (a server restart, a dropped connection, 429/5xx at
the upgrade) and joins again as a new member; refusals that retrying cannot fix (401, 403, 404, 400) end
``start()`` with the typed exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from ._exceptions import APIConnectionError, APIStatusError, address, make_status_error
from ._resource import path_segment
from .types.consumed_message import ConsumedMessage

if TYPE_CHECKING:
    from ._consumer import AsyncConsumer

ACK_LINGER = 0.005  # seconds acks wait for company before they go out as one frame
ACK_BATCH = 500
STOP_FLUSH_SECONDS = 5.0
MAX_BACKOFF = 5.0
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def ws_url(base_url: str, topic: str, group: str, start_from: str, max_in_flight: int) -> str:
    parts = urlsplit(base_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    path = parts.path.rstrip("/") + f"/v1/topics/{path_segment(topic)}/consume"
    query = f"group={quote(group, safe='')}&startFrom={start_from}&maxInFlight={max_in_flight}"
    return urlunsplit((scheme, parts.netloc, path, query, ""))


def _refusal(url: str, status: int, headers: dict[str, str], body: bytes) -> APIStatusError:
    """The upgrade's refusal as the SDK's typed exception (its body is the API's error envelope)."""
    response = httpx.Response(status, headers=headers, content=body, request=httpx.Request("GET", url))
    try:
        parsed: object = json.loads(body) if body else None
    except ValueError:
        parsed = None
    return make_status_error(response, parsed)


def _closed_for_restart(exc: BaseException) -> bool:
    """The server closed with 1012 (service restart): a deploy, even when its ``draining`` frame was not
    seen (a connection opened on a node that had begun draining)."""
    received = getattr(exc, "rcvd", None)
    return getattr(received, "code", None) == 1012


class PushSession:
    """Runs one consumer over WebSocket connections until it is stopped."""

    def __init__(self, consumer: AsyncConsumer) -> None:
        self.consumer = consumer
        self.member_id: str | None = None
        self.generation = 0
        self._unanswered = 0  # ack/nack/extend frames sent, their ``acked`` not yet received
        self._answered = asyncio.Event()
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._accepting = True  # False once stopping: deliveries after that are left to the server
        self._draining = False  # the server said it is shutting down: its close is no failure
        self._drain_said = asyncio.Event()  # set by the ``draining`` frame: hand over, then reconnect
        self._queues: dict[int, asyncio.Queue[ConsumedMessage | None]] = {}

    async def run(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException

        consumer = self.consumer
        client = consumer._client
        url = ws_url(
            client.base_url, consumer.topic, consumer.group, consumer.start_from, consumer.max_in_flight
        )
        headers = {"Authorization": f"Bearer {client.api_key}", "User-Agent": "queuecore-python"}
        failures = 0
        while not consumer._stopping:
            try:
                async with connect(
                    url,
                    additional_headers=headers,
                    open_timeout=10,
                    max_size=64 * 1024 * 1024,
                    ping_interval=10,
                ) as ws:
                    failures = 0
                    await self._session(ws)
            except InvalidStatus as exc:
                response = exc.response
                error = _refusal(
                    url, response.status_code, dict(response.headers.raw_items()), bytes(response.body or b"")
                )
                if response.status_code not in _RETRY_STATUSES:
                    await consumer._emit_error(error)
                    raise error from None
                failures += 1
                await consumer._emit_error(error)
                delay = getattr(error, "retry_after", None) or min(MAX_BACKOFF, 0.1 * 2**failures)
                await consumer._sleep(delay * (0.5 + random.random() / 2))
            except (OSError, asyncio.TimeoutError, WebSocketException) as exc:
                if consumer._stopping:
                    return
                if self._draining or _closed_for_restart(exc):
                    # A deploy: the node said `draining` and closed (1012). Reconnect at once (to another
                    # node behind the same address), reporting nothing: no error happened.
                    self._draining, failures = False, 0
                    consumer._log.info("the server is draining; reconnecting")
                    await consumer._sleep(random.random() / 10)
                    continue
                failures += 1
                request = httpx.Request("GET", url)
                await consumer._emit_error(
                    APIConnectionError(
                        request=request,
                        message=f"WebSocket connection to {address(request)} lost: {exc or type(exc).__name__}",
                    )
                )
                await consumer._sleep(min(MAX_BACKOFF, 0.1 * 2**failures) * (0.5 + random.random() / 2))
            finally:
                await self._drop_workers()
                self.member_id, self.generation = None, 0

    async def _session(self, ws: Any) -> None:
        consumer = self.consumer
        welcome = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if welcome.get("type") == "draining":
            # Connected to a node that had begun draining (its balancer had not noticed yet): not a member
            # there; connect again (to another node), reporting nothing.
            consumer._log.info("the server is draining; reconnecting")
            await consumer._sleep(random.random() / 10)
            return
        if welcome.get("type") == "error":
            raise _refusal("", int(welcome["error"].get("status", 500)), {}, json.dumps(welcome).encode())
        self.member_id, self.generation = welcome.get("memberId"), int(welcome.get("generationId", 0))
        consumer._member_id = self.member_id
        consumer._log.debug(
            "joined %s/%s as %s over WebSocket", consumer.topic, consumer.group, self.member_id
        )
        consumer._generation = self.generation
        assignments = welcome.get("assignments")
        await consumer._rebalanced(assignments if isinstance(assignments, list) else [])
        self._unanswered = 0
        self._drain_said.clear()
        reader = asyncio.ensure_future(self._read(ws))
        writer = asyncio.ensure_future(self._write(ws))
        stop = asyncio.ensure_future(self._stopped())
        drained = asyncio.ensure_future(self._drain_said.wait())
        try:
            done, _ = await asyncio.wait({reader, writer, stop, drained}, return_when=asyncio.FIRST_COMPLETED)
            if stop in done:
                await self._finish(ws, reader, writer)
                return
            if drained in done:
                # A deploy: hand over as a stop does (running handlers finish, their acks are sent and
                # answered, messages not started are left to the next owner), then connect again.
                await self._finish(ws, reader, writer, leave=False)
                consumer._log.info("the server is draining; reconnecting")
                self._draining = False
                return
            for task in done:
                task.result()  # the connection's end, as an exception
        finally:
            for task in (reader, writer, stop, drained):
                task.cancel()
            await asyncio.gather(reader, writer, stop, drained, return_exceptions=True)
            consumer._member_id = None

    async def _stopped(self) -> None:
        assert self.consumer._stop_event is not None
        await self.consumer._stop_event.wait()

    async def _finish(
        self, ws: Any, reader: asyncio.Task[None], writer: asyncio.Task[None], *, leave: bool = True
    ) -> None:
        """Graceful stop: no new messages, running handlers finish, acks are flushed and answered, close
        (and, ``leave``, leave the group; a draining server's close leaves it anyway)."""
        self._accepting = False
        workers = list(self._workers.values())
        for queue in self._queues.values():
            while not queue.empty():
                queue.get_nowait()  # not started: the server redelivers them after we leave
        for queue in self._queues.values():
            queue.put_nowait(None)  # the worker's end
        await asyncio.gather(*workers, return_exceptions=True)
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._flush(ws)
            deadline = asyncio.get_running_loop().time() + STOP_FLUSH_SECONDS
            while self._unanswered > 0 and not reader.done():
                self._answered.clear()
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._answered.wait(), left)
        with contextlib.suppress(Exception):
            await ws.close()
        # The server removes the member when it sees the close; leaving explicitly too makes ``start()``
        # return only once the group knows (a second leave is a harmless 404).
        if leave and self.member_id is not None:
            with contextlib.suppress(Exception):
                await self.consumer._call("DELETE", f"/members/{self.member_id}")

    async def _read(self, ws: Any) -> None:
        consumer = self.consumer
        self._accepting = True
        async for raw in ws:
            frame = json.loads(raw)
            kind = frame.get("type")
            if kind == "message":
                self._deliver(frame)
            elif kind == "messages":
                for item in frame.get("messages", []):
                    self._deliver(item)
            elif kind == "acked":
                self._unanswered = max(0, self._unanswered - 1)
                self._answered.set()
                await consumer._report_failed(frame, "ack")
            elif kind == "draining":
                self._draining = True
                self._drain_said.set()
            elif kind == "rebalance":
                self.generation = int(frame.get("generationId", self.generation))
                consumer._generation = self.generation
                assignments = frame.get("assignments")
                await consumer._rebalanced(assignments if isinstance(assignments, list) else [])
            elif kind == "error":
                error = frame.get("error", {})
                await consumer._emit_error(
                    _refusal("", int(error.get("status", 400)), {}, json.dumps(frame).encode())
                )

    def _deliver(self, item: dict[str, Any]) -> None:
        if not self._accepting:
            return
        message = ConsumedMessage.model_validate(item)
        message._settle = self.consumer._settler
        queue = self._queues.get(message.partition)
        if queue is None or message.partition not in self._workers or self._workers[message.partition].done():
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

    async def _write(self, ws: Any) -> None:
        consumer = self.consumer
        assert consumer._flush_event is not None
        while True:
            await consumer._flush_event.wait()
            consumer._flush_event.clear()
            await asyncio.sleep(ACK_LINGER)  # let acks of the same burst share a frame
            await self._flush(ws)

    async def _flush(self, ws: Any) -> None:
        acks, nacks, extends = self.consumer._settler.take()
        try:
            for start in range(0, len(acks), ACK_BATCH):
                await ws.send(json.dumps({"type": "ack", "ids": acks[start : start + ACK_BATCH]}))
                self._unanswered += 1
            for message_id, reason, delay, dead_letter in nacks:
                frame: dict[str, Any] = {"type": "nack", "id": message_id}
                if reason is not None:
                    frame["reason"] = reason
                if delay is not None:
                    frame["delay"] = delay
                if dead_letter:
                    frame["deadLetter"] = True
                await ws.send(json.dumps(frame))
                self._unanswered += 1
            for message_id, seconds in extends:
                await ws.send(json.dumps({"type": "extend", "id": message_id, "seconds": seconds}))
                self._unanswered += 1
        except Exception:
            # Not sent: keep them for the next connection (where they may fail as ACK_EXPIRED: the server
            # redelivers what this member held once it left).
            for message_id in acks:
                self.consumer._settler.ack(message_id)
            raise
