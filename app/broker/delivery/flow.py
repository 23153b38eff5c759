"""Flow control and filters in delivery: what the group's ``maxInFlight``, ``rate`` and ``filter`` let a
member receive. The delivery loops (``leases.py`` for pull members and every server-side pull member,
``push.py`` for WebSocket members) call the small functions here.

**maxInFlight** — unacked messages across all members of the group, on every node. Each member has a
*claim* (``group_members.in_flight_claim``): how many of them it may hold. The claims of the group's live
members never add up to more than ``maxInFlight``, and a member never holds more than its claim, so
neither do all of them together:

- a claim grows only under the group's row lock, and only into room no other live member claims
  (``maxInFlight − Σ others' claims``), capped at the member's fair share ``⌈maxInFlight / members⌉``;
- a claim shrinks no lower than what the member holds (a claim is given back as its messages are acked);
- a pull member claims, in each poll, what it holds plus what that poll delivers (its holdings are its
  lease rows); a WebSocket member, at each beat (0.5 s), what it holds plus the room it reserves for the
  next deliveries (its first-delivery leases are in memory, so it cannot claim per message), at most its
  own ``maxInFlight``;
- a member that leaves or expires stops counting: its unacked messages go back to the group (redelivered,
  so no longer in flight).

A member whose room is 0 waits (never a refusal): a pull poll rechecks every ``RECHECK_MS``, a WebSocket
member at its beats. A change of ``maxInFlight`` takes effect at each member's next poll or beat.

**rate** — messages per second delivered to the group, as a token bucket per group in the limits store
(Redis across nodes, in-process when embedded: ``app/stores/limits/protocol.py::TokenBuckets``, given by
the app's lifespan); burst: one second's worth (at least 1). A delivery pass takes tokens for what it is
about to send (a poll once per pass, a WebSocket member once per partition it sends from); what it could
not take waits for the next token, held where it is in the partition (nothing skipped).

**filter** — non-matching records are never delivered to the group and count as acked: they get no
lease, the group's position moves past them, and ``committed`` follows once nothing below is unacked.
The delivery loops' ``reader.BudgetedReader`` passes them over without spending the pass's budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.broker import filters
from app.stores.limits.protocol import Taken, TokenBuckets
from app.stores.metadata.protocol import MetadataStore, MetadataUnit

RECHECK_MS = 250  # how often a pull member with no room looks again (a push member: at its beats)

# The token buckets of group rates. Set once by the app's lifespan (``use_token_buckets``), here rather
# than passed down: every kind of member (pull, WebSocket, and the server-side pull members of push groups
# and SSE) reaches it through the same delivery loops; the broker knows only their protocol. Nothing
# delivers before the lifespan ran, so a rate asked of no buckets is a wiring error.
_buckets: TokenBuckets | None = None


def use_token_buckets(buckets: TokenBuckets) -> None:
    """Count group rates in ``buckets`` (the limits store the app built) from now on."""
    global _buckets
    _buckets = buckets


@dataclass(frozen=True, slots=True)
class FlowConfig:
    """A group's flow control and filter, as its config holds them now."""

    max_in_flight: int | None = None
    rate: float | None = None
    filter: str | None = None

    @property
    def predicate(self) -> filters.Predicate | None:
        return filters.predicate_of(self.filter)


async def take(group_id: str, rate: float | None, want: int) -> Taken:
    """Tokens of the group's rate for ``want`` deliveries (all of them when it has no rate)."""
    if rate is None or want <= 0:
        return Taken(want, math.inf)
    if _buckets is None:
        raise RuntimeError("no token buckets: the app's lifespan gives them (flow.use_token_buckets)")
    return await _buckets.take(f"group:{group_id}", rate, max(1.0, rate), want)


def fair_share(max_in_flight: int, live: int) -> int:
    return -(-max_in_flight // max(1, live))


async def pull_room(
    uow: MetadataUnit, group_id: str, member_id: str, max_in_flight: int | None, now_ms: int
) -> tuple[int, int] | None:
    """For a pull poll: how many more messages the member may be handed now, and how many it holds
    (None when the group has no ``maxInFlight``). Locks the group row: call it before the partitions'."""
    if max_in_flight is None:
        return None
    await uow.flow.lock_group(group_id)
    held = await uow.flow.held(group_id, member_id, now_ms)
    others, live = await uow.flow.others(group_id, member_id, now_ms)
    limit = min(fair_share(max_in_flight, live), max_in_flight - others)
    return max(0, limit - held), held


async def settle_pull_claim(uow: MetadataUnit, group_id: str, member_id: str, claim: int) -> None:
    """The pull member's claim after its poll: what it holds now (``pull_room``'s lock is still held)."""
    await uow.flow.set_claim(group_id, member_id, claim)


async def push_claim(
    metadata: MetadataStore,
    group_id: str,
    member_id: str,
    max_in_flight: int | None,
    held: int,
    own_max: int,
    now_ms: int,
) -> int | None:
    """A WebSocket member's claim for the coming beat: what it holds plus the room it may reserve (at most
    its fair share and its own ``maxInFlight``); None, and no claim, when the group has no
    ``maxInFlight``. Written before it is used when it grows; the caller lowers its own first."""
    async with metadata.unit() as uow:
        if max_in_flight is None:
            await uow.flow.set_claim(group_id, member_id, None)
            return None
        await uow.flow.lock_group(group_id)
        others, live = await uow.flow.others(group_id, member_id, now_ms)
        room = min(fair_share(max_in_flight, live), own_max, max_in_flight - others)
        claim = max(held, room)
        await uow.flow.set_claim(group_id, member_id, claim)
        return claim
