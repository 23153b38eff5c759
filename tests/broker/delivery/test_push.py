"""A push member's loops (``app/broker/delivery/push.py``): join and ``welcome``, the delivery loop and
its flow control, rebalances between members, leaving, stopping, and a topic deleted underneath, on the
real metadata store and log engine of each deployment. (Its beat is ``test_beat.py``, ack settlement
``test_acks.py``; the wire contract over a real WebSocket is ``tests/api/test_ws.py``.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from app.broker import groups, topics
from app.broker.delivery import membership
from app.broker.errors import TopicNotFound
from app.stores.log.protocol import LogEngine, Record
from tests.broker.delivery.conftest import HANG_GUARD, MakeTopic, PushConnection, settle, wait_until

Connect = Callable[..., Awaitable[PushConnection]]


async def acked(connection: PushConnection, ids: list[str]) -> None:
    """Ack ``ids`` and wait for the answer."""
    before = len([f for f in connection.frames if f["type"] == "acked"])
    await connection.ack(ids)
    (*_, answer) = await connection.wait_for("acked", before + 1)
    assert answer["ids"] == ids and answer["failed"] == []


class TestJoin:
    async def test_welcome_names_the_member_its_generation_and_every_partition(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=3)
        connection = await push_connections(topic)
        (welcome,) = await connection.wait_for("welcome")
        member = connection.member
        assert welcome == {
            "type": "welcome",
            "memberId": member.member_id,
            "generationId": member.generation,
            "assignments": [0, 1, 2],
        }
        assert member.member_id.startswith("csr_") and member.group_id == await topic.group_id("g")


class TestDelivery:
    async def test_every_message_once_in_offset_order_per_partition_as_a_first_attempt(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=2)
        for partition in (0, 1):
            await topic.publish(5, partition=partition)
        connection = await push_connections(topic)
        await connection.delivered(10)
        messages = connection.messages()
        for partition in (0, 1):
            assert [m["offset"] for m in messages if m["partition"] == partition] == [0, 1, 2, 3, 4]
        assert len({m["id"] for m in messages}) == 10
        assert {m["attempt"] for m in messages} == {1}
        assert all(m["ackDeadline"] for m in messages)

    async def test_records_published_while_it_waits_are_delivered(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        connection = await push_connections(topic)
        await settle()
        assert connection.messages() == []
        await topic.publish(3)
        await connection.delivered(3)
        assert [m["data"] for m in connection.messages()] == [0, 1, 2]

    async def test_no_more_than_max_in_flight_unacked_and_acks_make_room(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        await topic.publish(10)
        connection = await push_connections(topic, max_in_flight=4)
        ids = await connection.delivered(4)
        await settle()
        assert len(connection.messages()) == 4 and connection.member.in_flight == 4
        await acked(connection, ids[:3])
        await connection.delivered(7)
        await settle()
        assert len(connection.messages()) == 7 and connection.member.in_flight == 4
        assert [m["data"] for m in connection.messages()] == list(range(7))

    async def test_a_frame_carries_at_most_half_the_window(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        await topic.publish(10)
        connection = await push_connections(topic, max_in_flight=10)
        await connection.delivered(10)
        sizes = [
            len(f["messages"]) if f["type"] == "messages" else 1
            for f in connection.frames
            if "message" in f["type"]
        ]
        assert sum(sizes) == 10 and max(sizes) <= 5

    async def test_its_in_memory_leases_are_counted_for_its_group(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        await topic.publish(6)
        connection = await push_connections(topic)
        ids = await connection.delivered(6)
        group_id = connection.member.group_id
        roster = topic.services.push_members
        assert roster.in_flight_by_group()[group_id] == 6 == connection.member.held_in_memory
        await acked(connection, ids[:2])
        assert roster.in_flight_by_group()[group_id] == 4
        await connection.close()
        assert group_id not in roster.in_flight_by_group()


class TestRebalance:
    async def test_a_second_member_takes_a_partition_and_they_never_share_a_message(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=2)
        first = await push_connections(topic)
        second = await push_connections(topic)
        (rebalance,) = await first.wait_for("rebalance")
        (welcome,) = await second.wait_for("welcome")
        assert rebalance["generationId"] == welcome["generationId"] == first.member.generation
        assert sorted(rebalance["assignments"] + welcome["assignments"]) == [0, 1]
        assert len(rebalance["assignments"]) == len(welcome["assignments"]) == 1
        for partition in (0, 1):
            await topic.publish(4, partition=partition)
        await wait_until(lambda: len(first.messages()) + len(second.messages()) >= 8)
        for connection, owned in ((first, rebalance["assignments"]), (second, welcome["assignments"])):
            assert [(m["partition"], m["offset"]) for m in connection.messages()] == [
                (owned[0], o) for o in range(4)
            ]

    async def test_leaving_hands_partitions_and_unacked_messages_to_the_others_at_once(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        await topic.publish(5)
        leaving = await push_connections(topic)
        ids = await leaving.delivered(5)
        await acked(leaving, ids[:2])
        staying = await push_connections(topic)
        (welcome,) = await staying.wait_for("welcome")
        assert welcome["assignments"] == []  # sticky: the partition stays with its owner
        await leaving.close()
        (rebalance,) = await staying.wait_for("rebalance")
        assert rebalance["assignments"] == [0]
        # The three unacked ones, long before their 30 s ack deadline.
        again = await staying.delivered(3)
        assert sorted(again) == sorted(ids[2:])
        # A clean leave spends no retry: the same attempt again.
        assert {m["attempt"] for m in staying.messages()} == {1}


class OnePartitionHeld:
    """The deployment's log engine, except that one read is held at a gate: the first of a partition
    other than the first one found records in. So a delivery pass has taken one partition's records
    and waits on the next one's, for as long as the test likes."""

    def __init__(self, log: LogEngine) -> None:
        self._log = log
        self.gate = asyncio.Event()
        self.holding = asyncio.Event()
        self._first: int | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self._log, name)

    async def read(self, topic_id: str, partition: int, *args: int, **kwargs: int) -> list[Record]:
        if self._first is not None and partition != self._first and not self.holding.is_set():
            self.holding.set()
            await self.gate.wait()
        records = await self._log.read(topic_id, partition, *args, **kwargs)
        if records and self._first is None:
            self._first = partition
        return records


