"""SQL of schedules: one project environment's schedules, paged by id, and the runner's fenced claims.

The runner never locks a row across a publish. It claims a due run by a conditional ``UPDATE`` on the due
time it saw (``claim``), publishes, and records the run in another unit of work whose ``UPDATE`` is fenced
on that same due time (``advance``): of two nodes that published the same run (a claim that ran out under
a slow publish), one records it; the idempotency key made both publishes one message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import CursorResult

from app.stores.metadata.base import Repository
from app.stores.metadata.models import Schedule, ScheduleRun, Topic


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


class ScheduleRepository(Repository):
    """Schedules of project environments, and their runs."""

    async def add(self, schedule: Schedule) -> Schedule:
        self.session.add(schedule)
        await self._flush()
        return schedule

    async def get(self, project_id: str, environment: str, schedule_id: str) -> tuple[Schedule, str] | None:
        """The schedule with its topic's name, if it belongs to this environment."""
        row = (
            await self.session.execute(
                select(Schedule, Topic.name)
                .join(Topic, Topic.id == Schedule.topic_id)
                .where(
                    Schedule.id == schedule_id,
                    Schedule.project_id == project_id,
                    Schedule.environment == environment,
                )
                .execution_options(populate_existing=True)
            )
        ).first()
        return (row[0], row[1]) if row else None

    async def page(
        self, project_id: str, environment: str, after: str | None, limit: int
    ) -> Sequence[tuple[Schedule, str]]:
        """Schedules ordered by id, strictly after ``after``, each with its topic's name."""
        stmt = (
            select(Schedule, Topic.name)
            .join(Topic, Topic.id == Schedule.topic_id)
            .where(Schedule.project_id == project_id, Schedule.environment == environment)
        )
        if after is not None:
            stmt = stmt.where(Schedule.id > after)
        rows = (await self.session.execute(stmt.order_by(Schedule.id).limit(limit))).all()
        return [(row[0], row[1]) for row in rows]

    async def count(self, project_id: str, environment: str) -> int:
        result = await self.session.execute(
            select(func.count())
            .select_from(Schedule)
            .where(Schedule.project_id == project_id, Schedule.environment == environment)
        )
        return int(result.scalar_one())

    async def remove(self, schedule_id: str) -> None:
        await self.session.execute(delete(ScheduleRun).where(ScheduleRun.schedule_id == schedule_id))
        await self.session.execute(delete(Schedule).where(Schedule.id == schedule_id))

    async def runs(self, schedule_id: str, limit: int) -> Sequence[ScheduleRun]:
        """The schedule's recorded runs, newest first."""
        result = await self.session.execute(
            select(ScheduleRun)
            .where(ScheduleRun.schedule_id == schedule_id)
            .order_by(ScheduleRun.at_ms.desc())
            .limit(limit)
        )
        return result.scalars().all()

    # the runner -------------------------------------------------------------------------------------

    async def due(self, now_ms: int, limit: int, project_id: str | None = None) -> list[DueRun]:
        """Active schedules whose next run is due and not claimed by anyone now, soonest first (of one
        project only, when given)."""
        stmt = (
            select(
                Schedule.id,
                Schedule.project_id,
                Schedule.environment,
                Topic.name,
                Schedule.next_run_ms,
                Schedule.data,
                Schedule.key,
                Schedule.headers,
                Schedule.cron,
                Schedule.every_ms,
                Schedule.anchor_ms,
                Schedule.timezone,
            )
            .join(Topic, Topic.id == Schedule.topic_id)
            .where(
                Schedule.status == "active",
                Schedule.next_run_ms <= now_ms,
                Schedule.claimed_until_ms <= now_ms,
            )
            .order_by(Schedule.next_run_ms)
            .limit(limit)
        )
        if project_id is not None:
            stmt = stmt.where(Schedule.project_id == project_id)
        return [DueRun(*row) for row in (await self.session.execute(stmt)).all()]

    async def claim(self, schedule_id: str, due_ms: int, now_ms: int, until_ms: int) -> bool:
        """Take the run due at ``due_ms`` until ``until_ms``; False if another node has it, or it moved on."""
        result = await self.session.execute(
            update(Schedule)
            .where(
                Schedule.id == schedule_id,
                Schedule.status == "active",
                Schedule.next_run_ms == due_ms,
                Schedule.claimed_until_ms <= now_ms,
            )
            .values(claimed_until_ms=until_ms)
            .execution_options(synchronize_session=False)
        )
        return _changed(result)

    async def advance(self, schedule_id: str, due_ms: int, next_ms: int) -> bool:
        """Move the schedule from the run due at ``due_ms`` to ``next_ms`` and release the claim; False if
        the run was recorded already (or the schedule is gone)."""
        result = await self.session.execute(
            update(Schedule)
            .where(Schedule.id == schedule_id, Schedule.next_run_ms == due_ms)
            .values(next_run_ms=next_ms, claimed_until_ms=0)
            .execution_options(synchronize_session=False)
        )
        return _changed(result)

    async def add_run(self, run: ScheduleRun, keep: int) -> None:
        """Record a run and drop all but the newest ``keep`` of the schedule's runs."""
        self.session.add(run)
        await self._flush()
        oldest_kept = (
            select(ScheduleRun.at_ms)
            .where(ScheduleRun.schedule_id == run.schedule_id)
            .order_by(ScheduleRun.at_ms.desc())
            .offset(keep - 1)
            .limit(1)
            .scalar_subquery()
        )
        await self.session.execute(
            delete(ScheduleRun).where(
                ScheduleRun.schedule_id == run.schedule_id, ScheduleRun.at_ms < oldest_kept
            )
        )


def _changed(result: Any) -> bool:
    return isinstance(result, CursorResult) and result.rowcount == 1
