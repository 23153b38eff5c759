"""Flow control and filters for WebSocket push members (``app/broker/delivery/flow.py`` through ``push.py``)
on every deployment: the group's ``maxInFlight`` bounds two push members together, and a push member with
a pull member; a live change reaches a connected member; the filter and the rate hold for push deliveries.

Every check of a bound samples the members' unacked messages at every turn of the event loop while they
run, so an excess at any moment fails the test (no timing assertion: rates are so low that no token refills
during a test).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from app.broker import groups, publishing
from app.broker.delivery import flow, leases, membership
from app.broker.delivery.membership import MemberRef
from app.stores.limits.protocol import Taken
from app.stores.limits.tokens import MemoryTokenBuckets
from tests.broker.delivery.conftest import HANG_GUARD, MakeTopic, PushConnection, TopicUnderTest

Connect = Callable[..., Awaitable[PushConnection]]


async def configure(topic: TopicUnderTest, **config: Any) -> None:
    async with topic.services.metadata.unit() as uow:
        await groups.upsert_config(uow, topic.ref, "g", **config)


async def publish(topic: TopicUnderTest, items: list[dict[str, Any]], partition: int = 0) -> None:
    body = {"messages": [{"data": i, "partition": partition, **item} for i, item in enumerate(items)]}
    await topic.services.publisher.publish_batch(topic.scope, topic.name, publishing.parse_batch(body))


class Peak:
    """The most unacked messages ever seen at once, sampled at every turn of the event loop."""

    def __init__(self, held: Callable[[], int]) -> None:
        self.held = held
        self.peak = 0
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            self.peak = max(self.peak, self.held())
            await asyncio.sleep(0)

    def stop(self) -> int:
        self._task.cancel()
        return self.peak


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(HANG_GUARD):
        while not condition():
            await asyncio.sleep(0.01)


async def ack_all(connection: PushConnection) -> None:
    """Ack what it holds now (the ids delivered and not acked yet)."""
    held = [m["id"] for m in connection.messages() if m["id"] not in connection.acked_ids]
    if held:
        connection.acked_ids.update(held)
        await connection.ack(held)


def describe(connection: PushConnection) -> dict[str, Any]:
    """What a failed bound needs to be read: whether the push member was still delivering, and why not."""
    delivery = connection.delivery
    return {
        "delivering": delivery is not None and not delivery.done(),
        "ended_with": repr(delivery.exception()) if delivery is not None and delivery.done() else None,
        "error_frames": [f for f in connection.frames if f["type"] == "error"],
        "in_flight": connection.member.in_flight,
    }


class TestMaxInFlight:
    async def test_two_push_members_together_never_hold_more_than_the_group_allows(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=2)
        await configure(topic, max_in_flight=4)
        for p in (0, 1):
            await publish(topic, [{} for _ in range(15)], partition=p)
        one = await push_connections(topic, max_in_flight=100)
        two = await push_connections(topic, max_in_flight=100)
        for c in (one, two):
            c.acked_ids = set()  # type: ignore[attr-defined]
        peak = Peak(lambda: one.member.in_flight + two.member.in_flight)
        try:
            async with asyncio.timeout(HANG_GUARD * 2):
                while len({m["id"] for c in (one, two) for m in c.messages()}) < 30:
                    await asyncio.sleep(0.05)
                    for c in (one, two):
                        await ack_all(c)
        finally:
            seen = peak.stop()
        assert 1 <= seen <= 4
        ids = [m["id"] for c in (one, two) for m in c.messages()]
        assert len(set(ids)) == 30

    async def test_a_push_member_and_a_pull_member_share_it(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=2)
        await configure(topic, max_in_flight=3)
        for p in (0, 1):
            await publish(topic, [{} for _ in range(10)], partition=p)
        services = topic.services
        push = await push_connections(topic, max_in_flight=100)
        await until(lambda: push.member.in_flight == 3)  # alone: all of it
        pulled = await membership.join(services.metadata, services.log, topic.ref, "g", start_from="earliest")
        pull = MemberRef(topic.ref, "g", pulled.member_id, pulled.generation)
        peak = Peak(lambda: push.member.in_flight + len(held))
        held: list[str] = []
        try:
            # The pull member gets nothing while the push member's claim covers the group's 3.
            got = await leases.poll_once(services.metadata, services.log, pull, 10)
            assert got.messages == []
            push.acked_ids = set()  # type: ignore[attr-defined]
            async with asyncio.timeout(HANG_GUARD * 2):
                while not held:
                    await ack_all(push)
                    try:
                        got = await leases.poll_once(services.metadata, services.log, pull, 10)
                    except Exception:  # noqa: BLE001 - a rebalance: the pull member joins again
                        pulled = await membership.join(
                            services.metadata, services.log, topic.ref, "g", member_id=pull.member_id
                        )
                        pull = MemberRef(topic.ref, "g", pulled.member_id, pulled.generation)
                        continue
                    held.extend(got.ids)
                    await asyncio.sleep(0.05)
            # Both deliver now; together never more than 3.
            for _ in range(10):
                await ack_all(push)
                await asyncio.sleep(0.05)
        finally:
            seen = peak.stop()
        # At most its fair share (2 of 3) while the push member is live; the message says if it was not.
        assert 1 <= len(held) <= 2 and seen <= 3, describe(push)

    async def test_a_live_change_reaches_a_connected_member(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        await configure(topic, max_in_flight=2)
        await publish(topic, [{} for _ in range(10)])
        connection = await push_connections(topic, max_in_flight=100)
        await connection.delivered(2)
        await asyncio.sleep(0.2)
        assert connection.member.in_flight == 2
        await configure(topic, max_in_flight=5)
        await connection.delivered(5)  # within a beat or two
        assert connection.member.in_flight == 5
        await configure(topic, max_in_flight=None)
        await connection.delivered(10)


class TestFilter:
    async def test_only_matching_messages_are_pushed_and_current_moves_past_the_others(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        await configure(topic, filter='headers.type = "a" OR key = "k"')
        items = [
            {"headers": {"type": "a"}},
            {"headers": {"type": "b"}},
            {"key": "k"},
            {"key": "x"},
            {"headers": {"type": "a"}},
            {"headers": {"type": "b"}},
        ]
        await publish(topic, items)
        connection = await push_connections(topic, max_in_flight=100)
        ids = await connection.delivered(3)
        await asyncio.sleep(0.3)
        assert [m["offset"] for m in connection.messages()] == [0, 2, 4]
        await connection.ack(ids)
        await until_committed(connection, 6)

    async def test_a_filter_set_while_connected_applies_at_the_next_beat(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        connection = await push_connections(topic, max_in_flight=100)
        await publish(topic, [{"headers": {"type": "a"}}])
        await connection.delivered(1)
        await configure(topic, filter='headers.type = "b"')
        await asyncio.sleep(1.2)  # past two beats: the member has the new config
        await publish(topic, [{"headers": {"type": "a"}}, {"headers": {"type": "b"}}])
        await connection.delivered(2)
        await asyncio.sleep(0.3)
        assert [m["offset"] for m in connection.messages()] == [0, 2]


async def until_committed(connection: PushConnection, offset: int) -> None:
    async with asyncio.timeout(HANG_GUARD):
        while await connection.committed() != offset:
            await asyncio.sleep(0.05)


class TestRate:
    async def test_push_deliveries_take_the_groups_tokens(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        await configure(topic, rate=0.001)  # a burst of 1, then one token per 1000 s
        await publish(topic, [{} for _ in range(5)])
        connection = await push_connections(topic, max_in_flight=100)
        await connection.delivered(1)
        await asyncio.sleep(0.6)
        assert len(connection.messages()) == 1
        await configure(topic, rate=1_000_000)
        await connection.delivered(5)
        assert [m["offset"] for m in connection.messages()] == [0, 1, 2, 3, 4]

    async def test_tokens_come_from_the_buckets_the_lifespan_gave(self, monkeypatch: pytest.MonkeyPatch):
        """The broker holds only the limits protocol: the app's lifespan hands it the buckets."""
        monkeypatch.setattr(flow, "_buckets", None)
        assert await flow.take("grp_x", None, 3) == Taken(3, math.inf)  # no rate: no buckets asked
        with pytest.raises(RuntimeError, match="use_token_buckets"):
            await flow.take("grp_x", 1.0, 3)
        flow.use_token_buckets(MemoryTokenBuckets())  # undone by monkeypatch after the test
        taken = await flow.take("grp_x", 0.001, 3)  # a burst of 1
        assert (taken.granted, type(taken)) == (1, Taken)
