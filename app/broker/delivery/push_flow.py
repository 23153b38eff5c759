"""The group's flow control and filter for a push member (one half of ``push.PushMember``; the rules are
``flow.py``'s): its claim of the group's ``maxInFlight``, renewed at each beat; the group's rate and
filter on the records its delivery loop reads; and a checkpoint of partitions where the filter passed
records over (so that the group's ``current`` moves past them with no ack to carry it).
"""

from __future__ import annotations

import asyncio

from app.broker.delivery import checkpoints, flow
from app.broker.delivery.checkpoints import HeldPartition
from app.stores.log.protocol import Record
from app.stores.metadata.database import MetadataStore

BEAT_EVERY = 0.5  # heartbeat, rebalance check and due-lease scan; below the 2 s minimum sessionTimeout


class PushFlow:
    """The flow-control half of a ``push.PushMember``: it reads the member's holdings and partitions."""

    # The member's state this half reads (set up by ``PushMember.__init__``).
    _metadata: MetadataStore
    _max_in_flight: int
    member_id: str
    group_id: str
    _parts: dict[int, HeldPartition]
    _in_flight: dict[str, int]
    _passing: int
    _writing: asyncio.Lock

    def _start_flow(self) -> None:
        """This half's own state."""
        # The group's maxInFlight, rate and filter as of the last beat; nothing is sent before the first.
        self._flow: flow.FlowConfig | None = None
        self._claim: int | None = None  # of the group's maxInFlight, what this member may hold (flow.py)
        self._throttled_until = 0  # the group's rate gave no token: no pass before then (ms)
        self._filtered: set[int] = set()  # partitions with records the filter passed over, not checkpointed

    # The member's, called from here.
    async def _reconcile(self, *, leaving: bool = False, confirmed: bool = False) -> set[int]:
        raise NotImplementedError

    def _nudge(self) -> None:
        raise NotImplementedError

    @property
    def _cap(self) -> int:
        """What it may hold: its own ``maxInFlight``, or less, its claim of the group's (none yet: 0)."""
        claim = self._claim
        if claim is None and (self._flow is None or self._flow.max_in_flight is not None):
            claim = 0  # the group's config (or this member's claim of it) is not known yet
        return self._max_in_flight if claim is None else min(self._max_in_flight, claim)

    async def _admit(self, part: HeldPartition, records: list[Record], now: int) -> tuple[list[Record], int]:
        """The group's filter and rate on what was read: the records to send, and the position after
        them (past non-matching ones; at the first record the rate had no token for)."""
        position = records[-1].offset + 1
        gates = self._flow
        if gates is None or (gates.filter is None and gates.rate is None):
            return records, position
        predicate = gates.predicate
        if predicate is not None:
            kept = [r for r in records if r.offset in part.skip or predicate(r.key, r.headers)]
            if len(kept) < len(records):
                self._filtered.add(part.partition)  # counts as acked: its checkpoint follows at the beat
            records = kept
        tokens = await flow.take(self.group_id, gates.rate, len(records))
        if tokens.granted < len(records):
            position = records[tokens.granted].offset
            records = records[: tokens.granted]
            # At most a beat: a changed rate (picked up by the beat) counts from then.
            self._throttled_until = now + min(tokens.wait_ms, round(BEAT_EVERY * 1000))
        return records, position

    async def _flow_beat(self, now: int) -> None:
        """The group's flow control at each beat: its claim of ``maxInFlight`` (lowered here before it
        is written, written before it is raised here), and a checkpoint of partitions where the filter
        passed records over with nothing acked since (so that ``current`` moves past them)."""
        if self._flow is None:
            return
        if self._flow.max_in_flight is not None or self._claim is not None:
            # What it holds, and what a delivery pass in progress may still add (its budget was taken
            # under the claim before this one).
            held = len(self._in_flight) + self._passing
            self._claim = held  # no new deliveries while the claim changes: below both old and new
            try:
                self._claim = await flow.push_claim(
                    self._metadata,
                    self.group_id,
                    self.member_id,
                    self._flow.max_in_flight,
                    held,
                    self._max_in_flight,
                    now,
                )
            finally:
                self._nudge()
        if self._filtered:
            parts = [p for n, p in self._parts.items() if n in self._filtered and not p.releasing]
            self._filtered.clear()
            if parts:
                async with self._writing:
                    parts = [p for p in parts if self._parts.get(p.partition) is p]
                    fenced = await checkpoints.checkpoint(
                        self._metadata, self.group_id, self.member_id, parts
                    )
                if fenced:
                    await self._reconcile()
