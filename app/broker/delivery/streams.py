"""A streaming member: a pull member whose polls the server runs for it (Server-Sent Events).

The member joins the group like a pull member (``membership.join``, not a push member: its leases are
rows, so the pull calls ``ack``, ``nack`` and ``extend`` settle them on any API node, with the member id
and generation the stream announced). The stream's own loop is a long poll that never ends:

- **flow**: at most ``max_in_flight`` messages are held unacked (leases of the member whose deadline still
  runs, counted with one indexed query per pass); a full window beats (``membership.heartbeat``) and
  waits for room;
- **waiting**: with room and nothing to deliver it waits on the log's wake-ups (``leases.wait_for_data``),
  not polling; an ack or nack of the member on this process ends that wait at once (``stream_wakeups``), one on
  another process is seen at the next pass, at most ``PASS_EVERY`` later;
- **liveness**: every pass counts as the member's heartbeat, and passes come at least every
  ``PASS_EVERY`` (below the 2 s minimum ``sessionTimeout``), so an open stream keeps its membership and
  sees a rebalance within that time;
- **rebalance**: a stale generation (or an eviction, after a stream stalled past its session) makes the
  member join again under the same id and say so with a ``rebalance`` event (new generation and
  assignments): acks after it carry the new generation;
- **leave**: ``leave`` when the stream ends (client gone, key revoked, draining): its partitions and
  unacked messages go to the other members at once.

Gates of the pull path's poll (delays, pause, group flow, filters) apply here unchanged: this is that poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from app.broker import topics
from app.broker.delivery import leases, membership, stream_wakeups
from app.broker.delivery.membership import MemberRef
from app.broker.errors import MemberNotFound, StaleGeneration, TopicNotFound
from app.broker.topics import TopicRef
from app.kit.clock import now_ms
from app.stores.log.protocol import LogEngine, UnknownLog
from app.stores.metadata.protocol import MetadataStore

PASS_EVERY = 1.0  # seconds between passes at most: heartbeat, rebalance check, acks made on other nodes
BATCH_MAX = 500  # messages leased per pass, at most


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One thing to tell the client: ``welcome``, ``rebalance``, ``message`` (with the message id and its
    rendered JSON, exactly as a poll answers it) or ``keepalive`` (no data)."""

    kind: str
    data: bytes = b""
    id: str | None = None


Emit = Callable[[list[StreamEvent]], Awaitable[None]]


