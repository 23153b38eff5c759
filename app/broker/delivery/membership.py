"""Membership: join, heartbeat, leave, session expiry, and the rebalances they cause.

A group has one ``generation``, bumped at every rebalance (a member joins, leaves or expires, or the topic
gains partitions). Members carry the generation they joined in; a call with an older one is refused
(``STALE_GENERATION``) and the member joins again with its ``memberId``, which is cheap: rejoining a live
member changes nothing and answers the current generation and assignment.

There is no background task: expiry is noticed by the next call that reads the group (a heartbeat, a
poll, a join), which sweeps expired members and rebalances in the same unit of work. A rebalance locks
the group row first, so two never interleave. Whether a session has expired is decided on the caller's
clock: ``join``, ``heartbeat`` and ``leave`` take a ``Clock`` (the pull routes hand in ``Services.clock``),
and ``maintain`` the ``now`` of the poll that noticed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from app.broker import durations, groups, pauses, push_groups
from app.broker.delivery import stream_wakeups
from app.broker.delivery.assignment import assign
from app.broker.errors import BrokerError, InvalidRequest, MemberNotFound, StaleGeneration
from app.broker.topics import TopicRef
from app.kit.clock import SYSTEM_CLOCK, Clock, utcnow
from app.kit.ids import new_id
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import GroupRow, MemberRow, MetadataStore, MetadataUnit

START_FROM = ("earliest", "latest")
MEMBER_ID = re.compile(r"^csr_[A-Za-z0-9]{1,28}$")
T = TypeVar("T")


MAX_GENERATION = 2**53 - 1  # what every JSON parser holds exactly


@dataclass(frozen=True, slots=True)
class MemberRef:
    """Who a delivery call speaks for: one member of a group of a topic, at the generation it last saw.

    Pull calls build one per request; a push member builds a new one after each rejoin (it is a value)."""

    topic: TopicRef
    group_name: str
    member_id: str
    generation: int

    def __post_init__(self) -> None:
        # Generations count up from 0; anything else is no generation this group ever had.
        generation = self.generation
        if type(generation) is not int or not 0 <= generation <= MAX_GENERATION:
            raise InvalidRequest.field("generationId", f"must be an integer from 0 to {MAX_GENERATION}")


@dataclass(frozen=True, slots=True)
class Membership:
    member_id: str
    generation: int
    assignments: list[int]
    session_timeout: str
    group_id: str = ""
    ack_timeout_ms: int | None = None  # the group's, as of the join
    paused: bool = False  # the group is paused (``pauses.py``), as of the join

    @property
    def session_timeout_ms(self) -> int:
        """``session_timeout`` in milliseconds: what the member's heartbeats keep its session for."""
        return durations.parse(self.session_timeout, "sessionTimeout", durations.SESSION_TIMEOUT)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    generation: int
    should_rejoin: bool
    assignments: list[int]


def member_not_found(member_id: str, group: str) -> MemberNotFound:
    return MemberNotFound(
        f"No member '{member_id}' in group '{group}' (it left or its session expired); join again."
    )


def stale_generation(given: int, current: int) -> StaleGeneration:
    return StaleGeneration(
        f"Generation {given} is stale: the group rebalanced (now generation {current}); join again."
    )


async def committing_fences(metadata: MetadataStore, work: Callable[[MetadataUnit], Awaitable[T]]) -> T:
    """Run ``work`` in a unit of work that commits even when it ends in a fencing error.

    A sweep or rebalance done before a member is told it is stale or gone must stick; otherwise every
    retry would redo it and no member would ever see the new generation.
    """
    fenced: list[BrokerError] = []

    async def committing(uow: MetadataUnit) -> T | None:
        fenced.clear()  # a run lost to a lock conflict left nothing behind, its fencing error included
        try:
            return await work(uow)
        except (MemberNotFound, StaleGeneration) as error:
            fenced.append(error)
            return None

    # Membership writes of one group meet other writers (seeks, checkpoints): conflicts are run again.
    result = await metadata.run_unit(committing)
    if fenced:
        raise fenced[0]
    return cast(T, result)  # None only when fenced, raised above


