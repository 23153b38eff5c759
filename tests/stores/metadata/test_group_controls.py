"""The group controls store (``protocol.GroupControlStore``) as the DLQ breaker uses it: the configs it
judges by, a locked group's counts as a frozen value, the counts written back; on SQLite and Postgres."""

from __future__ import annotations

from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.protocol import BreakerState
from tests.stores.metadata.conftest import Rows, now

CONFIG = {"maxRetries": 3, "retryDelay": "1s", "alertThreshold": 10}


class TestBreakerCounts:
    async def test_configs_of_the_groups_that_exist(self, metadata: SqlMetadataStore, rows: Rows):
        with_dlq = await rows.group(dead_letter=CONFIG)
        without = await rows.group()
        async with metadata.unit(readonly=True) as uow:
            found = await uow.group_controls.dead_letter_configs([with_dlq, without, "grp_gone"])
            assert await uow.group_controls.dead_letter_configs([]) == {}
        assert found == {with_dlq: CONFIG, without: None}

    async def test_a_locked_group_reads_as_a_frozen_state_and_its_counts_are_written_back(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        topic = await rows.topic()
        group_id = await rows.group(topic, name="counted")
        async with metadata.unit() as uow:
            state = await uow.group_controls.lock(group_id)
            assert state == BreakerState(group_id, "counted", topic.id, None, None, 0, 0, 0)
            await uow.group_controls.set_counts(group_id, 5_000, 7, 3)
            await uow.groups.set_pause(group_id, "dlq-breaker", None, now())
        async with metadata.unit() as uow:
            again = await uow.group_controls.lock(group_id)
            assert await uow.group_controls.lock("grp_gone") is None
            assert await uow.group_controls.topic_of(topic.id) == (topic.project_id, "production", topic.name)
        assert again == BreakerState(group_id, "counted", topic.id, "dlq-breaker", None, 5_000, 7, 3)
