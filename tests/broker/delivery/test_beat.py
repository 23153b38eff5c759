"""A push member's beat (``app/broker/delivery/beat.py``), beside its delivery loop: lease rows given
back to a new owner go out before it reads on, the group's pause and resume as its poll sees them, and
partitions a neighbour's join takes held back until a beat is done; on the real metadata store and log
engine of each deployment, through a ``PushMember`` run as the WebSocket edge runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from app.broker import pauses
from app.stores.metadata.protocol import MetadataStore
from tests.broker.delivery.conftest import MakeTopic, PushConnection, settle, wait_until

Connect = Callable[..., Awaitable[PushConnection]]


class SlowUnits:
    """The deployment's metadata store with every unit of work run through ``run_unit`` (joins, beats,
    polls) 0.2 s slower, as on a loaded database: a beat's poll then lands well after a log read."""

    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    def __getattr__(self, name: str) -> object:
        return getattr(self._metadata, name)

    async def run_unit(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.2)
        return await self._metadata.run_unit(*args, **kwargs)


class TestHandOverOrder:
    async def test_a_new_owner_sends_the_leases_given_back_before_reading_on(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        # A member that leaves gives back the leases it held unacked, as lease rows due at once with the
        # attempt counted back (its client may never have had them: the tests/system/faults short run
        # saw such a hand-over after a pause). The next owner reads on from where the first one had
        # read to; unless it sends those rows first, its client sees offsets go back within a session.
        topic = await make_topic(partitions=1)
        await topic.publish(3)
        leaving = await push_connections(topic, max_in_flight=3)
        await leaving.delivered(3)
        await topic.publish(5)
        staying = await push_connections(topic, metadata=SlowUnits(topic.services.metadata))
        await staying.wait_for("welcome")
        await leaving.close()
        await staying.wait_for("rebalance")
        await wait_until(lambda: len(staying.messages()) >= 8)
        assert [(m["offset"], m["attempt"]) for m in staying.messages()] == [(o, 1) for o in range(8)]


class TestGroupPause:
    async def test_a_paused_group_gets_nothing_new_until_a_beat_sees_it_resumed(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        await topic.publish(2)
        connection = await push_connections(topic)
        await connection.delivered(2)
        async with topic.services.metadata.unit() as uow:
            await pauses.pause(uow, topic.ref, "g")
        # The beat's next poll sees the pause; from then on, what is published stays in the log.
        await asyncio.sleep(1.2)  # two beats (BEAT_EVERY 0.5 s)
        before = len(connection.messages())
        await topic.publish(3)
        await settle(60)
        assert len(connection.messages()) == before
        async with topic.services.metadata.unit() as uow:
            await pauses.resume(uow, topic.ref, "g")
        await wait_until(lambda: len(connection.messages()) >= before + 3)
        assert [m["offset"] for m in connection.messages()][-3:] == [2, 3, 4]


class TestNeighbourJoin:
    async def test_a_partition_a_neighbour_takes_sends_nothing_more_until_the_beat_hands_it_over(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        # The old owner pauses the partitions a neighbour's join took until a beat begun after that
        # join is done; that beat releases them, and the new owner sends what follows: never both.
        topic = await make_topic(partitions=2)
        first = await push_connections(topic)
        await topic.publish(2, partition=0)
        await topic.publish(2, partition=1)
        await first.delivered(4)
        second = await push_connections(topic)
        (welcome,) = await second.wait_for("welcome")
        (taken,) = welcome["assignments"]
        await first.wait_for("rebalance")
        await topic.publish(3, partition=taken)
        await wait_until(lambda: len(second.messages()) >= 3)
        await settle(40)
        assert [m["offset"] for m in second.messages()] == [2, 3, 4]
        assert [m["offset"] for m in first.messages() if m["partition"] == taken] == [0, 1]
