"""The schedule runner against the real stores and engines (SQLite, Postgres, Postgres + JetStream), its
clock set by the test: racing runners publish each due run once, a run published by a node that died
before recording it is recorded with that same message, a dead node's claim holds the run only until it
runs out, and the catch-up rule (catch up a short stall in order; one late run after a long outage).

Schedules here are made with periods the app's own runner (on the real clock) does not reach during a
test, or deleted before it could."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from app.broker.publishing import OutgoingMessage
from app.broker.schedules import service
from app.broker.schedules.runner import ScheduleRunner, idempotency_key
from app.broker.topics import Scope


def stamp_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


class Clock:
    def __init__(self, at: int) -> None:
        self.at = at

    def __call__(self) -> int:
        return self.at


def runner(deployment, tenant, clock: Clock, **kwargs) -> ScheduleRunner:
    """A runner on the test's clock, kept to the test's project (the deployment is shared)."""
    return ScheduleRunner(
        deployment.store,
        deployment.app.state.services.publisher,
        clock=clock,
        project_id=tenant.project_id,
        **kwargs,
    )


async def setup(client, prod, every: str, name: str = "ticks") -> dict:
    r = await client.post("/v1/topics", json={"name": name, "partitions": 2}, headers=prod)
    assert r.status_code == 201, r.text
    r = await client.post(
        "/v1/schedules", json={"topic": name, "every": every, "data": {"v": 1}}, headers=prod
    )
    assert r.status_code == 201, r.text
    return r.json()


async def runs(client, prod, schedule_id: str) -> list[dict]:
    r = await client.get(f"/v1/schedules/{schedule_id}/runs", headers=prod)
    assert r.status_code == 200, r.text
    return r.json()["data"]


async def messages(client, prod, name: str = "ticks") -> list[dict]:
    out = []
    for partition in (0, 1):
        r = await client.get(f"/v1/topics/{name}/partitions/{partition}/messages?fromOffset=0", headers=prod)
        assert r.status_code == 200, r.text
        out += r.json()["data"]
    return out


class TestExactlyOnce:
    async def test_racing_runners_publish_each_due_run_once(self, client, prod, deployment, tenant):
        schedule = await setup(client, prod, "1d")
        due = stamp_ms(schedule["nextRunAt"])
        clock = Clock(due)
        racers = [runner(deployment, tenant, clock) for _ in range(4)]
        for k in range(3):
            clock.at = due + k * 86_400_000
            fired = await asyncio.gather(*(r.run_once() for r in racers))
            assert sum(fired) == 1
        recorded = await runs(client, prod, schedule["id"])
        assert [stamp_ms(r["at"]) for r in recorded] == [due + k * 86_400_000 for k in (2, 1, 0)]
        published = await messages(client, prod)
        assert sorted(m["headers"]["queuecore-scheduled-at"] for m in published) == sorted(
            r["at"] for r in recorded
        )
        assert {m["id"] for m in published} == {r["messageId"] for r in recorded}

    async def test_a_run_published_but_not_recorded_is_recorded_with_that_message(
        self, client, prod, deployment, tenant
    ):
        schedule = await setup(client, prod, "1d")
        due = stamp_ms(schedule["nextRunAt"])
        publisher = deployment.app.state.services.publisher
        # What a node that died after its publish left behind: the message, no run, its claim.
        headers = service.message_headers(schedule["id"], due, None)
        topic, placed, _ = await publisher.publish(
            Scope(tenant.project_id, "production"),
            "ticks",
            OutgoingMessage(b'{"v":1}', None, headers, None, None),
            idempotency_key(schedule["id"], due),
        )
        async with deployment.store.unit() as uow:
            assert await uow.schedules.claim(schedule["id"], due, due, due + 5_000)
        clock = Clock(due + 1_000)
        assert await runner(deployment, tenant, clock).run_once() == 0  # the dead node's claim still holds
        clock.at = due + 5_000
        assert await runner(deployment, tenant, clock).run_once() == 1
        recorded = await runs(client, prod, schedule["id"])
        assert [(r["partition"], r["offset"]) for r in recorded] == [(placed.partition, placed.offset)]
        assert recorded[0]["messageId"] == publisher.message_id(topic, placed.partition, placed.offset)
        assert len(await messages(client, prod)) == 1


class TestCatchUp:
    async def test_a_short_stall_catches_up_every_due_time_in_order(self, client, prod, deployment, tenant):
        schedule = await setup(client, prod, "10s")
        due = stamp_ms(schedule["nextRunAt"])
        try:
            clock = Clock(due + 25_000)  # three due times passed, within the 30 s catch-up window
            stalled = runner(deployment, tenant, clock, catch_up_seconds=30)
            assert [await stalled.run_once() for _ in range(4)] == [1, 1, 1, 0]
            recorded = await runs(client, prod, schedule["id"])
            assert [stamp_ms(r["at"]) for r in recorded] == [due + 20_000, due + 10_000, due]
        finally:
            await client.delete(f"/v1/schedules/{schedule['id']}", headers=prod)

    async def test_a_long_outage_ends_in_one_late_run(self, client, prod, deployment, tenant):
        schedule = await setup(client, prod, "1h")
        due = stamp_ms(schedule["nextRunAt"])
        clock = Clock(due + 5 * 3_600_000 + 60_000)  # five more due times missed, far past the window
        back = runner(deployment, tenant, clock, catch_up_seconds=30)
        assert [await back.run_once() for _ in range(2)] == [1, 0]
        recorded = await runs(client, prod, schedule["id"])
        assert [stamp_ms(r["at"]) for r in recorded] == [due]
        detail = (await client.get(f"/v1/schedules/{schedule['id']}", headers=prod)).json()
        assert stamp_ms(detail["nextRunAt"]) == due + 6 * 3_600_000  # the first due time after now


async def until(check, what: str, seconds: float = 30) -> None:
    """Until ``await check()`` holds; failing, not hanging, after ``seconds`` (a hang guard)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"{what} did not come within {seconds} s")
        await asyncio.sleep(0.05)


