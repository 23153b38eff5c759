"""Consumers: ``client.consume(topic, group=...)`` joins a consumer group and runs handlers on its messages,
batching acks, riding out rebalances, restarts and dropped connections. Three transports: WebSocket push (the
default, ``_push.py``: the connection is the membership), REST pull (``transport="pull"``: long polls,
heartbeats, explicit join and leave; for environments without WebSocket) and Server-Sent Events
(``transport="sse"``, ``_sse.py``: one streamed GET is the membership, acks go through the pull calls).

The engine is asyncio (``AsyncConsumer``); the sync ``Consumer`` (``_sync_consumer.py``) runs the same engine
on an event loop of its own in the thread that calls ``start()``, with sync handlers in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import random
import re
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, Callable, Literal, Union

import httpx

from . import _tracing
from ._base_client import RequestOptions, parse_model
from ._consumer_kit import Nack, RebalanceEvent, _Settler
from ._exceptions import (
    AckError,
    APIConnectionError,
    APIStatusError,
    InternalServerError,
    RateLimitError,
    ServiceUnavailableError,
)
from ._models import BaseModel
from ._resource import path_segment
from .resources.consumer_groups import DeadLetterParam, dead_letter_wire
from .types.consumed_message import ConsumedMessage

if TYPE_CHECKING:
    from ._client import AsyncQueueCore

__all__ = ["AsyncConsumer", "Event", "Handler", "RebalanceEvent", "StartFrom", "Transport"]

StartFrom = Literal["earliest", "latest"]
Transport = Literal["websocket", "pull", "sse"]
Handler = Callable[[Any], Union[Awaitable[None], None]]
Event = Literal["message", "error", "rebalance"]
_EVENTS = "'message', 'error' or 'rebalance'"

ACK_FLUSH_INTERVAL = 0.1
POLL_WAIT_SECONDS = 5.0
MAX_BACKOFF = 5.0
_REJOIN_CODES = frozenset({"MEMBER_NOT_FOUND", "STALE_GENERATION"})
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(duration: str, default: float) -> float:
    match = _DURATION.match(duration.strip())
    return float(match.group(1)) * _UNITS[match.group(2)] if match else default


class _Joined(BaseModel):
    member_id: str
    generation_id: int
    assignments: list[int]
    session_timeout: str


class _Heartbeat(BaseModel):
    generation_id: int
    should_rejoin: bool
    assignments: list[int]


class _Rejoin(Exception):
    """The membership is gone or stale: join again."""


def _retryable(exc: Exception) -> bool:
    return isinstance(
        exc,
        (
            APIConnectionError,
            httpx.TransportError,
            InternalServerError,
            ServiceUnavailableError,
            RateLimitError,
        ),
    )


class AsyncConsumer:
    """A member of a consumer group, fed over WebSocket (or by long polls with ``transport="pull"``).
    Build it with ``client.consume(...)``.

    ::

        consumer = client.consume("order.events", group="order-processing")
        consumer.on("message", handle)  # sync or async; raise to nack
        await consumer.start()  # runs until consumer.stop()
    """

    def __init__(
        self,
        client: AsyncQueueCore,
        topic: str,
        *,
        group: str,
        start_from: StartFrom = "latest",
        dead_letter: DeadLetterParam = None,
        max_in_flight: int = 100,
        transport: Transport = "websocket",
        logger: logging.Logger | None = None,
    ) -> None:
        if transport not in ("websocket", "pull", "sse"):
            raise ValueError(f"unknown transport {transport!r}: 'websocket', 'pull' or 'sse'")
        limit = 1000 if transport == "pull" else 10_000
        if not 1 <= max_in_flight <= limit:
            raise ValueError(f"max_in_flight must be 1 to {limit}")
        self.topic = topic
        self.group = group
        self.start_from = start_from
        self.dead_letter = dead_letter
        self.max_in_flight = max_in_flight
        self.transport = transport
        self._client = client
        self._log = logger or logging.getLogger("queuecore")
        self._handlers: dict[str, list[Handler]] = {"message": [], "error": [], "rebalance": []}
        self._assignments: list[int] = []
        self._settler = _Settler()
        self._member_id: str | None = None
        self._generation = 0
        self._session_seconds = 10.0
        self._stopping = False
        self._running = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._flush_event: asyncio.Event | None = None
        self._flush_lock: asyncio.Lock | None = None
        self._poll_task: asyncio.Task[Any] | None = None
        self._sync_handlers_in_threads = False

    @property
    def member_id(self) -> str | None:
        """The member id while joined (``csr_…``)."""
        return self._member_id

    @property
    def assignments(self) -> list[int]:
        """The partitions this member holds now."""
        return list(self._assignments)

    def on(self, event: Event, handler: Handler) -> AsyncConsumer:
        """Register a handler: ``"message"`` gets each ``ConsumedMessage`` (raise to nack it), ``"error"``
        each exception the consumer survives (connection errors, refused calls, handler failures, and an
        ``AckError`` for each ack, nack or extend the server refused), ``"rebalance"`` a ``RebalanceEvent``
        after each join and rebalance."""
        if event not in self._handlers:
            raise ValueError(f"unknown event {event!r}: {_EVENTS}")
        self._handlers[event].append(handler)
        return self

    def off(self, event: Event, handler: Handler) -> AsyncConsumer:
        """Remove a handler registered with ``on``."""
        if event not in self._handlers:
            raise ValueError(f"unknown event {event!r}: {_EVENTS}")
        with contextlib.suppress(ValueError):
            self._handlers[event].remove(handler)
        return self

    # -- paths and calls ------------------------------------------------------------------------------------

    def _path(self, tail: str) -> str:
        return f"/v1/topics/{path_segment(self.topic)}/groups/{path_segment(self.group)}{tail}"

    async def _call(self, method: str, tail: str, body: Any = None) -> httpx.Response:
        return await self._client.request(RequestOptions(method, self._path(tail), json=body))

    def _member_call(self, exc: APIStatusError) -> None:
        if exc.code in _REJOIN_CODES:
            raise _Rejoin() from exc

    async def _join(self) -> None:
        body: dict[str, Any] = {"startFrom": self.start_from}
        if self._member_id is not None:
            body["memberId"] = self._member_id
        joined = parse_model(_Joined, await self._call("POST", "/members", body))
        self._member_id, self._generation = joined.member_id, joined.generation_id
        self._session_seconds = _seconds(joined.session_timeout, 10.0)
        self._log.debug(
            "joined %s/%s as %s (generation %s)",
            self.topic,
            self.group,
            joined.member_id,
            joined.generation_id,
        )
        await self._rebalanced(joined.assignments)

    async def _rebalanced(self, assignments: list[int]) -> None:
        """Note the member's partitions and tell the ``"rebalance"`` handlers (a handler's failure goes
        to ``"error"``)."""
        self._assignments = list(assignments)
        self._log.debug("%s/%s: partitions %s", self.topic, self.group, self._assignments)
        event = RebalanceEvent(self._member_id, self._generation, list(self._assignments))
        for handler in list(self._handlers["rebalance"]):
            try:
                await self._invoke(handler, event)
            except Exception as exc:  # noqa: BLE001 — reported, the consumer goes on
                await self._emit_error(exc)

    async def _report_failed(self, answer: object, action: str) -> None:
        """Each settlement the server refused (``failed: [{id, code}]``) as an ``AckError`` on ``"error"``."""
        failed = answer.get("failed") if isinstance(answer, dict) else None
        if not isinstance(failed, list):
            return
        for item in failed:
            if isinstance(item, dict):
                await self._emit_error(AckError(str(item.get("id")), str(item.get("code")), action))

    async def _emit_error(self, exc: BaseException) -> None:
        if not self._handlers["error"]:
            self._log.warning("consumer %s/%s: %s", self.topic, self.group, exc)
        for handler in self._handlers["error"]:
            try:
                await self._invoke(handler, exc)
            except Exception:  # noqa: BLE001 — an error handler's own failure is only logged
                self._log.exception("the consumer's error handler failed")

    async def _invoke(self, handler: Handler, arg: Any) -> None:
        if inspect.iscoroutinefunction(handler):
            await handler(arg)
            return
        if self._sync_handlers_in_threads:
            # In the handler's thread, the caller's context (its current span) as in its own.
            context = contextvars.copy_context()
            result = await asyncio.get_running_loop().run_in_executor(None, context.run, handler, arg)
        else:
            result = handler(arg)
        if inspect.isawaitable(result):
            await result

    # -- the engine -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the group and consume until ``stop()``; then leave gracefully."""
        if self._running:
            raise RuntimeError("the consumer is already running")
        self._running = True  # a stop() that came first still counts
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._flush_event = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        loop, flush_event = self._loop, self._flush_event

        def wake() -> None:
            loop.call_soon_threadsafe(flush_event.set)

        self._settler.wake = wake
        try:
            if self.dead_letter is not None:
                body = {"deadLetter": dead_letter_wire(self.dead_letter)}
                await self._with_retries(lambda: self._call("PUT", "", body))
            if self.transport == "websocket":
                from ._push import PushSession

                self._settler.wake_on_ack = True
                await PushSession(self).run()
            elif self.transport == "sse":
                from ._sse import SseSession

                await SseSession(self).run()
            else:
                await self._run()
        finally:
            self._running, self._stopping = False, False
            self._settler.wake = None

    async def _with_retries(self, call: Callable[[], Awaitable[Any]]) -> Any:
        attempt = 0
        while True:
            try:
                return await call()
            except Exception as exc:
                if not _retryable(exc) or self._stopping:
                    raise
                attempt += 1
                await self._emit_error(exc)
                await self._sleep(min(MAX_BACKOFF, 0.1 * 2**attempt) * (0.5 + random.random() / 2))

    async def _sleep(self, seconds: float) -> None:
        assert self._stop_event is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop_event.wait(), timeout=seconds)

    async def _run(self) -> None:
        flusher = asyncio.ensure_future(self._flush_loop())
        heartbeater = asyncio.ensure_future(self._heartbeat_loop())
        try:
            await self._poll_loop()
        finally:
            heartbeater.cancel()
            await asyncio.gather(heartbeater, return_exceptions=True)
            self._stopping = True
            assert self._flush_event is not None
            self._flush_event.set()
            await asyncio.gather(flusher, return_exceptions=True)
            await self._flush_once()
            await self._leave()

    async def _poll_loop(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                if self._member_id is None or self._generation == 0:
                    await self._join()
                self._poll_task = asyncio.ensure_future(self._poll())
                try:
                    messages = await self._poll_task
                finally:
                    self._poll_task = None
                failures = 0
                if messages:
                    await self._dispatch(messages)
            except asyncio.CancelledError:
                if self._stopping:
                    return
                raise
            except _Rejoin:
                self._generation = 0
            except APIStatusError as exc:
                if exc.code in _REJOIN_CODES:
                    if exc.code == "MEMBER_NOT_FOUND":
                        self._member_id = None
                    self._generation = 0
                    continue
                if not _retryable(exc):
                    await self._emit_error(exc)
                    raise
                failures += 1
                await self._emit_error(exc)
                await self._sleep(min(MAX_BACKOFF, 0.1 * 2**failures) * (0.5 + random.random() / 2))
            except Exception as exc:
                if not _retryable(exc):
                    raise
                failures += 1
                await self._emit_error(exc)
                await self._sleep(min(MAX_BACKOFF, 0.1 * 2**failures) * (0.5 + random.random() / 2))

    async def _poll(self) -> list[ConsumedMessage]:
        body = {
            "memberId": self._member_id,
            "generationId": self._generation,
            "maxMessages": self.max_in_flight,
            "waitSeconds": POLL_WAIT_SECONDS,
        }
        response = await self._call("POST", "/poll", body)
        raw = response.json().get("messages", [])
        messages = [ConsumedMessage.model_validate(item) for item in raw]
        for message in messages:
            message._settle = self._settler
        return messages

    async def _dispatch(self, messages: list[ConsumedMessage]) -> None:
        by_partition: dict[int, list[ConsumedMessage]] = {}
        for message in messages:
            by_partition.setdefault(message.partition, []).append(message)
        await asyncio.gather(*(self._handle_in_order(run) for run in by_partition.values()))

    async def _handle_in_order(self, run: list[ConsumedMessage]) -> None:
        for message in run:
            if self._stopping:
                # Received but not handled: neither acked nor lost (leaving the group releases them).
                return
            for handler in self._handlers["message"]:
                try:
                    with _tracing.processing(message, self.group):  # a ``process`` span (OpenTelemetry)
                        await self._invoke(handler, message)
                except Exception as exc:  # noqa: BLE001
                    message.nack(f"{type(exc).__name__}: {exc}"[:1024])
                    await self._emit_error(exc)
                    break

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(max(0.5, self._session_seconds / 3))
            if self._member_id is None or self._generation == 0:
                continue
            try:
                body = {"generationId": self._generation}
                beat = parse_model(
                    _Heartbeat, await self._call("POST", f"/members/{self._member_id}/heartbeat", body)
                )
                if beat.should_rejoin:
                    self._generation = 0
                elif beat.assignments != self._assignments:
                    self._generation = beat.generation_id
                    await self._rebalanced(beat.assignments)
            except APIStatusError as exc:
                if exc.code in _REJOIN_CODES:
                    if exc.code == "MEMBER_NOT_FOUND":
                        self._member_id = None
                    self._generation = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 — the poll loop reports and retries connection trouble
                self._log.debug("heartbeat failed: %s", exc)

    async def _flush_loop(self) -> None:
        assert self._flush_event is not None
        while not self._stopping:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._flush_event.wait(), timeout=ACK_FLUSH_INTERVAL)
            self._flush_event.clear()
            await self._flush_once()

    async def _flush_once(self) -> None:
        """Send the queued settlements. One flush at a time: a graceful stop's last flush waits for a
        periodic one in flight (whose retryable failures are queued again), so that everything handled
        is confirmed before the member leaves."""
        assert self._flush_lock is not None
        async with self._flush_lock:
            await self._send_settlements()

    async def _send_settlements(self) -> None:
        acks, nacks, extends = self._settler.take()
        if not (acks or nacks or extends):
            return
        retry_acks: list[str] = []
        retry_nacks: list[Nack] = []
        retry_extends: list[tuple[str, float]] = []
        member = {"memberId": self._member_id, "generationId": self._generation}
        try:
            for start in range(0, len(acks), 1000):
                try:
                    answer = await self._call("POST", "/ack", {**member, "ids": acks[start : start + 1000]})
                    await self._report_failed(answer.json(), "ack")
                except Exception as exc:  # noqa: BLE001
                    if _retryable(exc) and not self._stopping:
                        retry_acks.extend(acks[start : start + 1000])
                    else:
                        await self._emit_error(exc)
            for message_id, reason, delay, dead_letter in nacks:
                body: dict[str, Any] = {**member, "id": message_id}
                if reason is not None:
                    body["reason"] = reason
                if delay is not None:
                    body["delay"] = delay
                if dead_letter:
                    body["deadLetter"] = True
                try:
                    answer = await self._call("POST", "/nack", body)
                    await self._report_failed(answer.json(), "nack")
                except Exception as exc:  # noqa: BLE001
                    if _retryable(exc) and not self._stopping:
                        retry_nacks.append((message_id, reason, delay, dead_letter))
                    else:
                        await self._emit_error(exc)
            for message_id, seconds in extends:
                try:
                    body = {**member, "ids": [message_id], "seconds": seconds}
                    answer = await self._call("POST", "/extend", body)
                    await self._report_failed(answer.json(), "extend")
                except Exception as exc:  # noqa: BLE001
                    if _retryable(exc) and not self._stopping:
                        retry_extends.append((message_id, seconds))
                    else:
                        await self._emit_error(exc)
        finally:
            for message_id in retry_acks:
                self._settler.ack(message_id)
            for item in retry_nacks:
                self._settler.nack(*item)
            for message_id, seconds in retry_extends:
                self._settler.extend(message_id, seconds)

    async def _leave(self) -> None:
        member, self._member_id, self._generation = self._member_id, None, 0
        if member is None:
            return
        try:
            await self._call("DELETE", f"/members/{member}")
        except Exception as exc:  # noqa: BLE001 — the session timeout removes it anyway
            self._log.debug("leaving the group failed: %s", exc)

    def stop(self) -> None:
        """Stop gracefully: no new polls, running handlers finish, pending acks are sent, the member leaves
        the group. ``start()`` returns once that is done. Safe from any thread and from a handler: once it
        is called no new handler call starts, and messages received but not handled are not acked (they
        are released to the group when this member leaves)."""
        self._stopping = True  # at once, whatever thread: the next handler call checks it
        loop = self._loop
        if loop is None or not self._running:
            self._stopping = True
            return

        def request_stop() -> None:
            self._stopping = True
            if self._stop_event is not None:
                self._stop_event.set()
            if self._poll_task is not None:
                self._poll_task.cancel()

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            request_stop()
        else:
            loop.call_soon_threadsafe(request_stop)

    def __aiter__(self) -> AsyncIterator[ConsumedMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumedMessage]:
        queue: asyncio.Queue[ConsumedMessage] = asyncio.Queue(maxsize=1)

        async def hand_over(message: ConsumedMessage) -> None:
            await queue.put(message)

        self.on("message", hand_over)
        runner = asyncio.ensure_future(self.start())
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, runner}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                runner.result()  # raise what stopped it
                return
        finally:
            self._handlers["message"].remove(hand_over)
            self.stop()
            while not queue.empty():
                queue.get_nowait()
            await asyncio.gather(runner, return_exceptions=True)
