"""Pausing a consumer group: ``pause {until?}`` and ``resume``, by a user or by the DLQ breaker.

A pause is two columns of the group row (``paused_reason``, ``paused_until_ms``), so every API node sees
it at the next metadata read a delivery loop makes anyway: a pull poll reads it with the member
(``CallerView``) and delivers nothing while it holds; a WebSocket push member learns it from its beat
(every ``push.BEAT_EVERY`` = 0.5 s) and stops sending; server-side pull members (push groups, SSE) poll
through the same path. Acks, nacks and extends are untouched. A pause with ``until`` ends by itself
when that time comes: nothing is written then, every reader compares with the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from app.broker import timing
from app.broker.errors import GroupNotFound, InvalidRequest
from app.broker.topics import TopicRef
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.stores.metadata.protocol import MetadataUnit

USER = "user"
DEAD_LETTER_BREAKER = "dlq-breaker"
MAX_UNTIL_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z: what ISO-8601 answers can still say


@dataclass(frozen=True, slots=True)
class PauseState:
    """Whether a group is paused now, why, and until when (None: until resumed)."""

    paused: bool
    until_ms: int | None = None
    reason: str | None = None

    @property
    def until(self) -> str | None:
        return isoformat_ms(self.until_ms) if self.until_ms is not None else None


def holds(reason: str | None, until_ms: int | None, now: int) -> bool:
    """Whether a pause stored as ``(reason, until_ms)`` is in force at ``now``."""
    return reason is not None and (until_ms is None or until_ms > now)


class PauseCarrier(Protocol):
    """Whatever carries a group's stored pause (its row, a ``CallerView``)."""

    @property
    def paused_reason(self) -> str | None: ...

    @property
    def paused_until_ms(self) -> int | None: ...


def state_of(group: PauseCarrier, now: int | None = None) -> PauseState:
    """The group's pause as clients see it (an ``until`` that has passed is no pause)."""
    at = now_ms() if now is None else now
    if not holds(group.paused_reason, group.paused_until_ms, at):
        return PauseState(False)
    return PauseState(True, group.paused_until_ms, group.paused_reason)


def parse_until(value: Any, now: int) -> int | None:
    """``until`` of a pause: ISO-8601 with a time zone, or epoch milliseconds, in the future; or None."""
    if value is None:
        return None
    at = timing.instant_ms(value, "until")
    if not now < at <= MAX_UNTIL_MS:
        raise InvalidRequest.field("until", "must be in the future")
    return at


async def _locked(uow: MetadataUnit, topic: TopicRef, name: str) -> str:
    """The group's id, its row locked for this unit of work."""
    # ``groups.get_group``'s lookup; not imported from there: ``groups`` describes pauses with this module.
    group = await uow.groups.get(topic.id, name, for_update=True)
    if group is None:
        raise GroupNotFound(f"No consumer group '{name}' on topic '{topic.name}'.")
    return group.id


async def pause(uow: MetadataUnit, topic: TopicRef, name: str, until: Any = None) -> PauseState:
    """Pause a group (by a user) until ``until`` or until resumed; pausing again replaces the pause."""
    now = now_ms()
    until_ms = parse_until(until, now)
    group_id = await _locked(uow, topic, name)
    await uow.groups.set_pause(group_id, USER, until_ms, utcnow())
    return PauseState(True, until_ms, USER)


async def resume(uow: MetadataUnit, topic: TopicRef, name: str) -> PauseState:
    """End a group's pause (a user's or the breaker's); the breaker counts afresh from now."""
    group_id = await _locked(uow, topic, name)
    await uow.groups.clear_pause(group_id, now_ms(), utcnow())
    return PauseState(False)
