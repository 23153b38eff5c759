"""A push member's ack settlement (``app/broker/delivery/acks.py``), driven frame by frame on a real
deployment: when an ``acked`` answers relative to its checkpoint, how frames share a checkpoint, and how
ids that are not in-memory leases take the lease-row path. (The wire contract is ``tests/api/test_ws.py``.)
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import orjson
import pytest

from app.broker import publishing, topics
from app.broker.delivery.push import PushMember
from app.broker.topics import Scope
from app.kit.clock import now_ms
from app.stores.metadata.partition_repositories import PartitionRepository


class Connection:
    """A push member with the frames it sent, as the WebSocket edge would run it."""

    def __init__(self, services: Any, topic: Any) -> None:
        self.frames: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.services = services
        self.member = PushMember(
            services.metadata,
            services.log,
            topic,
            "g",
            start_from="earliest",
            max_in_flight=100,
            send=self._send,
            render_error=lambda error: orjson.dumps({"type": "error", "code": error.code}),
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
        async with asyncio.timeout(20):
            while len(found := [f for f in self.frames if f["type"] == kind]) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return found

    async def delivered(self, count: int) -> list[str]:
        ids: list[str] = []
        async with asyncio.timeout(20):
            while len(ids) < count:
                ids = []
                for frame in self.frames:
                    if frame["type"] == "message":
                        ids.append(frame["id"])
                    elif frame["type"] == "messages":
                        ids.extend(m["id"] for m in frame["messages"])
                if len(ids) < count:
                    self.arrived.clear()
                    await self.arrived.wait()
        return ids

    async def committed(self) -> int | None:
        async with self.services.metadata.session(readonly=True) as session:
            (state,) = await PartitionRepository.from_session(session).partitions(self.member.group_id)
        return state.committed


@pytest.fixture(params=["exactly-once", "at-least-once"])
async def connection(request, deployment):
    services = deployment.app.state.services
    project = await deployment.project()
    scope = Scope(project.project_id, "production")
    name = f"acks-{secrets.token_hex(3)}"
    async with services.metadata.session() as session:
        await topics.create_topic(session, services.log, scope, name, partitions=1, delivery=request.param)
    batch = publishing.parse_batch({"messages": [{"data": i} for i in range(6)]})
    await services.publisher.publish_batch(scope, name, batch)
    conn = Connection(services, await services.publisher.topics.resolve(scope, name))
    await conn.start()
    yield conn
    await conn.close()


async def test_an_acked_answers_for_exactly_the_ids_it_names(connection: Connection):
    ids = await connection.delivered(6)
    await connection.member.handle(orjson.dumps({"type": "ack", "ids": [*ids[:3], "nope"]}))
    (acked,) = await connection.wait_for("acked")
    assert acked["ids"] == ids[:3]
    assert acked["failed"] == [
        {"id": "nope", "code": "INVALID_REQUEST"}
    ]  # not a lease: the row path's answer
    assert connection.member.in_flight == 3


def spy_on_writes(connection: Connection) -> list[tuple[int, int]]:
    """Each checkpoint write, as (partitions written, ``acked`` frames sent before it)."""
    writer = connection.services.metadata.checkpoint_writer
    writes: list[tuple[int, int]] = []
    write = writer.write

    async def recorded(group_id: str, member_id: str, checkpoints: Any) -> set[int]:
        writes.append((len(checkpoints), sum(f["type"] == "acked" for f in connection.frames)))
        return await write(group_id, member_id, checkpoints)

    writer.write = recorded
    return writes


@pytest.mark.parametrize("connection", ["exactly-once"], indirect=True)
async def test_exactly_once_frames_share_a_checkpoint_and_are_answered_after_it(connection: Connection):
    ids = await connection.delivered(6)
    writes = spy_on_writes(connection)
    try:
        # Three frames read before the settling task runs: they share one checkpoint, each answered.
        for chunk in (ids[0:2], ids[2:4], ids[4:6]):
            await connection.member.handle(orjson.dumps({"type": "ack", "ids": chunk}))
        answers = await connection.wait_for("acked", 3)
    finally:
        del connection.services.metadata.checkpoint_writer.write
    assert [a["ids"] for a in answers] == [ids[0:2], ids[2:4], ids[4:6]]
    assert all(a["failed"] == [] for a in answers)
    assert writes == [(1, 0)]  # one write, before any answer
    assert await connection.committed() == 6


@pytest.mark.parametrize("connection", ["at-least-once"], indirect=True)
async def test_at_least_once_acked_answers_at_once_and_the_checkpoint_follows(connection: Connection):
    ids = await connection.delivered(6)
    writes = spy_on_writes(connection)
    try:
        await connection.member.handle(orjson.dumps({"type": "ack", "ids": ids}))
        (acked,) = [f for f in connection.frames if f["type"] == "acked"]  # answered within ``handle``
        assert acked["ids"] == ids
        async with asyncio.timeout(10):
            while await connection.committed() != 6:  # written within LAZY_ACK_SECONDS
                await asyncio.sleep(0.02)
    finally:
        del connection.services.metadata.checkpoint_writer.write
    assert writes[0] == (1, 1)  # written after the answer


async def test_a_nack_turns_the_in_memory_lease_into_a_row_redelivered(connection: Connection):
    ids = await connection.delivered(6)
    await connection.member.handle(orjson.dumps({"type": "nack", "id": ids[1]}))
    (acked,) = await connection.wait_for("acked")
    assert acked == {"type": "acked", "ids": [ids[1]], "failed": []}
    redelivered = await connection.delivered(7)  # the beat leases the row again: attempt 2
    assert redelivered[6] == ids[1]
    again = [f for f in connection.frames if f["type"] in ("message", "messages")][-1]
    message = again if again["type"] == "message" else again["messages"][0]
    assert message["attempt"] == 2


async def test_extend_moves_an_in_memory_deadline_and_refuses_bad_seconds(connection: Connection):
    ids = await connection.delivered(6)
    await connection.member.handle(orjson.dumps({"type": "extend", "ids": ids[:2], "seconds": 600}))
    (acked,) = await connection.wait_for("acked")
    assert acked["ids"] == ids[:2] and acked["failed"] == []
    held = connection.member._in_flight
    assert held[ids[0]] - now_ms() > 500_000 and held[ids[2]] - now_ms() < 60_000  # the group's 30 s
    await connection.member.handle(orjson.dumps({"type": "extend", "ids": ids[:2], "seconds": 0}))
    (error,) = await connection.wait_for("error")
    assert error["code"] == "INVALID_REQUEST"
