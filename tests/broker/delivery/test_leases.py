"""The pull hot paths cost a constant number of metadata statements, whatever the number of messages."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import pytest
from sqlalchemy import event

from app.broker import publishing, topics
from app.broker.delivery import leases, membership
from app.broker.topics import Scope


@contextmanager
def counting(store) -> Iterator[list[str]]:
    """The statements this task sends to ``store`` meanwhile; the app's background loops (schedules, push
    workers, the breaker's counts, connection sweeps) share the engine and are not counted."""
    statements: list[str] = []
    owner = asyncio.current_task()

    def record(conn, cursor, statement, parameters, context, executemany):
        try:
            current = asyncio.current_task()
        except RuntimeError:  # a thread of its own (never this test's calls)
            return
        if current is owner:
            statements.append(statement.split()[0])

    event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", record)


@pytest.fixture
async def setup(deployment):
    services = deployment.app.state.services
    project = await deployment.project()
    scope = Scope(project.project_id, "production")
    async with services.metadata.unit() as uow:
        await topics.create_topic(uow, services.log, scope, "hot", partitions=2)
    topic = await services.publisher.topics.resolve(scope, "hot")
    return services, scope, topic


async def publish(services, scope, count: int) -> None:
    batch = publishing.parse_batch({"messages": [{"data": i, "partition": i % 2} for i in range(count)]})
    await services.publisher.publish_batch(scope, "hot", batch)


class TestStatementsPerCall:
    async def test_poll_and_ack_do_not_grow_with_the_batch(self, deployment, setup):
        services, scope, topic = setup
        joined = await membership.join(services.metadata, services.log, topic, "g", start_from="earliest")
        member = membership.MemberRef(topic, "g", joined.member_id, joined.generation)
        costs = {}
        for count in (2, 400):
            await publish(services, scope, count)
            with counting(deployment.store) as polled:
                messages = await leases.poll(services.metadata, services.log, member, max_messages=1000)
            assert len(messages) == count
            ids = [orjson.loads(m)["id"] for m in messages]
            with counting(deployment.store) as acked:
                answer = await leases.ack(services.metadata, member, ids)
            assert answer.failed == [] and len(answer.ids) == count
            costs[count] = (len(polled), len(acked))
        assert costs[2] == costs[400]
        poll_cost, ack_cost = costs[2]
        assert 0 < poll_cost <= 12 and 0 < ack_cost <= 10, costs  # counted (this task's), and few
