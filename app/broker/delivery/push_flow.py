"""The group's flow control and filter for a push member (composed into ``push.PushMember``, on its
``Holdings``; the rules are ``flow.py``'s): its claim of the group's ``maxInFlight``, renewed at each
beat; the group's rate on the records its delivery loop sends (its filter is applied by the loop's
``reader.BudgetedReader``); and a checkpoint of partitions where the filter passed records over (so that
the group's ``current`` moves past them with no ack to carry it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from app.broker.delivery import checkpoints, flow
from app.broker.delivery.holdings import Holdings
from app.stores.metadata.protocol import MetadataStore

BEAT_EVERY = 0.5  # heartbeat, rebalance check and due-lease scan; below the 2 s minimum sessionTimeout


class PushFlow:
    """The flow control of one ``push.PushMember``, composed into it: it reads the member's ``Holdings``
    and calls back into the member to reconcile (a fenced checkpoint) and to wake its delivery loop."""

    def __init__(
        self,
        holdings: Holdings,
        metadata: MetadataStore,
        max_in_flight: int,
        *,
        reconcile: Callable[[], Awaitable[set[int]]],
        wake: Callable[[], None],
    ) -> None:
        self._holdings = holdings
        self._metadata = metadata
        self._max_in_flight = max_in_flight
        self._reconcile = reconcile
        self._nudge = wake
        # The group's maxInFlight, rate and filter as of the last beat; nothing is sent before the first.
        self.config: flow.FlowConfig | None = None
        self._claim: int | None = None  # of the group's maxInFlight, what this member may hold (flow.py)
        self.throttled_until = 0  # the group's rate gave no token: no pass before then (ms)
        self._filtered: set[int] = set()  # partitions with records the filter passed over, not checkpointed

    @property
    def cap(self) -> int:
        """What it may hold: its own ``maxInFlight``, or less, its claim of the group's (none yet: 0)."""
        claim = self._claim
        if claim is None and (self.config is None or self.config.max_in_flight is not None):
            claim = 0  # the group's config (or this member's claim of it) is not known yet
        return self._max_in_flight if claim is None else min(self._max_in_flight, claim)

    async def take(self, wanted: int, now: int) -> int:
        """Tokens of the group's rate for ``wanted`` deliveries: how many may go now. Short of tokens, no
        pass before the next one (``throttled_until``)."""
        gates = self.config
        if gates is None or gates.rate is None:
            return wanted
        tokens = await flow.take(self._holdings.group_id, gates.rate, wanted)
        if tokens.granted < wanted:
            # At most a beat: a changed rate (picked up by the beat) counts from then.
            self.throttled_until = now + min(tokens.wait_ms, round(BEAT_EVERY * 1000))
        return tokens.granted

    def passed_over(self, partitions: set[int]) -> None:
        """Partitions where the filter passed records over: they count as acked, so a checkpoint follows
        at the beat (``current`` moves past them with no ack to carry it)."""
        self._filtered |= partitions

    async def beat(self, now: int, passing: int) -> None:
        """The group's flow control at each beat: its claim of ``maxInFlight`` (lowered here before it
        is written, written before it is raised here), and a checkpoint of partitions where the filter
        passed records over with nothing acked since (so that ``current`` moves past them)."""
        if self.config is None:
            return
        if self.config.max_in_flight is not None or self._claim is not None:
            # What it holds, and what a delivery pass in progress may still add (``passing``: its budget
            # was taken under the claim before this one).
            held = len(self._holdings.in_flight) + passing
            self._claim = held  # no new deliveries while the claim changes: below both old and new
            try:
                self._claim = await flow.push_claim(
                    self._metadata,
                    self._holdings.group_id,
                    self._holdings.member_id,
                    self.config.max_in_flight,
                    held,
                    self._max_in_flight,
                    now,
                )
            finally:
                self._nudge()
        if self._filtered:
            parts = [p for n, p in self._holdings.parts.items() if n in self._filtered and not p.releasing]
            self._filtered.clear()
            if parts:
                async with self._holdings.writing:
                    parts = [p for p in parts if self._holdings.parts.get(p.partition) is p]
                    fenced = await checkpoints.checkpoint(
                        self._metadata, self._holdings.group_id, self._holdings.member_id, parts
                    )
                if fenced:
                    await self._reconcile()
