"""The port's group controls store: the DLQ breaker's outcome counters on group rows
(``app/broker/breaker.py``); a group's pause itself is ``GroupStore.set_pause`` / ``clear_pause``.

Implemented by ``group_control_repositories.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

# values -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BreakerState:
    """A group's pause and its DLQ breaker's counts of delivery outcomes in the window that began at
    ``window_ms``."""

    group_id: str
    name: str
    topic_id: str
    paused_reason: str | None
    paused_until_ms: int | None
    window_ms: int
    acked: int
    failed: int


# group controls -----------------------------------------------------------------------------------


@runtime_checkable
class GroupControlStore(Protocol):
    """The DLQ breaker's outcome counters on group rows (``app/broker/breaker.py``)."""

    async def dead_letter_configs(self, group_ids: Sequence[str]) -> dict[str, dict[str, Any] | None]:
        """The ``deadLetter`` config of each of these groups that still exists."""

    async def lock(self, group_id: str) -> BreakerState | None:
        """A group's pause and breaker counts, its row locked for this unit of work (as ``groups.get``
        with ``for_update``: the first step of the lock order)."""

    async def set_counts(self, group_id: str, window_ms: int, acked: int, failed: int) -> None:
        """Store a group's breaker window start and its counts in it."""

    async def topic_of(self, topic_id: str) -> tuple[str, str, str] | None:
        """``(project_id, environment, name)`` of a topic."""
