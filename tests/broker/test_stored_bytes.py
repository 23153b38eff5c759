"""``StoredBytes``: a project's stored bytes measured from the log engine (its topics in every environment
and its groups' dead-letter logs), checked on publish without waiting, refreshed at most so often."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.broker import dead_letter_logs, groups, publishing, topics
from app.broker.errors import QuotaExceeded
from app.broker.stored_bytes import StoredBytes
from app.broker.topics import Scope
from app.stores.log.protocol import RecordIn, TopicLogConfig


async def _topic(services, scope: Scope, name: str, partitions: int = 2):
    async with services.metadata.unit() as uow:
        await topics.create_topic(uow, services.log, scope, name, partitions=partitions)
    return await services.publisher.topics.resolve(scope, name)


async def _publish(services, scope: Scope, name: str, count: int, size: int = 1000) -> None:
    body = {"messages": [{"data": "x" * size} for _ in range(count)]}
    await services.publisher.publish_batch(scope, name, publishing.parse_batch(body))


async def _eventually(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.02)


class TestMeasure:
    async def test_every_environment_and_the_dead_letter_logs_count(self, deployment):
        services = deployment.app.state.services
        project = await deployment.project()
        meter = StoredBytes(services.metadata, services.log, refresh_seconds=0.05)
        assert await meter.measure(project.project_id) == 0
        prod, staging = Scope(project.project_id, "production"), Scope(project.project_id, "staging")
        await _topic(services, prod, "a")
        await _topic(services, staging, "b", partitions=1)
        await _publish(services, prod, "a", 10)
        await _publish(services, staging, "b", 5)
        ref = await services.publisher.topics.resolve(prod, "a")
        sizes = [(await services.log.partition_info(ref.id, p)).size_bytes for p in range(2)]
        staged = await services.publisher.topics.resolve(staging, "b")
        sizes.append((await services.log.partition_info(staged.id, 0)).size_bytes)
        assert sum(sizes) >= 15_000
        assert await meter.measure(project.project_id) == sum(sizes)
        # A group's DLQ log is the project's too.
        async with services.metadata.unit() as uow:
            group = await groups.upsert_config(uow, ref, "g", dead_letter={})
            group_id = group.id
        dead_letters = dead_letter_logs.log_id(group_id)
        await services.log.create_topic(dead_letters, 1, TopicLogConfig())  # as ``dlq.py`` makes it
        await services.log.append(dead_letters, {0: [RecordIn(value=b"y" * 3000, timestamp_ms=0)]})
        dlq_size = (await services.log.partition_info(dead_letters, 0)).size_bytes
        assert await meter.measure(project.project_id) == sum(sizes) + dlq_size
        # Another project's bytes are not.
        other = await deployment.project()
        assert await meter.measure(other.project_id) == 0


class TestCheck:
    async def test_refused_at_the_quota_then_let_through_once_under_it(self, deployment):
        services = deployment.app.state.services
        project = await deployment.project()
        scope = Scope(project.project_id, "production")
        await _topic(services, scope, "t", partitions=1)
        meter = StoredBytes(services.metadata, services.log, refresh_seconds=0.05)
        meter.check(project.project_id, 5000)  # nothing measured yet: let through, measuring starts
        await _publish(services, scope, "t", 6)

        def refusal() -> QuotaExceeded:
            try:
                meter.check(project.project_id, 5000)
            except QuotaExceeded as exc:
                return exc
            raise AssertionError("not refused yet")

        error = await _eventually(refusal)
        assert error.details is not None
        [detail] = error.details
        assert detail["field"] == "storedBytes"
        assert detail["issue"] == f"limit 5000, used {meter.last(project.project_id)}"
        # Deleting the topic brings the project under its quota: let through within a refresh or two.
        await topics.delete_topic(services.metadata, services.log, scope, "t")

        def let_through() -> None:
            try:
                meter.check(project.project_id, 5000)
            except QuotaExceeded:
                raise AssertionError("still refused") from None

        await _eventually(let_through)
        await meter.close()

    async def test_measured_at_most_once_per_refresh(self, deployment):
        services = deployment.app.state.services
        project = await deployment.project()
        meter = StoredBytes(services.metadata, services.log, refresh_seconds=3600)
        calls = 0
        measure = meter.measure

        async def counted(project_id: str) -> int:
            nonlocal calls
            calls += 1
            return await measure(project_id)

        meter.measure = counted  # type: ignore[method-assign]
        for _ in range(1000):
            meter.check(project.project_id, 1 << 40)
        await asyncio.sleep(0.2)
        for _ in range(1000):
            meter.check(project.project_id, 1 << 40)
        await asyncio.sleep(0.1)
        assert calls == 1
        assert meter.last(project.project_id) == 0
        await meter.close()

    async def test_a_zero_quota_refuses_once_measured(self, deployment):
        services = deployment.app.state.services
        project = await deployment.project()
        meter = StoredBytes(services.metadata, services.log, refresh_seconds=3600)
        meter.check(project.project_id, 0)

        def measured() -> None:
            assert meter.last(project.project_id) == 0

        await _eventually(measured)
        with pytest.raises(QuotaExceeded):
            meter.check(project.project_id, 0)
        await meter.close()
