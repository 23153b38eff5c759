"""Push delivery: one WebSocket connection as one group member, fed by a server-side delivery loop.

This module owns the member's joining and rebalancing, its delivery loop and the waits between passes.
The rest of a push member lives beside it, composed into ``PushMember`` (each part gets the member's
``Holdings`` and the few calls back it needs, never the member itself):

- ``holdings.py`` — what the member holds: its partitions with their in-memory leases, the ids it holds
  and its write lock, one object all the parts share; their hand-over (``reconcile``) and timeouts;
- ``beat.py`` — the beat, in a task of its own: heartbeats, rebalances seen, lease rows due, the group
  as of its last poll (ack timeout, paused), partitions paused for a neighbour's join;
- ``acks.py`` — ack settlement: the client's ``ack`` / ``nack`` / ``extend`` frames (in memory, lazy,
  durable checkpoint, lease-row fallback);
- ``push_flow.py`` — flow control: the claim of the group's ``maxInFlight``, its rate and filter;
- ``checkpoints.py`` — the in-memory leases of a held partition and the checkpoint written of them;
- ``roster.py`` — the push members of this process per group (built in the app's lifespan): neighbours
  told of a join or a leave, and the in-memory leases ``/metrics`` counts;
- ``frames.py`` — the wire frames; ``wakeup.py`` — the loops' wake-up call.

A push member is an ordinary member of the group (``membership``), joined as ``push``: it reads new
records of the partitions it owns itself and keeps their leases in memory (``checkpoints``), so a
first delivery and its ack cost no metadata write per message:

- **delivery** — each pass sends up to ``maxInFlight − in-flight`` new records (at most half the
  window, and 500, per frame), read from the log at the member's positions (``reader.py``, the pull
  path's reader: budget, order, filter and delays are its), as one frame (``message`` for one,
  ``messages`` for several). With nothing
  to send it waits, without polling, on ``LogEngine.watch`` at its positions, on a local wake-up,
  or on the next deadline.
- **beat** — ``beat.py``, beside the delivery loop in a task of its own (so its metadata round trips
  never hold up a delivery): every ``BEAT_EVERY`` seconds, and whenever a lease row may be due, it runs
  ``leases.poll_once(fresh=False)``: the member's heartbeat (and how a rebalance made anywhere is
  noticed), and the redeliveries of lease rows (retries, replays, timeouts, an earlier owner's leases),
  which then follow the pull path's rules; then it reconciles.
- **acks** — settled by ``acks.py`` (an ``acked`` answers once its checkpoint is written on
  ``exactly-once`` topics, at once on ``at-least-once`` ones). A timeout turns the lease into a row
  here, in the delivery pass (the DLQ's retry schedule works on rows).
- **flow control** — the connection counts what it holds: ids delivered and neither acked, nacked,
  nor past their ack deadline. At ``maxInFlight`` (its own, or its claim of the group's: ``push_flow.py``)
  the loop only heartbeats until room is made; the group's rate and filter apply to what it reads.
- **rebalance** — a stale generation (or an eviction) seen by any call makes the member rejoin under its
  own id, push ``rebalance {generationId, assignments}`` and *reconcile*: partitions it lost are
  released (``checkpoints.release``: their in-flight leases become rows it still holds, so its acks
  keep working and no one else gets them meanwhile), partitions it gained are claimed once their
  previous owner has released them.
- **leaving** — the edge calls ``leave`` when the connection closes: its partitions are released and
  its unacked leases go to the other members at once. A connection that hangs silently is closed by
  the server's WebSocket pings, then leaves; if the whole process dies, the member expires after
  ``sessionTimeout`` and the new owners start from its last checkpoint (on ``exactly-once`` topics
  every acked message is in it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection

from app.broker import message_ids, topics
from app.broker import tracing as spans
from app.broker.delivery import delays, leases, membership
from app.broker.delivery.acks import AckSettlement, RenderError, Send
from app.broker.delivery.beat import NEVER, Beat
from app.broker.delivery.checkpoints import HeldPartition
from app.broker.delivery.frames import messages_frame, server_frame
from app.broker.delivery.holdings import Holdings
from app.broker.delivery.membership import MemberRef
from app.broker.delivery.outages import through_outages
from app.broker.delivery.push_flow import BEAT_EVERY, PushFlow
from app.broker.delivery.reader import BudgetedReader
from app.broker.delivery.roster import PushRoster
from app.broker.delivery.wakeup import Wakeup
from app.broker.errors import CODED_ERRORS, MemberNotFound, StaleGeneration, TopicNotFound
from app.broker.messages import render_message
from app.broker.topics import TopicRef
from app.kit import tracing
from app.kit.clock import isoformat_ms, now_ms
from app.stores.errors import StoreUnavailable
from app.stores.log.protocol import LogEngine, Record, UnknownLog
from app.stores.metadata.protocol import MetadataStore

logger = logging.getLogger("queuecore.push")

FRAME_MAX = 500  # messages per frame, at most (asyncapi.yaml says so)


class PushMember:
    """One connection's membership and delivery loops. What it holds is its ``Holdings``; its client
    frames are settled by its ``AckSettlement`` and its flow control is its ``PushFlow``, both composed
    on those holdings."""

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
        roster: PushRoster,
    ) -> None:
        self._metadata = metadata
        self._log = log
        self._topic = topic
        self._group = group
        self._start_from = start_from
        # At most half the window per frame: the client works through one frame while the next is on
        # its way (one frame per window left both sides idle in turn: ~+10% msgs/s, bench/README.md).
        self._frame_max = max(1, min(FRAME_MAX, (max_in_flight + 1) // 2))
        self._send = send
        self._roster = roster
        self.generation = 0
        self.assignments: list[int] = []
        self.session_timeout_ms = 0
        # Its partitions, in-memory leases and write lock, shared with the parts composed below.
        self._holdings = Holdings(topic.id)
        self._next_expiry = NEVER  # no deadline of ``in_flight`` is earlier (extends only move them later)
        self._delivery_wakeup = Wakeup()
        self._passing = 0  # in-flight room a delivery pass in progress may fill (its budget)
        self._rejoining = asyncio.Lock()
        # Held by a delivery pass; a rejoin waits for it (taken after ``_rejoining``), so nothing a pass
        # read under the old generation is sent after the ``rebalance`` frame of the new one.
        self._delivering = asyncio.Lock()
        self._stopped = False
        self._group_key = (topic.id, group)
        self._flow = PushFlow(
            self._holdings, metadata, max_in_flight, reconcile=self._reconcile, wake=self._nudge
        )
        self._settlement = AckSettlement(
            self._holdings,
            metadata,
            log,
            topic,
            group,
            durable=topic.delivery != "at-least-once",
            max_in_flight=max_in_flight,
            send=send,
            render_error=render_error,
            ref=lambda: self.ref,
            reconcile=self._reconcile,
            rejoin=self._rejoin,
            wake=self._nudge,
        )
        self._beat = Beat(
            self._holdings,
            metadata,
            log,
            self._flow,
            ref=lambda: self.ref,
            fenced=self._fenced,
            reconcile=lambda: self._reconcile(confirmed=True),
            passing=lambda: self._passing,
            leased=self._send_leased,
            counts_outcomes=self._settlement.count_outcomes,
            wake=self._nudge,
        )

    @property
    def member_id(self) -> str:
        return self._holdings.member_id

    @property
    def group_id(self) -> str:
        return self._holdings.group_id

    @property
    def in_flight(self) -> int:
        return len(self._holdings.in_flight)

    @property
    def held_in_memory(self) -> int:
        return len(self._holdings.held)

    @property
    def ref(self) -> MemberRef:
        """The member as the group knows it now (a new value after each rejoin)."""
        return MemberRef(self._topic, self._group, self.member_id, self.generation)

    # membership -----------------------------------------------------------------------------------

    async def join(self) -> bytes:
        """Join the group (created if needed); answers the ``welcome`` frame."""
        started = now_ms()
        joined = await membership.join(
            self._metadata, self._log, self._topic, self._group, start_from=self._start_from, push=True
        )
        self._holdings.member_id, self.generation, self.assignments = (
            joined.member_id,
            joined.generation,
            joined.assignments,
        )
        self._holdings.group_id = joined.group_id
        self._beat.ack_timeout_ms = joined.ack_timeout_ms  # delivery starts before the first beat's poll
        self._beat.group_paused = joined.paused  # so a member joining a paused group sends nothing
        self.session_timeout_ms = joined.session_timeout_ms
        self._beat.alive(started, self.session_timeout_ms)
        await self._reconcile(confirmed=True)
        self._beat.rows_first()
        # A rebalance: they look at once rather than at their next beat, and send nothing more from
        # what this member was given (only a join takes partitions away: the assignment is sticky).
        self._wake_neighbours(taken=self.assignments)
        self._roster.add(self._group_key, self)
        return server_frame(
            "welcome", memberId=self.member_id, generationId=self.generation, assignments=self.assignments
        )

    async def leave(self) -> None:
        """Leave at once: partitions are released (acks answered lazily are written first), unacked
        leases go to the other members, and the ones connected to this process look at once."""
        self._roster.discard(self._group_key, self)
        if self.member_id:
            await self._leave_through_outages()
        self._wake_neighbours()

    async def _leave_through_outages(self) -> None:
        """Release and leave, waiting out a store outage (a database restart) for up to the group's
        ``sessionTimeout``: the in-memory leases must become rows, or the next owner would send their
        messages again, as first attempts, while their ack deadlines hold. Past that the member expires
        and the next owner starts from its checkpoint, as after a crash."""

        async def leave() -> None:
            try:
                await self._reconcile(leaving=True)
            except StoreUnavailable:
                raise
            except CODED_ERRORS:
                pass  # the topic is gone, say: nothing to hand over, but the member still leaves
            with contextlib.suppress(MemberNotFound):
                await membership.leave(self._metadata, self._topic, self._group, self.member_id)

        until = time.monotonic() + max(self.session_timeout_ms, 1000) / 1000
        try:
            await through_outages(leave, until=until)
        except StoreUnavailable:
            logger.warning(
                "a push member could not leave its group (the metadata store is unavailable); "
                "it expires after the group's sessionTimeout",
                extra={"memberId": self.member_id},
            )
        except CODED_ERRORS:
            pass  # the group is gone with its topic: nothing to leave

    def _wake_neighbours(self, *, taken: Collection[int] = ()) -> None:
        """The group changed here (a join, a leave, a release): members on this server beat at once;
        those holding a partition in ``taken`` send nothing more from it until that beat is done."""
        for other in self._roster.neighbours(self._group_key, self):
            other.look_again(taken)

    def look_again(self, taken: Collection[int]) -> None:
        """A neighbour changed the group: beat now; send nothing more from the partitions of ``taken``
        this member holds until a beat begun after this is done."""
        self._beat.pause(taken)

    async def _rejoin(self, seen_generation: int, *, evicted: bool = False) -> None:
        """After a stale generation or an eviction: join again under the same id, push ``rebalance``,
        reconcile what the member holds with what it owns now."""
        async with self._rejoining, self._delivering:
            if self.generation != seen_generation:
                return  # the other task rejoined meanwhile
            if evicted:  # others may own its partitions already: what it held in memory is void
                for partition in list(self._holdings.parts):
                    self._holdings.forget(partition)
            started = now_ms()
            joined = await membership.join(
                self._metadata,
                self._log,
                self._topic,
                self._group,
                member_id=self.member_id,
                start_from=self._start_from,
                push=True,
            )
            self.generation, self.assignments = joined.generation, joined.assignments
            # The group's sessionTimeout as of this join: the one its heartbeats now keep.
            self._beat.alive(started, joined.session_timeout_ms)
            await self._reconcile(confirmed=True)
            self._beat.rows_first()
            # The delivery loop sends nothing while this runs (``_pass``): the member's client learns
            # of the new generation before any message of it.
            await self._send(
                server_frame("rebalance", generationId=self.generation, assignments=self.assignments)
            )
        self._nudge()

    async def _reconcile(self, *, leaving: bool = False, confirmed: bool = False) -> set[int]:
        """Reconcile what the member holds with what it owns (``Holdings.reconcile``: ``confirmed``,
        ``leaving``); answers the partitions it released, which its neighbours then look at."""
        released = await self._holdings.reconcile(
            self._metadata,
            self._log,
            self._topic,
            leaving=leaving,
            confirmed=confirmed,
            beat_now=self._beat.now,
            rows_due=self._beat.rows_may_be_due,
        )
        if released and not leaving:
            self._wake_neighbours()
        return released

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """End the delivery loop at its next wait (it is never cancelled inside a unit of work: a
        cancelled metadata transaction could hold SQLite's write lock until collected)."""
        self._stopped = True
        self._settlement.stop()
        self._nudge()

    async def handle(self, text: str | bytes) -> None:
        """One client frame (``ack``, ``nack``, ``extend``), settled by ``acks.AckSettlement.handle``."""
        await self._settlement.handle(text)

    # delivery -------------------------------------------------------------------------------------

    async def deliver(self) -> None:
        """The delivery loop; runs until ``stop()``. The beat (``beat.Beat.run``) runs beside it."""
        beats = asyncio.create_task(self._beat.run(self.session_timeout_ms), name=f"beat-{self.member_id}")
        try:
            while not self._stopped:
                if self._beat.error is not None:
                    raise self._beat.error
                self._delivery_wakeup.clear()  # before the pass: a wake-up during it is not lost
                sent = await self._fenced(self._pass)
                if sent is None:
                    continue  # rejoined
                if self._stopped:
                    return
                if not sent:
                    await self._wait()
        except UnknownLog:
            raise TopicNotFound(self._topic.name) from None
        except Exception:
            # A topic deleted under a live member fails wherever the loop was (its log, its group's
            # rows): that is the topic's end, told to the client as such, not an internal error.
            if not self._stopped and not await self._topic_exists():
                raise TopicNotFound(self._topic.name) from None
            raise
        finally:
            self._beat.stop()
            await asyncio.gather(beats, return_exceptions=True)

    async def _topic_exists(self) -> bool:
        try:
            return await topics.exists(self._metadata, self._topic.id)
        except Exception:  # noqa: BLE001 - the store is down: not known to be gone
            return True

    async def _fenced(self, step: Callable[[], Awaitable[bool]]) -> bool | None:
        """``step()``; None if it found the member stale or evicted, and it rejoined instead."""
        generation = self.generation
        try:
            return await step()
        except StaleGeneration:
            await self._rejoin(generation)
        except MemberNotFound:
            await self._rejoin(generation, evicted=True)
        return None

    async def _pass(self) -> bool:
        """One delivery pass: timeouts, then new records. True if it sent. A rejoin waits for a pass in
        progress (``_delivering``): otherwise records read before it, from partitions it has just
        forgotten or handed over, would reach the client after its ``rebalance`` frame, and the member
        would then send them again from its checkpoint as new first deliveries of the same session."""
        async with self._delivering:
            if self._rejoining.locked():
                return False  # a rejoin waits: nothing before its ``rebalance`` frame (it nudges when done)
            return await self._pass_held()

    async def _pass_held(self) -> bool:
        if not await self._confirm_session():
            return False
        now = now_ms()
        if now >= self._next_expiry:
            await self._expire(now)
        budget = min(self._flow.cap - len(self._holdings.in_flight) - self._beat.reserved, self._frame_max)
        if now < self._flow.throttled_until or self._flow.config is None:
            return False
        if self._beat.group_paused:
            return False  # nothing new until a beat sees the group resumed
        ack_timeout_ms = self._beat.ack_timeout_ms
        if budget > 0 and self._holdings.parts and ack_timeout_ms is not None:
            # The beat, running beside this pass, counts its budget as held: neither its lease-row
            # poll nor its claim of the group's maxInFlight may give that room away meanwhile.
            self._passing = budget
            try:
                return await self._deliver_new(budget, now + ack_timeout_ms)
            finally:
                self._passing = 0
        return False

    async def _send_leased(self, polled: leases.PollResult) -> None:
        """Send the lease rows a beat's poll took, counted as held until their deadline (unless the
        member may have expired meanwhile: then they wait for their deadline, as unsent)."""
        for message_id in polled.ids:
            self._holdings.in_flight[message_id] = polled.deadline_ms
        self._next_expiry = min(self._next_expiry, polled.deadline_ms)
        if await self._confirm_session():
            await self._send_messages(polled.messages)

    async def _confirm_session(self) -> bool:
        """Whether the member may send now: its session surely holds (``beat.Beat.lapsed``), or a
        heartbeat made now confirms it. Raises ``StaleGeneration`` / ``MemberNotFound`` when the group moved
        on or expired the member (the caller's ``_fenced`` rejoins; what was read is not sent); False when
        the store cannot say (an outage: the beat rides it out or ends the member)."""
        if not self._beat.lapsed(now_ms()):
            return True
        started = now_ms()
        try:
            answer = await membership.heartbeat(self._metadata, self.ref)
        except StoreUnavailable:
            self._beat.now()
            return False
        except (StaleGeneration, MemberNotFound) as error:
            logger.info(
                "a push member unheard of for its session sends nothing of what it read: %s",
                error.code,
                extra={"memberId": self.member_id},
            )
            raise
        if answer.should_rejoin:
            raise StaleGeneration("rebalanced")
        self._beat.alive(started)
        return True

    async def _deliver_new(self, budget: int, deadline: int) -> bool:
        """Read new records at the member's positions (``reader.BudgetedReader``) and send them, their
        leases kept in memory."""
        extra = {"attempt": 1, "ackDeadline": isoformat_ms(deadline)}
        topic, holdings, paused = self._topic, self._holdings, self._beat.paused
        rendered: list[bytes] = []
        gate = delays.TimeGate(now_ms())  # delays and TTL: records not due yet, or no more

        def readable(part: HeldPartition) -> bool:
            # Not being handed over (the release has taken what was sent; what it did not take is the
            # new owner's), not waiting for rows given back to it (``rows_first``), not paused for a
            # neighbour's join, not reconciled away while reading.
            return (
                not part.releasing
                and not part.rows_first
                and part.partition not in paused
                and holdings.parts.get(part.partition) is part
            )

        async def hold(part: HeldPartition, records: list[Record], position: int) -> int:
            """Send what the group's rate allows, its leases kept in memory, once the gate's rows are written."""
            granted = await self._flow.take(len(records), now_ms()) if records else 0
            if granted < len(records):  # the rest waits where it is
                position = records[granted].offset
                del records[granted:]
                gate.forget_from(part.partition, position)
            if gate.pending and not await self._gate_rows(part, gate):
                return 0  # fenced: the partition changed hands; the reconcile that follows sorts it out
            p = part.partition
            for record in records:
                message_id = message_ids.encode(topic.id, p, record.offset, head=part.head)
                rendered.append(
                    render_message(topic.name, topic, topic.id, p, record, extra, message_id=message_id)
                )
                part.in_flight[record.offset] = deadline
                holdings.held[message_id] = (p, record.offset)
                holdings.in_flight[message_id] = deadline
            if part.skip:  # leased already (acked out of order, or a due row): passed now
                part.skip.difference_update([o for o in part.skip if o < position])
            part.position = position
            return len(records)

        assert self._flow.config is not None  # ``_pass`` sends nothing before the first beat
        reader = BudgetedReader(self._log, topic.id, gate, self._flow.config.predicate, hold, readable)
        await reader.read(list(holdings.parts.values()), budget)
        if reader.filtered:
            self._flow.passed_over(reader.filtered)
        self._next_expiry = min(self._next_expiry, deadline)
        # The reads may have taken long (a log node paused): what they found goes out only while the
        # member surely owns its partitions; otherwise their in-memory leases time out unsent.
        if rendered and await self._confirm_session():
            await self._send_messages(rendered)
            return True
        return False

    async def _gate_rows(self, part: HeldPartition, gate: delays.TimeGate) -> bool:
        """Write what ``gate`` held back or found expired in ``part`` as lease rows, before the member's
        position moves past them; the beat then wakes when the first held one falls due."""
        next_due = gate.next_due
        written = await self._holdings.write_gated(
            self._metadata, self._log, self._topic, part, gate, fenced=self._beat.now
        )
        if not written:
            return False
        if next_due is not None:
            self._beat.held_until(next_due)
        return True

    async def _send_messages(self, rendered: list[bytes]) -> None:
        """One ``message`` / ``messages`` frame; a ``receive`` span around it when tracing."""
        if not tracing.enabled:
            await self._send(messages_frame(rendered))
            return
        with spans.receiving(self._topic.name, self._group) as span:
            spans.delivered(span, rendered)
            await self._send(messages_frame(rendered))

    async def _expire(self, now: int) -> None:
        """Deliveries past their deadline stop counting as held; in-memory leases among them become
        lease rows (``Holdings.expire``), which the beat then scans for."""
        await self._holdings.expire(
            self._metadata, now, fenced=self._reconcile, rows_due=self._beat.rows_may_be_due
        )
        self._next_expiry = min(self._holdings.in_flight.values(), default=NEVER)

    async def _wait(self) -> None:
        """Until a wake-up, a commit at one of the member's positions (while it has room), or the
        next deadline. The log calls ``_nudge`` itself on a commit: the loop resumes in the pass that
        commits, ahead of the publish answers, not a few passes later."""
        if self._delivery_wakeup.is_set:
            return
        cancels: list[Callable[[], None]] = []
        now = now_ms()
        timeout = min(BEAT_EVERY, max(0.0, (self._next_expiry - now) / 1000) + 0.005)
        throttled = self._flow.throttled_until > now
        if throttled:  # the group's rate: the next token, not a commit, is what to wait for
            timeout = min(timeout, (self._flow.throttled_until - now) / 1000 + 0.001)
        # Watch only where a pass could send now: with no room (the beat's reservation counts), or
        # from a partition paused, being released or waiting for its given-back rows, records already
        # there would wake it again and again (the beat wakes it when those end).
        room = self._flow.cap - len(self._holdings.in_flight) - self._beat.reserved
        if room > 0 and not throttled and not self._beat.group_paused:
            topic_id = self._topic.id
            paused = self._beat.paused
            for part in self._holdings.parts.values():
                if not (part.releasing or part.rows_first) and part.partition not in paused:
                    cancels.append(self._log.watch(topic_id, part.partition, part.position, self._nudge))
        try:
            if self._delivery_wakeup.is_set:
                # Records came between the pass's read and now (a watch fired as it was set up): go
                # round again, but through the loop, so that no pass follows another without a pause.
                await asyncio.sleep(0)
                return
            await self._delivery_wakeup.wait(timeout)
        finally:
            for cancel in cancels:
                cancel()

    def _nudge(self) -> None:
        """Wake the delivery loop (now, or before its next wait if it is in a pass)."""
        self._delivery_wakeup.set()