async def settle(
    uow: MetadataUnit,
    group: GroupRow,
    topic_partitions: int,
    now: int,
    *,
    changed: bool = False,
    gone: list[str] | None = None,
) -> int:
    """With the group row locked: sweep expired members, cover new partitions, rebalance if anything
    changed. Returns the group's generation afterwards."""
    left = list(gone or ())
    expired = await uow.groups.remove_expired_members(group.id, now)
    gone = left + expired
    grown = topic_partitions > group.partition_count
    if grown:
        have = {s.partition for s in await uow.partitions.partitions(group.id)}
        await uow.partitions.add_partitions(group.id, [p for p in range(topic_partitions) if p not in have])
    if not (changed or gone or grown):
        return group.generation
    live = await uow.groups.live_members(group.id, now)
    state = await uow.partitions.partitions(group.id)
    current = {s.partition: s.member_id for s in state}
    wanted = assign(topic_partitions, live, current)
    moved = {p: m for p, m in wanted.items() if current.get(p) != m}
    # A live push member keeps leases of its partitions in memory: the ones it loses stay held by it
    # until it has written them (its next pass), and only then does the new owner deliver from them.
    losing = sorted({owner for p in moved if (owner := current.get(p)) is not None})
    pushers = await uow.groups.push_members(group.id, losing)
    held = {p: owner for p in moved if (owner := current.get(p)) in pushers}
    await uow.partitions.set_owners(group.id, moved, held)
    await uow.partitions.clear_held(group.id, gone)
    # Leases of members that are gone become due now, for the partitions' new owners: given back unspent
    # by members that left, as ack timeouts of members that expired (``failures.py``). Leases of members
    # still alive keep their deadline: a message is never redelivered while its ack deadline holds.
    # (Partitions before leases: the lock order every unit of work keeps.)
    await uow.leases.release_member_leases(group.id, left, now, clean=True)
    await uow.leases.release_member_leases(group.id, expired, now)
    generation = group.generation + 1
    await uow.groups.set_generation(group.id, generation, max(topic_partitions, group.partition_count))
    return generation


async def _start_positions(
    uow: MetadataUnit, log: LogEngine, topic: TopicRef, group_id: str, start_from: str
) -> None:
    """Give partitions without a position one: ``startFrom`` while the group has committed nothing yet,
    else the earliest retained offset (a partition added later is read from its start)."""
    state = await uow.partitions.partitions(group_id)
    unset = [s.partition for s in state if s.position is None]
    if not unset:
        return
    fresh = all(s.committed is None for s in state)
    offsets = {}
    for p in unset:
        info = await log.partition_info(topic.id, p)
        offsets[p] = info.latest_offset if fresh and start_from == "latest" else info.earliest_offset
    await uow.partitions.set_offsets(group_id, offsets)


def _assigned(state_owner: dict[int, str | None], member_id: str) -> list[int]:
    return sorted(p for p, m in state_owner.items() if m == member_id)