class StreamMember:
    """One event stream's membership and delivery loop."""

    def __init__(
        self,
        metadata: MetadataStore,
        log: LogEngine,
        topic: TopicRef,
        group: str,
        *,
        start_from: str,
        max_in_flight: int,
        keepalive_seconds: float,
    ) -> None:
        self._metadata = metadata
        self._log = log
        self._topic = topic
        self._group = group
        self._start_from = start_from
        self._max_in_flight = max_in_flight
        self._keepalive = keepalive_seconds
        self.member_id = ""
        self.group_id = ""
        self.generation = 0
        self.assignments: list[int] = []
        self._nudged = asyncio.Event()
        self._stopped = False
        self._registered = False

    @property
    def ref(self) -> MemberRef:
        return MemberRef(self._topic, self._group, self.member_id, self.generation)

    def _membership_data(self) -> bytes:
        return orjson.dumps(
            {"memberId": self.member_id, "generationId": self.generation, "assignments": self.assignments}
        )

    async def join(self) -> StreamEvent:
        """Join the group (created if needed); answers the ``welcome`` event."""
        joined = await membership.join(
            self._metadata, self._log, self._topic, self._group, start_from=self._start_from
        )
        self.member_id, self.generation, self.assignments = (
            joined.member_id,
            joined.generation,
            joined.assignments,
        )
        self.group_id = joined.group_id
        stream_wakeups.register(self.member_id, self.nudge)
        stream_wakeups.register_end(self.member_id, self.stop)
        self._registered = True
        return StreamEvent("welcome", self._membership_data())

    async def leave(self) -> None:
        """Leave the group at once (its partitions and unacked messages go to the other members)."""
        self._unregister()
        if self.member_id:
            with contextlib.suppress(MemberNotFound, TopicNotFound):
                await membership.leave(self._metadata, self._topic, self._group, self.member_id)

    def _unregister(self) -> None:
        if self._registered:
            self._registered = False
            stream_wakeups.unregister(self.member_id, self.nudge)
            stream_wakeups.unregister_end(self.member_id, self.stop)

    def nudge(self) -> None:
        """Look again now (acks freed room, a nack made a message due, or the stream is ending)."""
        self._nudged.set()

    def stop(self) -> None:
        """End ``deliver`` at its next step; nothing more is leased."""
        self._stopped = True
        self._nudged.set()

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def deliver(self, emit: Emit) -> None:
        """Lease and emit messages until ``stop``; keepalives when idle, ``rebalance`` when it happens.
        Raises ``TopicNotFound`` when the topic is deleted under the stream."""
        try:
            await self._deliver(emit)
        except UnknownLog:
            raise TopicNotFound(self._topic.name) from None
        except (TopicNotFound, asyncio.CancelledError):
            raise
        except Exception:
            # A topic deleted under a live stream fails wherever the loop was (its log, its group's rows):
            # that is the topic's end, told to the client as such, not an internal error (as push.py does).
            if not self._stopped and not await topics.exists(self._metadata, self._topic.id):
                raise TopicNotFound(self._topic.name) from None
            raise

    async def _deliver(self, emit: Emit) -> None:
        last_sent = time.monotonic()
        while not self._stopped:
            self._nudged.clear()
            try:
                polled = await self._pass()
            except StaleGeneration:
                if self._stopped:
                    return
                await self._rejoin(emit)
                last_sent = time.monotonic()
                continue
            except MemberNotFound:
                if not await topics.exists(self._metadata, self._topic.id):
                    raise TopicNotFound(self._topic.name) from None
                if self._stopped:
                    return  # it left by a call (``stream_wakeups.left``): not an eviction
                await self._rejoin(emit)  # evicted (a stream stalled past its session): back in
                last_sent = time.monotonic()
                continue
            if self._stopped:
                return
            if polled is not None and polled.messages:
                await emit(
                    [
                        StreamEvent("message", message, message_id)
                        for message_id, message in zip(polled.ids, polled.messages, strict=True)
                    ]
                )
                last_sent = time.monotonic()
                continue  # more may be there: fill the window before waiting
            idle = time.monotonic() - last_sent
            if idle >= self._keepalive:
                await emit([StreamEvent("keepalive")])
                last_sent, idle = time.monotonic(), 0.0
            timeout = min(PASS_EVERY, self._keepalive - idle)
            if polled is not None and polled.next_deadline_ms is not None:  # a retry falls due sooner
                timeout = min(timeout, max(0.0, (polled.next_deadline_ms - now_ms()) / 1000) + 0.005)
            if polled is None:  # the window is full: only acks (or time) make room
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._nudged.wait()
            else:
                await leases.wait_for_data(self._log, self._topic, polled.positions, timeout, self._nudged)

    async def _pass(self) -> leases.PollResult | None:
        """One poll of what fits in the window (``None`` when it is full: then only a heartbeat)."""
        async with self._metadata.unit(readonly=True) as uow:
            held = await uow.leases.held_count(self.group_id, self.member_id, now_ms())
        room = self._max_in_flight - held
        if room <= 0:
            beat = await membership.heartbeat(self._metadata, self.ref)
            if beat.should_rejoin:
                raise StaleGeneration("rebalanced")
            return None
        return await leases.poll_once(
            self._metadata,
            self._log,
            self.ref,
            min(room, BATCH_MAX),
            round(PASS_EVERY * 1000),
        )

    async def _rejoin(self, emit: Emit) -> None:
        """Join again under the same id; tell the client the new generation and assignments."""
        joined = await membership.join(
            self._metadata,
            self._log,
            self._topic,
            self._group,
            member_id=self.member_id,
            start_from=self._start_from,
        )
        self.generation, self.assignments = joined.generation, joined.assignments
        self.group_id = joined.group_id
        await emit([StreamEvent("rebalance", self._membership_data())])
