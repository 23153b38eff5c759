"""The port's schedules store: schedules of project environments, their recorded runs, and the runner's
fenced claims (``app/broker/schedules/``).

Implemented by ``schedule_repositories.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

# values -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A schedule as stored: its cadence (``cron`` in ``timezone``, or ``every_ms`` from ``anchor_ms``),
    the message each run publishes (``data`` as JSON text), and the runner's due time and claim."""

    id: str
    project_id: str
    environment: str
    topic_id: str
    cron: str | None
    every: str | None
    every_ms: int | None
    anchor_ms: int
    timezone: str
    data: str
    key: str | None
    headers: dict[str, Any] | None
    status: str  # active | paused
    next_run_ms: int
    claimed_until_ms: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ScheduleRunRow:
    """One published run of a schedule: its due time and where its message landed."""

    schedule_id: str
    at_ms: int
    message_id: str
    partition: int
    offset: int
    published_at: datetime


@dataclass(frozen=True, slots=True)
class DueRun:
    """A schedule's due run as the runner reads it: what to publish, where, and for which due time."""

    schedule_id: str
    project_id: str
    environment: str
    topic_name: str
    due_ms: int
    data: str
    key: str | None
    headers: dict[str, Any] | None
    cron: str | None
    every_ms: int | None
    anchor_ms: int
    timezone: str


# schedules ----------------------------------------------------------------------------------------


@runtime_checkable
class ScheduleStore(Protocol):
    """Schedules of project environments, their recorded runs, and the runner's fenced claims."""

    async def add(self, schedule: ScheduleRow) -> None:
        """Insert a schedule (flushed)."""

    async def get(
        self, project_id: str, environment: str, schedule_id: str
    ) -> tuple[ScheduleRow, str] | None:
        """The schedule with its topic's name, if it belongs to this environment."""

    async def page(
        self, project_id: str, environment: str, after: str | None, limit: int
    ) -> list[tuple[ScheduleRow, str]]:
        """Schedules ordered by id, strictly after ``after``, each with its topic's name."""

    async def count(self, project_id: str, environment: str) -> int:
        """How many schedules a project environment has."""

    async def pause(self, schedule_id: str, at: datetime) -> None:
        """Mark a schedule paused (the runner no longer sees it due)."""

    async def resume(self, schedule_id: str, next_run_ms: int, at: datetime) -> None:
        """Mark a schedule active again, due next at ``next_run_ms``, unclaimed."""

    async def remove(self, schedule_id: str) -> None:
        """Delete a schedule and its runs."""

    async def runs(self, schedule_id: str, limit: int) -> list[ScheduleRunRow]:
        """The schedule's recorded runs, newest first."""

    async def due(self, now_ms: int, limit: int, project_id: str | None = None) -> list[DueRun]:
        """Active schedules whose next run is due and not claimed by anyone now, soonest first (of one
        project only, when given)."""

    async def claim(self, schedule_id: str, due_ms: int, now_ms: int, until_ms: int) -> bool:
        """Take the run due at ``due_ms`` until ``until_ms``; False if another node has it, or it moved on."""

    async def advance(self, schedule_id: str, due_ms: int, next_ms: int) -> bool:
        """Move the schedule from the run due at ``due_ms`` to ``next_ms`` and release the claim; False
        if the run was recorded already (or the schedule is gone)."""

    async def add_run(self, run: ScheduleRunRow, keep: int) -> None:
        """Record a run and drop all but the newest ``keep`` of the schedule's runs."""