class GatedPublisher:
    """The deployment's publisher, except that publishes to one topic wait for ``gate``: a publish stuck as
    one is behind a partition electing its leader, or a key a dead node held."""

    def __init__(self, publisher, topic: str) -> None:
        self._publisher = publisher
        self.topic = topic
        self.gate = asyncio.Event()
        self.waiting = 0

    async def publish(self, scope, topic_name, message, idempotency_key=None):
        if topic_name == self.topic:
            self.waiting += 1
            await self.gate.wait()
        return await self._publisher.publish(scope, topic_name, message, idempotency_key)

    def message_id(self, topic, partition: int, offset: int) -> str:
        return self._publisher.message_id(topic, partition, offset)


class TestAStuckPublish:
    async def test_holds_up_its_own_schedule_only(self, client, prod, deployment, tenant):
        stuck = await setup(client, prod, "1d", name="stuck")
        ticks = await setup(client, prod, "1d")
        due = max(stamp_ms(stuck["nextRunAt"]), stamp_ms(ticks["nextRunAt"]))
        clock = Clock(due)
        gated = GatedPublisher(deployment.app.state.services.publisher, "stuck")
        stalled = ScheduleRunner(
            deployment.store, gated, clock=clock, project_id=tenant.project_id, claim_seconds=5
        )
        try:
            assert await stalled.run_once(wait=False) == 2

            async def ticked_while_stuck_waits() -> bool:
                # Either task may get there first: the tick recorded, and the stuck one at the gate.
                return gated.waiting == 1 and bool(await runs(client, prod, ticks["id"]))

            await until(ticked_while_stuck_waits, "the other schedule's run")
            assert await runs(client, prod, stuck["id"]) == []
            # Its claim runs out: the run is due again, and left to the task still firing it.
            clock.at = due + 6_000
            assert await stalled.run_once(wait=False) == 0
            gated.gate.set()

            async def stuck_ran() -> bool:
                return bool(await runs(client, prod, stuck["id"]))

            await until(stuck_ran, "the stuck schedule's run, once let through")
            assert gated.waiting == 1
            assert [stamp_ms(r["at"]) for r in await runs(client, prod, stuck["id"])] == [
                stamp_ms(stuck["nextRunAt"])
            ]
        finally:
            await stalled.close()
            for schedule in (stuck, ticks):
                await client.delete(f"/v1/schedules/{schedule['id']}", headers=prod)
