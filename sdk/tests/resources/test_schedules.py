"""``client.schedules`` against a real server, sync and async: create, list, get, pause, resume, runs
(published by the server's runner), delete, and the errors."""

from __future__ import annotations

import asyncio
import time

import pytest
from sdk_support import unique

import queuecore

pytestmark = pytest.mark.integration


def wait_runs(client: queuecore.QueueCore, schedule_id: str, count: int) -> list:
    deadline = time.monotonic() + 20
    while True:
        runs = client.schedules.runs(schedule_id)
        if len(runs) >= count or time.monotonic() > deadline:
            return runs
        time.sleep(0.2)


class TestSync:
    def test_the_whole_life_of_a_schedule(self, client, topic):
        schedule = client.schedules.create(topic, every="1s", data={"tick": 1}, headers={"team": "ops"})
        assert schedule.id.startswith("sch_")
        assert (schedule.topic, schedule.every, schedule.cron, schedule.timezone, schedule.status) == (
            topic,
            "1s",
            None,
            "UTC",
            "active",
        )
        assert schedule.next_run_at is not None and schedule.next_run_at.tzinfo is not None
        assert client.schedules.get(schedule.id).model_dump() == schedule.model_dump()
        assert schedule.id in [s.id for s in client.schedules.list()]

        runs = wait_runs(client, schedule.id, 2)
        assert len(runs) >= 2 and runs[0].at > runs[1].at
        message = client.messages.get(topic, runs[0].message_id)
        assert message.headers["queuecore-schedule"] == schedule.id
        assert message.data == {"tick": 1} and message.headers["team"] == "ops"
        assert (message.partition, message.offset) == (runs[0].partition, runs[0].offset)

        paused = client.schedules.pause(schedule.id)
        assert (paused.status, paused.next_run_at) == ("paused", None)
        assert client.schedules.resume(schedule.id).status == "active"
        client.schedules.delete(schedule.id)
        with pytest.raises(queuecore.NotFoundError) as info:
            client.schedules.get(schedule.id)
        assert info.value.code == "NOT_FOUND"

    def test_cron_in_a_zone(self, client, topic):
        schedule = client.schedules.create(topic, cron="0 9 * * *", timezone="Asia/Tokyo", data=None)
        assert (schedule.cron, schedule.timezone, schedule.data) == ("0 9 * * *", "Asia/Tokyo", None)
        assert schedule.next_run_at is not None and schedule.next_run_at.hour == 0  # 09:00 JST is 00:00 UTC
        client.schedules.delete(schedule.id)

    def test_refusals(self, client, topic):
        with pytest.raises(queuecore.BadRequestError) as info:
            client.schedules.create(topic, cron="not cron", data=1)
        assert info.value.details[0]["field"] == "cron"
        with pytest.raises(queuecore.NotFoundError) as missing:
            client.schedules.create(unique("none"), every="1m", data=1)
        assert missing.value.code == "TOPIC_NOT_FOUND"
        with pytest.raises(TypeError, match="data"):
            client.schedules.create(topic, every="1m")


class TestAsync:
    async def test_create_list_pause_runs_delete(self, async_client, topic):
        schedule = await async_client.schedules.create(topic, every="1h", data=[1, 2])
        listed = [s.id async for s in async_client.schedules.list(limit=1)]
        assert schedule.id in listed
        assert (await async_client.schedules.pause(schedule.id)).status == "paused"
        assert (await async_client.schedules.resume(schedule.id)).status == "active"
        assert await async_client.schedules.runs(schedule.id) == []
        await async_client.schedules.delete(schedule.id)
        with pytest.raises(queuecore.NotFoundError):
            await async_client.schedules.get(schedule.id)
        await asyncio.sleep(0)
