"""The schedules store (``protocol.ScheduleStore``) as the schedule calls and the runner use it: frozen
schedules and runs in and out, pause and resume, and the runner's fenced claim and advance; on SQLite and
Postgres."""

from __future__ import annotations

import dataclasses

from app.kit.ids import new_id
from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.protocol import ScheduleRow, ScheduleRunRow, TopicRow
from tests.stores.metadata.conftest import Rows, now


def _schedule(topic: TopicRow, *, next_run_ms: int = 1_000, status: str = "active") -> ScheduleRow:
    at = now()
    return ScheduleRow(
        id=new_id("sch"),
        project_id=topic.project_id,
        environment=topic.environment,
        topic_id=topic.id,
        cron=None,
        every="1m",
        every_ms=60_000,
        anchor_ms=0,
        timezone="UTC",
        data='{"v":1}',
        key="k",
        headers={"a": "b"},
        status=status,
        next_run_ms=next_run_ms,
        claimed_until_ms=0,
        created_at=at,
        updated_at=at,
    )


def _fields(row: ScheduleRow) -> tuple[object, ...]:
    """A schedule's fields but its times (SQLite hands times back without their zone)."""
    return dataclasses.astuple(dataclasses.replace(row, created_at=None, updated_at=None))  # type: ignore[arg-type]


class TestSchedules:
    async def test_added_schedule_reads_back_as_a_frozen_row_with_its_topic(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        topic = await rows.topic()
        schedule = _schedule(topic)
        async with metadata.unit() as uow:
            await uow.schedules.add(schedule)
        async with metadata.unit(readonly=True) as uow:
            found = await uow.schedules.get(topic.project_id, "production", schedule.id)
            other_env = await uow.schedules.get(topic.project_id, "staging", schedule.id)
            count = await uow.schedules.count(topic.project_id, "production")
        assert found is not None and other_env is None and count == 1
        assert type(found[0]) is ScheduleRow and _fields(found[0]) == _fields(schedule)
        assert found[1] == topic.name

    async def test_pages_by_id_after_the_cursor(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        made = sorted((_schedule(topic) for _ in range(3)), key=lambda s: s.id)
        async with metadata.unit() as uow:
            for schedule in made:
                await uow.schedules.add(schedule)
        async with metadata.unit(readonly=True) as uow:
            first = await uow.schedules.page(topic.project_id, "production", None, 2)
            rest = await uow.schedules.page(topic.project_id, "production", first[-1][0].id, 2)
        assert [s.id for s, _ in first + rest] == [s.id for s in made]
        assert {name for _, name in first + rest} == {topic.name}

    async def test_pause_and_resume(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        schedule = _schedule(topic, next_run_ms=1_000)
        async with metadata.unit() as uow:
            await uow.schedules.add(schedule)
            assert await uow.schedules.claim(schedule.id, 1_000, 1_000, 5_000)
            await uow.schedules.pause(schedule.id, now())
        async with metadata.unit(readonly=True) as uow:
            paused = await uow.schedules.get(topic.project_id, "production", schedule.id)
            assert await uow.schedules.due(10_000, 10, topic.project_id) == []
        assert paused is not None and paused[0].status == "paused"
        async with metadata.unit() as uow:
            await uow.schedules.resume(schedule.id, 9_000, now())
        async with metadata.unit(readonly=True) as uow:
            resumed = await uow.schedules.get(topic.project_id, "production", schedule.id)
            due = await uow.schedules.due(10_000, 10, topic.project_id)
        assert resumed is not None
        assert (resumed[0].status, resumed[0].next_run_ms, resumed[0].claimed_until_ms) == (
            "active",
            9_000,
            0,
        )
        assert [(d.schedule_id, d.due_ms, d.topic_name) for d in due] == [(schedule.id, 9_000, topic.name)]

    async def test_claim_and_advance_are_fenced_on_the_due_time(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        schedule = _schedule(topic, next_run_ms=1_000)
        async with metadata.unit() as uow:
            await uow.schedules.add(schedule)
        async with metadata.unit() as uow:
            assert await uow.schedules.claim(schedule.id, 1_000, 1_000, 5_000)
            assert not await uow.schedules.claim(schedule.id, 1_000, 2_000, 6_000)  # held until 5 000
            assert await uow.schedules.due(2_000, 10, topic.project_id) == []
            assert await uow.schedules.advance(schedule.id, 1_000, 61_000)
            assert not await uow.schedules.advance(schedule.id, 1_000, 61_000)  # recorded already

    async def test_runs_newest_first_and_only_the_newest_kept(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        schedule = _schedule(topic)
        async with metadata.unit() as uow:
            await uow.schedules.add(schedule)
            for at in (1_000, 2_000, 3_000):
                await uow.schedules.add_run(
                    ScheduleRunRow(schedule.id, at, f"msg_{at}", 0, at // 1_000, now()), keep=2
                )
        async with metadata.unit(readonly=True) as uow:
            runs = await uow.schedules.runs(schedule.id, 10)
        assert all(type(r) is ScheduleRunRow for r in runs)
        assert [(r.at_ms, r.message_id, r.offset) for r in runs] == [
            (3_000, "msg_3000", 3),
            (2_000, "msg_2000", 2),
        ]
        async with metadata.unit() as uow:
            await uow.schedules.remove(schedule.id)
        async with metadata.unit(readonly=True) as uow:
            assert await uow.schedules.get(topic.project_id, "production", schedule.id) is None
            assert await uow.schedules.runs(schedule.id, 10) == []
