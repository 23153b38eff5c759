"""A group's flow control across two API processes (real ``queuecore-server`` processes sharing Postgres,
Redis and the session's JetStream cluster): ``maxInFlight`` bounds WebSocket members connected to different
nodes, and a WebSocket member with a pull member on the other node; a change made on one node reaches a
member on the other; ``rate`` is one bucket for the group whichever node delivers.

Client-side accounting: a member's unacked count is what it received minus what it *sent* acks for, never
more than the server's own count, so a client that sees more than ``maxInFlight`` proves an excess.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.ws_client import Api, Consumer
from tests.fixtures.server import ServerProcess, free_port

HANG_GUARD = 30.0


@pytest.fixture(scope="module")
def nodes(jetstream_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Api]]:
    """The session's scale-out server and a second process on the same stores."""
    data_dir = tmp_path_factory.mktemp("flow-second-node")
    second = ServerProcess(
        env=jetstream_server.env,
        port=free_port(),
        data_dir=data_dir,
        keys=jetstream_server.keys,
        log_path=data_dir / "server.log",
    )
    second.start()
    try:
        yield [Api(jetstream_server), Api(second)]
    finally:
        second.stop()


class Counted:
    """A WebSocket member and its unacked messages (received, minus acks sent)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.received: list[str] = []
        self.acked: set[str] = set()

    @property
    def unacked(self) -> int:
        return len(self.received) - len(self.acked)

    async def read(self, seconds: float) -> None:
        self.received += [m["id"] for m in await self.consumer.quiet(seconds)]

    async def ack_all(self) -> None:
        todo = [i for i in self.received if i not in self.acked]
        if todo:
            self.acked.update(todo)  # counted when sent (see the module docstring)
            await self.consumer.ws.send(json.dumps({"type": "ack", "ids": todo}))


async def pull(api: Api, topic: str, member: dict[str, Any], max_messages: int = 10) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=api.server.url, headers=api.headers, timeout=30) as http:
        r = await http.post(
            f"/v1/topics/{topic}/groups/g/poll",
            json={**member, "maxMessages": max_messages, "waitSeconds": 0},
        )
        if r.status_code == 409:  # a rebalance: join again under the same id
            joined = await http.post(
                f"/v1/topics/{topic}/groups/g/members", json={"memberId": member["memberId"]}
            )
            member["generationId"] = joined.json()["generationId"]
            return []
        assert r.status_code == 200, r.text
        return list(r.json()["messages"])


def join(api: Api, topic: str) -> dict[str, Any]:
    joined = api.ok("POST", f"/v1/topics/{topic}/groups/g/members", {"startFrom": "earliest"})
    return {"memberId": joined["memberId"], "generationId": joined["generationId"]}


class TestMaxInFlightAcrossNodes:
    async def test_websocket_members_on_two_nodes_never_hold_more_together(self, nodes: list[Api]):
        a, b = nodes
        topic = a.topic(partitions=2, maxInFlight=4)  # type: ignore[arg-type]
        a.publish(topic, 30)
        one = Counted(await Consumer.open(a, topic, maxInFlight=100))
        two = Counted(await Consumer.open(b, topic, maxInFlight=100))
        peak = 0
        deadline = time.monotonic() + HANG_GUARD * 2
        try:
            while len(set(one.received) | set(two.received)) < 30:
                if time.monotonic() > deadline:  # a hang guard, not a speed claim
                    raise TimeoutError((len(one.received), len(two.received)))
                await asyncio.gather(one.read(0.2), two.read(0.2))
                peak = max(peak, one.unacked + two.unacked)
                await one.ack_all()
                await two.ack_all()
        finally:
            await one.consumer.close()
            await two.consumer.close()
        assert 1 <= peak <= 4
        assert len(set(one.received) | set(two.received)) == 30

    async def test_a_pull_member_and_a_websocket_member_on_another_node_share_it(self, nodes: list[Api]):
        a, b = nodes
        topic = a.topic(partitions=2, maxInFlight=3)  # type: ignore[arg-type]
        a.publish(topic, 20)
        push = Counted(await Consumer.open(b, topic, maxInFlight=100))
        member = join(a, topic)
        held: list[str] = []
        peak = 0
        try:
            deadline = time.monotonic() + HANG_GUARD
            while not held or len(set(push.received)) < 3:
                if time.monotonic() > deadline:  # a hang guard, not a speed claim
                    raise TimeoutError
                await push.read(0.2)
                held += [m["id"] for m in await pull(a, topic, member)]
                peak = max(peak, push.unacked + len(held))
                await push.ack_all()
        finally:
            await push.consumer.close()
        assert held and peak <= 3

    async def test_a_change_on_one_node_reaches_a_member_on_the_other(self, nodes: list[Api]):
        a, b = nodes
        topic = a.topic(partitions=1, maxInFlight=2)  # type: ignore[arg-type]
        a.publish(topic, 10)
        member = Counted(await Consumer.open(b, topic, maxInFlight=100))
        try:
            await member.read(1.0)
            assert member.unacked == 2
            a.ok("PUT", f"/v1/topics/{topic}/groups/g", {"maxInFlight": 6})
            deadline = time.monotonic() + HANG_GUARD
            while member.unacked < 6:
                if time.monotonic() > deadline:  # a hang guard, not a speed claim
                    raise TimeoutError
                await member.read(0.2)
            assert member.unacked == 6
        finally:
            await member.consumer.close()


class TestRateAcrossNodes:
    async def test_pull_members_on_two_nodes_take_from_one_bucket(self, nodes: list[Api]):
        a, b = nodes
        topic = a.topic(partitions=2, rate=0.001)  # type: ignore[arg-type]
        for p in (0, 1):
            a.ok(
                "POST",
                f"/v1/topics/{topic}/messages/batch",
                {"messages": [{"data": i, "partition": p} for i in range(3)]},
            )
        one, two = join(a, topic), join(b, topic)
        got = []
        for _ in range(3):
            got += await pull(a, topic, one) + await pull(b, topic, two)
        assert len(got) == 1

    async def test_filter_set_on_one_node_holds_on_the_other(self, nodes: list[Api]):
        a, b = nodes
        topic = a.topic(partitions=1, filter='headers.kind = "keep"')  # type: ignore[arg-type]
        a.ok(
            "POST",
            f"/v1/topics/{topic}/messages/batch",
            {
                "messages": [
                    {"data": i, "headers": {"kind": "keep" if i % 3 == 0 else "drop"}} for i in range(9)
                ]
            },
        )
        member = Counted(await Consumer.open(b, topic, maxInFlight=100))
        try:
            deadline = time.monotonic() + HANG_GUARD
            while len(member.received) < 3:
                if time.monotonic() > deadline:  # a hang guard, not a speed claim
                    raise TimeoutError
                await member.read(0.2)
            await member.read(0.5)
            assert len(member.received) == 3
        finally:
            await member.consumer.close()