class TestEvictedMidPass:
    async def test_nothing_read_before_the_rejoin_follows_its_rebalance_frame(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        # The member's session ends (a pause past sessionTimeout, say) while a delivery pass is between
        # two partitions. It rejoins under its own id and starts again from the checkpoint, which is
        # a new session for its client: what the pass read before must not be sent after the
        # ``rebalance`` frame, or the client sees offsets go back within one session (the short faults
        # run saw exactly that: tests/system/faults/test_short_faults.py).
        topic = await make_topic(partitions=2)
        for partition in (0, 1):
            await topic.publish(4, partition=partition)
        log = OnePartitionHeld(topic.services.log)
        connection = await push_connections(topic, log=log)
        async with asyncio.timeout(HANG_GUARD):
            await log.holding.wait()
        await membership.leave(topic.services.metadata, topic.ref, "g", connection.member.member_id)
        connection.member.look_again(())  # its beat finds it gone and rejoins
        # Give a rejoin that does not wait for the pass the time to send its frame.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(connection.wait_for("rebalance"), 2.0)
        log.gate.set()
        await connection.wait_for("rebalance")
        after = connection.frames.index(next(f for f in connection.frames if f["type"] == "rebalance"))
        await wait_until(lambda: len(connection.messages(after)) >= 8)
        by_partition: dict[int, list[int]] = {0: [], 1: []}
        for message in connection.messages(after):
            by_partition[message["partition"]].append(message["offset"])
        assert by_partition == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}


class StalledStore:
    """The deployment's metadata store, except that while ``flowing`` is clear every unit of work waits
    at its start: the member's store calls hang, as those of a process cut from its database do."""

    def __init__(self, metadata: Any) -> None:
        self._metadata = metadata
        self.flowing = asyncio.Event()
        self.flowing.set()

    def __getattr__(self, name: str) -> object:
        return getattr(self._metadata, name)

    @contextlib.asynccontextmanager
    async def unit(self, *, readonly: bool = False) -> AsyncIterator[Any]:
        await self.flowing.wait()
        async with self._metadata.unit(readonly=readonly) as uow:
            yield uow

    async def run_unit(self, work: Callable[[Any], Awaitable[Any]], **kwargs: Any) -> Any:
        await self.flowing.wait()
        return await self._metadata.run_unit(work, **kwargs)


class TestLapsedSession:
    async def test_what_a_pass_read_before_its_session_may_have_ended_is_not_sent(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        # The short faults run on JetStream saw this: a member's pass stuck in a log read (a node paused)
        # and its beat stuck too, past sessionTimeout; another member was given the partitions and
        # delivered and acked their messages from the checkpoint; then the read returned and the first
        # member sent what it had read as first attempts, on an exactly-once topic.
        topic = await make_topic(partitions=2)
        async with topic.services.metadata.unit() as uow:
            await groups.upsert_config(uow, topic.ref, "g", session_timeout="2s")
        for partition in (0, 1):
            await topic.publish(4, partition=partition)
        log = OnePartitionHeld(topic.services.log)
        store = StalledStore(topic.services.metadata)
        first = await push_connections(topic, log=log, metadata=store)
        async with asyncio.timeout(HANG_GUARD):
            await (
                log.holding.wait()
            )  # one partition's records read and held in memory, the other's read waits
        store.flowing.clear()  # its beat reaches the store no more
        assert first.messages() == []
        await asyncio.sleep(2.5)  # past its session: the next join expires it
        second = await push_connections(topic)
        await second.delivered(8)
        acked_ids = [m["id"] for m in second.messages()]
        await acked(second, acked_ids)
        log.gate.set()
        store.flowing.set()
        await first.wait_for("rebalance")  # it found itself expired and joined again
        await settle()
        assert not set(acked_ids) & {m["id"] for m in first.messages()}


class TestStop:
    async def test_stop_ends_the_delivery_loop(self, make_topic: MakeTopic, push_connections: Connect):
        topic = await make_topic(partitions=1)
        connection = await push_connections(topic)
        assert connection.delivery is not None
        await settle()
        assert not connection.delivery.done()
        connection.member.stop()
        async with asyncio.timeout(HANG_GUARD):
            await connection.delivery
        assert connection.member.stopped
        await connection.member.leave()

    async def test_a_deleted_topic_ends_delivery_with_topic_not_found(
        self, make_topic: MakeTopic, push_connections: Connect
    ):
        topic = await make_topic(partitions=1)
        await topic.publish(2)
        connection = await push_connections(topic)
        await connection.delivered(2)
        await topics.delete_topic(topic.services.metadata, topic.services.log, topic.scope, topic.name)
        assert connection.delivery is not None
        with pytest.raises(TopicNotFound):
            async with asyncio.timeout(HANG_GUARD):
                await connection.delivery
        await connection.close()  # leaving a group that is gone with its topic: nothing to answer
