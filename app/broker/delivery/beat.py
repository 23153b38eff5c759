"""The beat of a push member: heartbeats, rebalances and lease rows, in a task of its own beside the
delivery loop (``push.py``), so that its metadata round trips (which may queue behind another writer for
SQLite's lock) never hold up a delivery.

``Beat`` is composed into ``push.PushMember`` like ``acks.AckSettlement`` and ``push_flow.PushFlow``: it
gets the member's ``Holdings`` and ``PushFlow`` and a few calls back into the member (who it is now, its
fenced step, reconcile, hand over polled lease rows, wake the delivery loop), and keeps what the beat
alone decides:

- **the group as of the last poll** — its ack timeout (``ack_timeout_ms``: none yet, nothing is sent) and
  whether it is paused (``group_paused``); the flow config and the DLQ breaker go to ``PushFlow`` and the
  ack settlement;
- **when lease rows may be due** — retries, replays, timeouts, delayed messages held back by the
  delivery pass, an earlier owner's leases: the beat scans for them then, a slice at a time when they are
  not known to be due (so the delivery loop keeps its room), and at most once per
  ``delays.COALESCE_MS`` when they fall due one after another;
- **partitions paused for a neighbour's join** — the old owner sends nothing more from a partition it
  must hand over until a beat begun after that join is done (``pause``, ``paused``);
- **rows first** — a partition claimed at a (re)join reads nothing new until a poll finds none of the
  member's lease rows due any more (``checkpoints.HeldPartition.rows_first``);
- **how long the member is surely alive** — a heartbeat (or join) begun at ``t`` keeps the member's
  session until ``t + sessionTimeout`` at least. Past that, less a margin for the clocks of other API
  processes (``SESSION_MARGIN_MS``), another process may have expired the member and given its partitions
  to another, who may have delivered and acked what this one still holds in memory: the member sends
  nothing until a heartbeat confirms it (``lapsed``, ``PushMember._confirm_session``). A beat stuck in a
  store call, or a process paused, would otherwise send, on waking, messages acked meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection

from app.broker.delivery import delays, leases, membership
from app.broker.delivery.holdings import Holdings
from app.broker.delivery.membership import MemberRef
from app.broker.delivery.outages import through_outages
from app.broker.delivery.push_flow import BEAT_EVERY, PushFlow
from app.broker.delivery.wakeup import Wakeup
from app.broker.errors import StaleGeneration
from app.kit.clock import now_ms
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import MetadataStore

_BEAT_ROWS = 100  # lease rows a beat takes when none is known to be due
SESSION_MARGIN_MS = 2000  # at most; a quarter of the session timeout when that is shorter
NEVER = 1 << 62

Fenced = Callable[[Callable[[], Awaitable[bool]]], Awaitable[bool | None]]
Leased = Callable[[leases.PollResult], Awaitable[None]]


class Beat:
    """The beat of one ``push.PushMember``, composed into it (see the module's docstring)."""

    def __init__(
        self,
        holdings: Holdings,
        metadata: MetadataStore,
        log: LogEngine,
        flow: PushFlow,
        *,
        ref: Callable[[], MemberRef],
        fenced: Fenced,
        reconcile: Callable[[], Awaitable[set[int]]],
        passing: Callable[[], int],
        leased: Leased,
        counts_outcomes: Callable[[bool], None],
        wake: Callable[[], None],
    ) -> None:
        self._holdings = holdings
        self._metadata = metadata
        self._log = log
        self._flow = flow
        self._ref = ref
        self._fenced = fenced
        self._reconcile = reconcile
        self._passing = passing
        self._leased = leased
        self._counts_outcomes = counts_outcomes
        self._nudge = wake
        self.ack_timeout_ms: int | None = None  # the group's, as of the last poll (or the join)
        self.group_paused = False  # the group is paused (``pauses.py``), as of the last poll (or the join)
        self.reserved = 0  # in-flight room a lease-row poll in progress may fill
        # A neighbour's join pauses new deliveries from the partitions it was given until a beat begun
        # after it is done: the old owner stops sending from a partition it must hand over before more
        # records reach it (the beat then marks it ``releasing``). The others go on.
        self.paused: set[int] = set()
        self._pause_requests = 0  # joins that paused something: a beat that saw them all clears it
        self._due_at = 0  # when a lease row may fall due (ms)
        self._rows_due = NEVER  # when lease rows are known to be due (``_due_at`` may be a guess)
        self._due_polled = 0  # when the beat last scanned lease rows (ms)
        self._held_due = NEVER  # the first due time of rows held back since the beat's last poll began
        self._last_beat = 0.0
        self._session_ms = 0  # the member's sessionTimeout (``alive``)
        self._alive_until = 0  # (ms) the member's session lasts until then at least, as of its last heartbeat
        self._wakeup = Wakeup()
        self._stopped = False
        self.error: Exception | None = None  # what ended the beat; the delivery loop raises it

    # what the member tells it ---------------------------------------------------------------------

    def pause(self, partitions: Collection[int]) -> None:
        """A neighbour's join took ``partitions``: send nothing more from them until a beat begun after
        this is done; beat now."""
        self._last_beat = 0.0
        losing = self._holdings.parts.keys() & partitions
        if losing:
            self.paused |= losing
            self._pause_requests += 1
        self._wakeup.set()

    def now(self) -> None:
        """Run a full beat now (heartbeat, reconcile), not at its next turn."""
        self._last_beat = 0.0
        self._wakeup.set()

    def rows_may_be_due(self) -> None:
        """Lease rows may be due (an earlier owner's): scan them now."""
        self._due_at = 0
        self._wakeup.set()

    def rows_first(self) -> None:
        """A (re)join: a member that left meanwhile gave back its unacked leases as lease rows, due at
        once with the attempt counted back, below the positions this member reads on from. Every
        partition held sends those first: nothing new is read from it until a poll has taken them, so
        its client sees offsets go up within the session that begins there."""
        for part in self._holdings.parts.values():
            part.rows_first = True
        self.rows_may_be_due()

    def held_until(self, due: int) -> None:
        """The delivery pass wrote rows held back (delays) that fall due at ``due``: scan then."""
        self._held_due = min(self._held_due, due)
        self._due_at = min(self._due_at, due)
        self._rows_due = min(self._rows_due, due)
        self._wakeup.set()

    def alive(self, started_ms: int, session_ms: int | None = None) -> None:
        """A heartbeat or join begun at ``started_ms`` (before its call) succeeded: the member's session
        lasts until then plus its timeout at least (``session_ms``: set at a join)."""
        if session_ms is not None:
            self._session_ms = session_ms
        self._alive_until = max(self._alive_until, started_ms + self._session_ms)

    def lapsed(self, now: int) -> bool:
        """Whether the member may have expired by ``now`` in another process's eyes (module docstring):
        it sends nothing until a heartbeat confirms it."""
        return now >= self._alive_until - min(SESSION_MARGIN_MS, self._session_ms // 4)

    def stop(self) -> None:
        """End ``run`` at its next wait."""
        self._stopped = True
        self._wakeup.set()

    # the loop -------------------------------------------------------------------------------------

    async def run(self, session_timeout_ms: int) -> None:
        """Beat until ``stop()``. A store blip is ridden out for half the session timeout since the last
        beat that reached it (``outages``): new records still flow from the log and acks wait in memory
        for the next checkpoint; ending the connection would hand its in-flight messages to the group
        again. Past that, or on any other error, ``error`` is set and the delivery loop raises it."""
        beat_ok_at = time.monotonic()  # the join just reached the store
        while not self._stopped:
            self._wakeup.clear()
            seen = self._pause_requests
            until = beat_ok_at + session_timeout_ms / 2000
            try:
                rejoined = await through_outages(lambda: self._fenced(self._beat), until=until) is None
            except Exception as error:  # noqa: BLE001 - ends the delivery loop, which raises it
                self.error = error
                self._nudge()
                return
            beat_ok_at = time.monotonic()
            if self.paused and seen == self._pause_requests:  # begun after every pausing join
                self.paused.clear()  # reconciled: what is lost is ``releasing`` or gone
                self._nudge()
            if rejoined:
                continue
            if self._stopped:
                return
            timeout = max(0.0, BEAT_EVERY - (time.monotonic() - self._last_beat))
            # Rows falling due one after another (delayed messages) are taken a few at a time, not one
            # metadata round trip each: at most one due-row scan per ``delays.COALESCE_MS``.
            due = max(self._due_at, self._due_polled + delays.COALESCE_MS)
            await self._wakeup.wait(min(timeout, max(0.0, (due - now_ms()) / 1000) + 0.005))

    async def _beat(self) -> bool:
        """Every ``BEAT_EVERY``: heartbeat and reconcile; and whenever a lease row may be due: deliver
        the due ones (retries, replays, timeouts, an earlier owner's leases). True once done."""
        now = now_ms()
        started = time.monotonic()
        beat = started - self._last_beat >= BEAT_EVERY
        if not beat and self._due_at > now:
            return True
        flow = self._flow
        budget = flow.cap - len(self._holdings.in_flight) - self.reserved - self._passing()
        if not self._rows_due <= now:
            # Rows are not known to be due (a plain beat, or a scan after a rebalance or a timeout):
            # the poll takes a slice, so that the delivery loop keeps its room meanwhile.
            budget = min(budget, _BEAT_ROWS)
        if flow.config is None:  # the first beat learns the group's config before anything is sent
            budget = max(0, budget)
        if budget > 0 or flow.config is None:
            await self._poll(now, budget, heartbeat=beat)
        elif beat and flow.config is not None and flow.config.max_in_flight is not None:
            # Full: a heartbeat that also reads the group's config (a raised maxInFlight makes room).
            polled = await leases.poll_once(self._metadata, self._log, self._ref(), 0, fresh=False)
            self.alive(now)
            flow.config = polled.flow
            self._nudge()
        elif beat:
            answer = await membership.heartbeat(self._metadata, self._ref())
            if answer.should_rejoin:
                raise StaleGeneration("rebalanced")
            self.alive(now)
        if beat:
            self._last_beat = started
            await self._reconcile()
            await flow.beat(now, self._passing())
        return True

    async def _poll(self, now: int, budget: int, *, heartbeat: bool) -> None:
        """A lease-row poll (``leases.poll_once``) of up to ``budget`` rows, and the group as it answers."""
        waiting = [part for part in self._holdings.parts.values() if part.rows_first]
        self.reserved += budget  # the delivery loop leaves room for what the poll brings
        self._held_due = NEVER  # rows held back from now on may be missing from the poll's answer
        try:
            self._due_polled = now
            polled = await leases.poll_once(
                self._metadata, self._log, self._ref(), budget, heartbeat=heartbeat, fresh=False
            )
        finally:
            self.reserved -= budget
            self._nudge()  # the room it held back is the delivery loop's again
        if heartbeat:  # before the rows it took are sent (``_leased`` asks whether the member lapsed)
            self.alive(now)
        first = self.ack_timeout_ms is None
        self.ack_timeout_ms = polled.ack_timeout_ms
        self._flow.config = polled.flow
        self._nudge()
        self._counts_outcomes(polled.breaker)
        if self.group_paused != polled.paused:
            self.group_paused = polled.paused
            self._nudge()  # resumed: deliver now rather than at the next wait's end
        self._due_at = polled.next_deadline_ms if polled.next_deadline_ms is not None else NEVER
        self._rows_due = self._due_at  # what the store said: rows due then
        if self._held_due < self._due_at:  # delayed messages held back while it ran
            self._due_at = self._rows_due = self._held_due
        if waiting and not polled.paused and (polled.next_deadline_ms or NEVER) > now:
            for part in waiting:  # no row of theirs is due any more: new records may follow
                part.rows_first = False
        if polled.messages:
            await self._leased(polled)
        if first:
            self._nudge()  # the delivery loop starts once the group's ack timeout is known
