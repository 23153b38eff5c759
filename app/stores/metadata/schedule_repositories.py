"""SQL of schedules: one project environment's schedules, paged by id, and the runner's fenced claims.

The runner never locks a row across a publish. It claims a due run by a conditional ``UPDATE`` on the due
time it saw (``claim``), publishes, and records the run in another unit of work whose ``UPDATE`` is fenced
on that same due time (``advance``): of two nodes that published the same run (a claim that ran out under
a slow publish), one records it; the idempotency key made both publishes one message.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import CursorResult

from app.stores.metadata.base import Repository
from app.stores.metadata.models import Schedule, ScheduleRun, Topic
from app.stores.metadata.protocol import DueRun, ScheduleRow, ScheduleRunRow


def _row(schedule: Schedule) -> ScheduleRow:
    return ScheduleRow(
        schedule.id,
        schedule.project_id,
        schedule.environment,
        schedule.topic_id,
        schedule.cron,
        schedule.every,
        schedule.every_ms,
        schedule.anchor_ms,
        schedule.timezone,
        schedule.data,
        schedule.key,
        schedule.headers,
        schedule.status,
        schedule.next_run_ms,
        schedule.claimed_until_ms,
        schedule.created_at,
        schedule.updated_at,
    )


class ScheduleRepository(Repository):
    """Schedules of project environments, and their runs."""

    async def add(self, schedule: ScheduleRow) -> None:
        self.session.add(
            Schedule(
                id=schedule.id,
                project_id=schedule.project_id,
                environment=schedule.environment,
                topic_id=schedule.topic_id,
                cron=schedule.cron,
                every=schedule.every,
                every_ms=schedule.every_ms,
                anchor_ms=schedule.anchor_ms,
                timezone=schedule.timezone,
                data=schedule.data,
                key=schedule.key,
                headers=schedule.headers,
                status=schedule.status,
                next_run_ms=schedule.next_run_ms,
                claimed_until_ms=schedule.claimed_until_ms,
                created_at=schedule.created_at,
                updated_at=schedule.updated_at,
            )
        )
        await self._flush()

    async def get(
        self, project_id: str, environment: str, schedule_id: str
    ) -> tuple[ScheduleRow, str] | None:
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
        return (_row(row[0]), row[1]) if row else None

    async def page(
        self, project_id: str, environment: str, after: str | None, limit: int
    ) -> list[tuple[ScheduleRow, str]]:
        """Schedules ordered by id, strictly after ``after``, each with its topic's name."""
        stmt = (
            select(Schedule, Topic.name)
            .join(Topic, Topic.id == Schedule.topic_id)
            .where(Schedule.project_id == project_id, Schedule.environment == environment)
        )
        if after is not None:
            stmt = stmt.where(Schedule.id > after)
        rows = (await self.session.execute(stmt.order_by(Schedule.id).limit(limit))).all()
        return [(_row(row[0]), row[1]) for row in rows]

    async def count(self, project_id: str, environment: str) -> int:
        result = await self.session.execute(
            select(func.count())
            .select_from(Schedule)
            .where(Schedule.project_id == project_id, Schedule.environment == environment)
        )
        return int(result.scalar_one())

    async def pause(self, schedule_id: str, at: datetime) -> None:
        await self.session.execute(
            update(Schedule)
            .where(Schedule.id == schedule_id)
            .values(status="paused", updated_at=at)
            .execution_options(synchronize_session=False)
        )

    async def resume(self, schedule_id: str, next_run_ms: int, at: datetime) -> None:
        await self.session.execute(
            update(Schedule)
            .where(Schedule.id == schedule_id)
            .values(status="active", next_run_ms=next_run_ms, claimed_until_ms=0, updated_at=at)
            .execution_options(synchronize_session=False)
        )

    async def remove(self, schedule_id: str) -> None:
        await self.session.execute(delete(ScheduleRun).where(ScheduleRun.schedule_id == schedule_id))
        await self.session.execute(delete(Schedule).where(Schedule.id == schedule_id))

    async def runs(self, schedule_id: str, limit: int) -> list[ScheduleRunRow]:
        """The schedule's recorded runs, newest first."""
        result = await self.session.execute(
            select(ScheduleRun)
            .where(ScheduleRun.schedule_id == schedule_id)
            .order_by(ScheduleRun.at_ms.desc())
            .limit(limit)
        )
        return [
            ScheduleRunRow(r.schedule_id, r.at_ms, r.message_id, r.partition, r.offset, r.published_at)
            for r in result.scalars().all()
        ]

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

    async def add_run(self, run: ScheduleRunRow, keep: int) -> None:
        """Record a run and drop all but the newest ``keep`` of the schedule's runs."""
        self.session.add(
            ScheduleRun(
                schedule_id=run.schedule_id,
                at_ms=run.at_ms,
                message_id=run.message_id,
                partition=run.partition,
                offset=run.offset,
                published_at=run.published_at,
            )
        )
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
