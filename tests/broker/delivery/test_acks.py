"""A push member's ack settlement (``app/broker/delivery/acks.py``), driven frame by frame on a real
deployment: when an ``acked`` answers relative to its checkpoint, how frames share a checkpoint, and how
ids that are not in-memory leases take the lease-row path. (The wire contract is ``tests/api/test_ws.py``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from app.kit.clock import now_ms
from tests.broker.delivery.conftest import MakeTopic
from tests.broker.delivery.conftest import PushConnection as Connection


@pytest.fixture(params=["exactly-once", "at-least-once"])
async def connection(request, make_topic: MakeTopic) -> AsyncIterator[Connection]:
    topic = await make_topic(partitions=1, delivery=request.param)
    await topic.publish(6)
    conn = Connection(topic.services, topic.ref)
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
    held = connection.member._holdings.in_flight
    assert held[ids[0]] - now_ms() > 500_000 and held[ids[2]] - now_ms() < 60_000  # the group's 30 s
    await connection.member.handle(orjson.dumps({"type": "extend", "ids": ids[:2], "seconds": 0}))
    (error,) = await connection.wait_for("error")
    assert error["code"] == "INVALID_REQUEST"
