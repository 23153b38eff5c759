"""Push delivery: one WebSocket connection as one group member, fed by a server-side poll loop.

A push member is an ordinary member of the group (``membership``) whose leases live in the metadata
store (``leases``), exactly as a pull member's do; only the loop runs in the server:

- **delivery** — each pass runs one ``leases.poll_once`` for up to ``maxInFlight − in-flight`` messages
  (due redeliveries first, then new records, offset order per partition) and sends what it leased as one
  frame (``message`` for one, ``messages`` for several). With nothing to send it waits, without polling,
  on ``LogEngine.wait_for`` at the member's positions, on a local wake-up (an ack, nack or extend freed
  room), on the next lease falling due, or at most ``HEARTBEAT_SECONDS`` — a pass is the member's
  heartbeat, and is how a rebalance made by another process is noticed.
- **flow control** — the connection counts what it holds: ids delivered and neither acked, nacked,
  nor past their ack deadline (then the lease is due and will be redelivered, possibly to this member).
  At ``maxInFlight`` the loop only heartbeats until room is made.
- **rebalance** — a stale generation (or an eviction) seen by any call makes the member rejoin under its
  own id and push ``rebalance {generationId, assignments}``; delivery follows the new assignment because
  a poll only leases in partitions the member owns.
- **leaving** — the edge calls ``leave`` when the connection closes: the partitions and unacked leases go
  to the other members at once. A connection that hangs silently is closed by the server's WebSocket
  pings (``ws_ping_interval`` + ``ws_ping_timeout``, below the minimum ``sessionTimeout``), then leaves;
  if the whole process dies, the member expires after ``sessionTimeout`` like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from app.broker import durations
from app.broker.delivery import leases, membership
from app.broker.errors import BrokerError, InvalidRequest, MemberNotFound, StaleGeneration
from app.broker.publishing import TopicRef
from app.kit.clock import now_ms
from app.stores.log.protocol import LogEngine
from app.stores.metadata.database import MetadataStore

MAX_IN_FLIGHT = 10_000
_SETTLE_ATTEMPTS = 50  # rejoins tolerated while a group churns (each waits for the rebalance in flight)
HEARTBEAT_SECONDS = 1.0  # below the 2 s minimum sessionTimeout, one small metadata write a second
BEAT_EVERY = 0.5  # a delivery pass also renews the membership, at most this often
LAZY_ACK_SECONDS = 0.05  # at-least-once: acks answered at once are written this much later, together

Send = Callable[[bytes], Awaitable[None]]
RenderError = Callable[[BrokerError], bytes]


def validate_max_in_flight(value: str | None) -> int:
    """``maxInFlight`` from the query string: 1 to 10,000, default 100."""
    if value is None or value == "":
        return 100
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_IN_FLIGHT:
        raise InvalidRequest.field("maxInFlight", f"must be an integer between 1 and {MAX_IN_FLIGHT}")
    return number


def _frame(kind: str, **fields: Any) -> bytes:
    return orjson.dumps({"type": kind, **fields})


def messages_frame(messages: list[bytes]) -> bytes:
    """``message`` with the fields at the top level for one, ``messages`` holding a list for several."""
    if len(messages) == 1:
        return b'{"type":"message",' + messages[0][1:]
    return b'{"type":"messages","messages":[' + b",".join(messages) + b"]}"


# The push members connected to this process, per (topic id, group): told when one of them leaves.
_neighbours: dict[tuple[str, str], set[PushMember]] = {}


class PushMember:
    """One connection's membership, delivery loop and client-frame handling."""

    def __init__(
        self,
        metadata: MetadataStore,
        log: LogEngine,
        topic: TopicRef,
        group: str,
        *,
        start_from: str,
        max_in_flight: int,
        send: Send,
        render_error: RenderError,
    ) -> None:
        self._metadata = metadata
        self._log = log
        self._topic = topic
        self._group = group
        self._start_from = start_from
        self._max_in_flight = max_in_flight
        self._send = send
        self._render_error = render_error
        self.member_id = ""
        self.generation = 0
        self.assignments: list[int] = []
        self._in_flight: dict[str, int] = {}  # message id -> ack deadline (ms)
        self._wake = asyncio.Event()
        self._rejoining = asyncio.Lock()
        self._stopped = False
        self._last_beat = 0.0
        self._acks: list[list[Any]] = []  # ack frames read and not yet settled: their ids
        self._group_key = (topic.id, group)
        self._lazy: list[str] = []  # at-least-once acks answered and not yet written
        self._lazy_task: asyncio.Task[None] | None = None
        self.session_timeout_ms = 0
        self._acking: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def join(self) -> bytes:
        """Join the group (created if needed); answers the ``welcome`` frame."""
        joined = await membership.join(
            self._metadata, self._log, self._topic, self._group, start_from=self._start_from
        )
        self.member_id, self.generation, self.assignments = (
            joined.member_id,
            joined.generation,
            joined.assignments,
        )
        self.session_timeout_ms = durations.parse(
            joined.session_timeout, "sessionTimeout", durations.SESSION_TIMEOUT
        )
        neighbours = _neighbours.setdefault(self._group_key, set())
        for other in neighbours:  # a rebalance: they look at once rather than at their next heartbeat
            other._wake.set()
        neighbours.add(self)
        return _frame(
            "welcome", memberId=self.member_id, generationId=self.generation, assignments=self.assignments
        )

    async def leave(self) -> None:
        """Leave at once: partitions and unacked leases go to the other members, and the ones connected
        to this process look at once rather than at their next heartbeat."""
        neighbours = _neighbours.get(self._group_key, set())
        neighbours.discard(self)
        if not neighbours:
            _neighbours.pop(self._group_key, None)
        if self.member_id and self._lazy:  # acks already answered: written before the member goes
            with contextlib.suppress(BrokerError):
                await self._flush_lazy()
        if self.member_id:
            with contextlib.suppress(MemberNotFound):
                await membership.leave(self._metadata, self._topic, self._group, self.member_id)
        for other in list(neighbours):
            other._wake.set()

    async def _rejoin(self, seen_generation: int) -> None:
        """After a stale generation or an eviction: join again under the same id, push ``rebalance``."""
        async with self._rejoining:
            if self.generation != seen_generation:
                return  # the other task rejoined meanwhile
            joined = await membership.join(
                self._metadata,
                self._log,
                self._topic,
                self._group,
                member_id=self.member_id,
                start_from=self._start_from,
            )
            self.generation, self.assignments = joined.generation, joined.assignments
            await self._send(_frame("rebalance", generationId=self.generation, assignments=self.assignments))

    def _expire(self, now: int) -> None:
        expired = [i for i, deadline in self._in_flight.items() if deadline <= now]
        for message_id in expired:
            del self._in_flight[message_id]

    def stop(self) -> None:
        """End the delivery loop at its next wait (it is never cancelled inside a unit of work: a
        cancelled metadata transaction could hold SQLite's write lock until collected)."""
        self._stopped = True
        self._wake.set()

    async def deliver(self) -> None:
        """The delivery loop; runs until ``stop()``."""
        while not self._stopped:
            self._wake.clear()  # before the poll: a wake-up during it is not lost
            self._expire(now_ms())
            budget = self._max_in_flight - len(self._in_flight)
            generation = self.generation
            polled: leases.Polled | None = None
            try:
                started = time.monotonic()
                if budget > 0:
                    renew = started - self._last_beat >= BEAT_EVERY
                    polled = await leases.poll_once(
                        self._metadata,
                        self._log,
                        self._topic,
                        self._group,
                        self.member_id,
                        generation,
                        budget,
                        heartbeat=renew,
                    )
                    if renew:
                        self._last_beat = started
                else:
                    beat = await membership.heartbeat(
                        self._metadata, self._topic, self._group, self.member_id, generation
                    )
                    self._last_beat = started
                    if beat.should_rejoin:
                        await self._rejoin(generation)
                        continue
            except (StaleGeneration, MemberNotFound):
                await self._rejoin(generation)
                continue
            if self._stopped:
                return
            if polled is not None and polled.messages:
                for message_id in polled.ids:
                    self._in_flight[message_id] = polled.deadline_ms
                await self._send(messages_frame(polled.messages))
                continue
            await self._wait(polled)

    async def _wait(self, polled: leases.Polled | None) -> None:
        now = now_ms()
        timeout = HEARTBEAT_SECONDS
        if polled is not None and polled.next_deadline_ms is not None:
            timeout = min(timeout, max(0.0, (polled.next_deadline_ms - now) / 1000) + 0.005)
        if self._in_flight:
            soonest = min(self._in_flight.values())
            timeout = min(timeout, max(0.0, (soonest - now) / 1000) + 0.005)
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._wake.wait())]
        if polled is not None and polled.positions:
            waiters.append(
                asyncio.ensure_future(leases.wait_for_data(self._log, self._topic, polled.positions, timeout))
            )
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def handle(self, text: str | bytes) -> None:
        """One client frame: ``ack``, ``nack`` or ``extend``, answered by ``acked``; anything malformed
        is answered by an ``error`` frame (the connection stays open)."""
        try:
            frame = self._parse(text)
            if frame["type"] == "ack":
                # Acks are settled by one task, several frames per metadata transaction when they arrive
                # faster than a transaction commits; each frame still gets its own ``acked``.
                self._acks.append(leases.validate_ids(self._ids_of(frame)))
                if self._acking is None or self._acking.done():
                    self._acking = asyncio.ensure_future(self._settle_acks())
                return
            answer = await self._settle(frame)
        except BrokerError as error:
            await self._send(self._render_error(error))
            return
        await self._send(_frame("acked", ids=answer.ids, failed=answer.failed))

    def _answer_lazily(self, ids: list[Any]) -> bool:
        """At-least-once: a frame acking only messages this connection holds (deadline running) is
        answered at once and written within ``LAZY_ACK_SECONDS`` (a crash meanwhile may redeliver them,
        which at-least-once allows). Anything else takes the durable path."""
        if self._topic.delivery != "at-least-once":
            return False
        now = now_ms()
        if not all(isinstance(i, str) and self._in_flight.get(i, 0) > now for i in ids):
            return False
        for message_id in ids:
            del self._in_flight[message_id]
        self._lazy.extend(ids)
        if self._lazy_task is None or self._lazy_task.done():
            self._lazy_task = asyncio.ensure_future(self._write_lazy())
        self._wake.set()
        return True

    async def _write_lazy(self) -> None:
        while self._lazy and not self._stopped:
            await asyncio.sleep(LAZY_ACK_SECONDS)
            await self._flush_lazy()

    async def _flush_lazy(self) -> None:
        while self._lazy:
            ids, self._lazy = self._lazy[: leases.MAX_IDS], self._lazy[leases.MAX_IDS :]
            with contextlib.suppress(BrokerError):  # not written: redelivered later, as at-least-once allows
                await self._settle({"type": "ack", "ids": ids})

    async def _settle_acks(self) -> None:
        while self._acks:
            if self._answer_lazily(self._acks[0]):
                ids = [str(i) for i in self._acks.pop(0)]
                await self._send(_frame("acked", ids=ids, failed=[]))
                continue
            frames: list[list[Any]] = [self._acks.pop(0)]
            total = len(frames[0])
            while self._acks and total + len(self._acks[0]) <= leases.MAX_IDS:
                total += len(self._acks[0])
                frames.append(self._acks.pop(0))
            try:
                answer = await self._settle({"type": "ack", "ids": [i for f in frames for i in f]})
            except BrokerError as error:
                for _ in frames:
                    await self._send(self._render_error(error))
                continue
            done = set(answer.ids)
            codes = {f["id"]: f["code"] for f in answer.failed}
            for ids in frames:
                named = [str(i) for i in ids]
                await self._send(
                    _frame(
                        "acked",
                        ids=[i for i in named if i in done],
                        failed=[{"id": i, "code": codes[i]} for i in named if i not in done and i in codes],
                    )
                )

    @staticmethod
    def _parse(text: str | bytes) -> dict[str, Any]:
        try:
            frame = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise InvalidRequest("The frame is not valid JSON.") from None
        if not isinstance(frame, dict) or frame.get("type") not in ("ack", "nack", "extend"):
            raise InvalidRequest.field("type", "expected 'ack', 'nack' or 'extend'")
        return frame

    @staticmethod
    def _ids_of(frame: dict[str, Any]) -> Any:
        if "ids" in frame:
            return frame["ids"]
        if "id" in frame:
            return [frame["id"]]
        raise InvalidRequest.field("id", "required (or 'ids')")

    async def _settle(self, frame: dict[str, Any]) -> leases.Settled:
        kind = frame["type"]
        delay_ms: int | None = None
        if kind == "nack":
            if "id" not in frame:
                raise InvalidRequest.field("id", "required")
            if frame.get("delay") is not None:
                delay_ms = durations.parse_delay(frame["delay"])
        ids = self._ids_of(frame)
        seconds: Any = frame.get("seconds")
        for attempt in range(1, _SETTLE_ATTEMPTS + 1):  # a rebalance meanwhile: rejoin, settle again
            generation = self.generation
            try:
                if kind == "ack":
                    answer = await leases.ack(
                        self._metadata,
                        self._topic,
                        self._group,
                        self.member_id,
                        generation,
                        ids,
                        heartbeat=False,  # the delivery loop renews the membership
                    )
                elif kind == "nack":
                    answer = await leases.nack(
                        self._metadata,
                        self._log,
                        self._topic,
                        self._group,
                        self.member_id,
                        generation,
                        frame["id"],
                        delay_ms,
                        frame.get("reason") if isinstance(frame.get("reason"), str) else None,
                    )
                else:
                    answer = await leases.extend(
                        self._metadata,
                        self._topic,
                        self._group,
                        self.member_id,
                        generation,
                        ids,
                        seconds,
                    )
            except (StaleGeneration, MemberNotFound):
                if attempt == _SETTLE_ATTEMPTS:
                    raise
                await self._rejoin(generation)
                continue
            break
        if kind == "extend":
            deadline = now_ms() + round(float(seconds) * 1000)
            for message_id in answer.ids:
                if message_id in self._in_flight:
                    self._in_flight[message_id] = deadline
        else:
            # Acked, nacked, or failed (expired, unknown): none of them is held by this connection now.
            for message_id in answer.ids:
                self._in_flight.pop(message_id, None)
            for failed in answer.failed:
                self._in_flight.pop(failed["id"], None)
            self._wake.set()
        return answer