async def join(
    metadata: MetadataStore,
    log: LogEngine,
    topic: TopicRef,
    group_name: str,
    *,
    member_id: str | None = None,
    start_from: str = "latest",
    session_timeout: str | None = None,
    push: bool = False,
    url_worker: bool = False,
    clock: Clock = SYSTEM_CLOCK,
) -> Membership:
    """Join (or rejoin with ``member_id``) a group, creating the group if needed. A ``push`` member
    keeps its first-delivery leases in memory (``push.PushMember``). Only a ``url_worker``
    (``url_push.UrlWorker``) joins a push group (``push_groups.refuse_join``). Sessions start, and
    expire, on ``clock``."""
    groups.validate_name(group_name)
    if start_from not in START_FROM:
        raise InvalidRequest.field("startFrom", "must be 'earliest' or 'latest'")
    timeout_ms = (
        durations.parse(session_timeout, "sessionTimeout", durations.SESSION_TIMEOUT)
        if session_timeout is not None
        else None
    )
    if member_id is not None and not MEMBER_ID.fullmatch(member_id):
        raise InvalidRequest.field("memberId", "not a member id issued by QueueCore (csr_…)")

    async def work(uow: MetadataUnit) -> Membership:
        group = await groups.ensure_group(uow, topic, group_name)
        await push_groups.refuse_join(uow, group.id, member_id, url_worker)
        now = clock.now_ms()
        text = session_timeout if session_timeout is not None else group.session_timeout
        ms = timeout_ms if timeout_ms is not None else group.session_timeout_ms
        member = await uow.groups.get_member(group.id, member_id) if member_id else None
        if member is not None:
            # A rejoin: a live member changes nothing; one past its session comes back (a rebalance).
            changed = member.expires_at_ms <= now
            member = dataclasses.replace(
                member, session_timeout=text, session_timeout_ms=ms, expires_at_ms=now + ms, push=push
            )
            await uow.groups.save_member(member)
        else:
            member = MemberRow(
                group_id=group.id,
                id=member_id or new_id("csr"),
                session_timeout=text,
                session_timeout_ms=ms,
                expires_at_ms=now + ms,
                joined_at=utcnow(),
                push=push,
            )
            await uow.groups.add_member(member)
            changed = True
        generation = await settle(uow, group, topic.partitions, now, changed=changed)
        await _start_positions(uow, log, topic, group.id, start_from)
        owners = {s.partition: s.member_id for s in await uow.partitions.partitions(group.id)}
        return Membership(
            member.id,
            generation,
            _assigned(owners, member.id),
            member.session_timeout,
            group.id,
            group.ack_timeout_ms,
            pauses.holds(group.paused_reason, group.paused_until_ms, now),
        )

    return await committing_fences(metadata, work)


async def heartbeat(metadata: MetadataStore, member: MemberRef, *, clock: Clock = SYSTEM_CLOCK) -> Heartbeat:
    """Keep a member alive; says whether it must join again (the group rebalanced) and what it owns.
    Whose session has expired is decided on ``clock``."""
    topic, member_id = member.topic, member.member_id

    async def work(uow: MetadataUnit) -> Heartbeat:
        group = await uow.groups.get(topic.id, member.group_name, for_update=True)
        if group is None:
            raise member_not_found(member_id, member.group_name)
        now = clock.now_ms()
        row = await uow.groups.get_member(group.id, member_id)
        alive = row is not None and row.expires_at_ms > now
        if alive:
            assert row is not None
            await uow.groups.touch_member(group.id, member_id, now, now + row.session_timeout_ms)
        current = await settle(uow, group, topic.partitions, now)
        if not alive:
            raise member_not_found(member_id, member.group_name)
        owners = {s.partition: s.member_id for s in await uow.partitions.partitions(group.id)}
        return Heartbeat(current, member.generation != current, _assigned(owners, member_id))

    return await committing_fences(metadata, work)


async def leave(
    metadata: MetadataStore, topic: TopicRef, group_name: str, member_id: str, *, clock: Clock = SYSTEM_CLOCK
) -> None:
    """Leave a group: its partitions go to the others at once, its leases are redelivered at once (the
    other members' expired sessions swept on ``clock``)."""

    async def work(uow: MetadataUnit) -> None:
        group = await uow.groups.get(topic.id, group_name, for_update=True)
        if group is None or not await uow.groups.remove_member(group.id, member_id):
            raise member_not_found(member_id, group_name)
        await settle(uow, group, topic.partitions, clock.now_ms(), gone=[member_id])

    await committing_fences(metadata, work)
    stream_wakeups.left(member_id)  # its event stream here, if any, ends rather than join again


async def maintain(uow: MetadataUnit, topic: TopicRef, group_name: str, now: int) -> None:
    """Lock the group and sweep/rebalance if due (called by polls that noticed it is, at their ``now``)."""
    group = await uow.groups.get(topic.id, group_name, for_update=True)
    if group is not None:
        await settle(uow, group, topic.partitions, now)
