"""Delivery fixtures: topics on a real deployment (``tests/conftest.py::deployment``: SQLite, Postgres, and
Postgres + JetStream) and a push member driven as the WebSocket edge would drive it.

``make_topic`` creates a topic in a fresh project and publishes to it; ``PushConnection`` runs one
``PushMember`` (join, the delivery loop, leave) and records the frames it sends.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from app.broker import publishing, topics
from app.broker.delivery.push import PushMember
from app.broker.topics import Scope, TopicRef
from app.stores.log.protocol import LogEngine
from app.stores.metadata.group_repositories import GroupRepository
from app.stores.metadata.partition_repositories import PartitionRepository
from app.stores.metadata.protocol import MetadataStore, PartitionState

# How long a test may wait for a frame before it fails instead of hanging (not a speed requirement).
HANG_GUARD = 20.0


async def settle(times: int = 20) -> None:
    """Let the member's loops run a while (a bounded number of turns, for checks that nothing happens)."""
    for _ in range(times):
        await asyncio.sleep(0.005)


async def wait_until(condition: Callable[[], bool]) -> None:
    """Until ``condition()`` holds, failing (not hanging) after ``HANG_GUARD``."""
    async with asyncio.timeout(HANG_GUARD):
        while not condition():
            await asyncio.sleep(0.01)


@dataclass
class TopicUnderTest:
    """A topic of a fresh project on the deployment, with what tests need around it."""

    services: Any
    scope: Scope
    name: str
    ref: TopicRef

    async def publish(self, count: int, *, partition: int | None = None) -> None:
        """``count`` messages (data 0, 1, ...), all to ``partition`` or spread by the partitioner."""
        messages = [
            {"data": i} if partition is None else {"data": i, "partition": partition} for i in range(count)
        ]
        await self.services.publisher.publish_batch(
            self.scope, self.name, publishing.parse_batch({"messages": messages})
        )

    async def group_id(self, group: str) -> str:
        async with self.services.metadata.session(readonly=True) as session:
            row = await GroupRepository.from_session(session).get(self.ref.id, group)
        assert row is not None
        return str(row.id)

    async def partitions(self, group: str) -> list[PartitionState]:
        """The group's partitions as stored: owner, committed, position."""
        group_id = await self.group_id(group)
        async with self.services.metadata.session(readonly=True) as session:
            return await PartitionRepository.from_session(session).partitions(group_id)


MakeTopic = Callable[..., Awaitable[TopicUnderTest]]


@pytest.fixture
def make_topic(deployment: Any) -> MakeTopic:
    """Creates a topic (``partitions``, ``delivery``) in a fresh project."""

    async def make(*, partitions: int = 1, delivery: str = "exactly-once") -> TopicUnderTest:
        services = deployment.app.state.services
        project = await deployment.project()
        scope = Scope(project.project_id, "production")
        name = f"delivery-{secrets.token_hex(3)}"
        async with services.metadata.unit() as uow:
            await topics.create_topic(
                uow, services.log, scope, name, partitions=partitions, delivery=delivery
            )
        return TopicUnderTest(services, scope, name, await services.publisher.topics.resolve(scope, name))

    return make


class PushConnection:
    """A push member with the frames it sent, as the WebSocket edge would run it."""

    def __init__(
        self,
        services: Any,
        topic: TopicRef,
        group: str = "g",
        *,
        max_in_flight: int = 100,
        log: LogEngine | None = None,
        metadata: MetadataStore | None = None,
    ) -> None:
        self.frames: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.services = services
        self.member = PushMember(
            services.metadata if metadata is None else metadata,
            services.log if log is None else log,
            topic,
            group,
            start_from="earliest",
            max_in_flight=max_in_flight,
            send=self._send,
            render_error=lambda error: orjson.dumps({"type": "error", "code": error.code}),
            roster=services.push_members,
        )
        self.delivery: asyncio.Task[None] | None = None

    async def _send(self, frame: bytes) -> None:
        self.frames.append(orjson.loads(frame))
        self.arrived.set()

    async def start(self) -> None:
        await self._send(await self.member.join())
        self.delivery = asyncio.create_task(self.member.deliver())

    async def close(self) -> None:
        self.member.stop()
        if self.delivery is not None:
            await asyncio.gather(self.delivery, return_exceptions=True)
        await self.member.leave()

    async def wait_for(self, kind: str, count: int = 1) -> list[dict[str, Any]]:
        """The frames of ``kind`` once there are ``count`` of them."""
        async with asyncio.timeout(HANG_GUARD):
            while len(found := [f for f in self.frames if f["type"] == kind]) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return found

    def messages(self, since: int = 0) -> list[dict[str, Any]]:
        """Every message delivered so far (in frames from index ``since`` on), in the order sent
        (``message`` and ``messages`` frames)."""
        found: list[dict[str, Any]] = []
        for frame in self.frames[since:]:
            if frame["type"] == "message":
                found.append(frame)
            elif frame["type"] == "messages":
                found.extend(frame["messages"])
        return found

    async def delivered(self, count: int) -> list[str]:
        """The ids of the messages delivered, once there are at least ``count``."""
        async with asyncio.timeout(HANG_GUARD):
            while len(self.messages()) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return [m["id"] for m in self.messages()]

    async def ack(self, ids: list[str]) -> None:
        await self.member.handle(orjson.dumps({"type": "ack", "ids": ids}))

    async def committed(self) -> int | None:
        """The committed offset of the group's only partition."""
        async with self.services.metadata.session(readonly=True) as session:
            (state,) = await PartitionRepository.from_session(session).partitions(self.member.group_id)
        return state.committed


@pytest.fixture
async def push_connections() -> AsyncIterator[Callable[..., Awaitable[PushConnection]]]:
    """Starts push connections (``PushConnection`` arguments); closes the ones still open at the end."""
    opened: list[PushConnection] = []

    async def connect(topic: TopicUnderTest, group: str = "g", **kwargs: Any) -> PushConnection:
        connection = PushConnection(topic.services, topic.ref, group, **kwargs)
        await connection.start()
        opened.append(connection)
        return connection

    yield connect
    for connection in reversed(opened):
        if not connection.member.stopped:
            await connection.close()
