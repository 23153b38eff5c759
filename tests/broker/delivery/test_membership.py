"""Membership (``app/broker/delivery/membership.py``): join, heartbeat, leave, session expiry and the
rebalances they cause, on the real metadata store and log engine of each deployment.

Expiry is made by moving a member's stored expiry into the past (what the clock would do), never by
sleeping through a session timeout.
"""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from app.broker.delivery import leases, membership
from app.broker.delivery.membership import MemberRef
from app.broker.errors import InvalidRequest, MemberNotFound
from app.stores.metadata.partition_repositories import PartitionRepository
from tests.broker.delivery.conftest import MakeTopic, TopicUnderTest


async def join(topic: TopicUnderTest, group: str = "g", **kwargs: object) -> membership.Membership:
    services = topic.services
    return await membership.join(services.metadata, services.log, topic.ref, group, **kwargs)  # type: ignore[arg-type]


def ref(topic: TopicUnderTest, joined: membership.Membership, group: str = "g") -> MemberRef:
    return MemberRef(topic.ref, group, joined.member_id, joined.generation)


async def heartbeat(topic: TopicUnderTest, member: MemberRef) -> membership.Heartbeat:
    return await membership.heartbeat(topic.services.metadata, member)


async def expire(topic: TopicUnderTest, member_id: str, group: str = "g") -> None:
    """Move the member's expiry into the past, as the passing of its session timeout would."""
    group_id = await topic.group_id(group)
    async with topic.services.metadata.unit() as uow:
        row = await uow.groups.get_member(group_id, member_id)
        assert row is not None
        await uow.groups.save_member(dataclasses.replace(row, expires_at_ms=0))


class TestJoin:
    async def test_the_first_member_creates_the_group_and_owns_every_partition(self, make_topic: MakeTopic):
        topic = await make_topic(partitions=3)
        joined = await join(topic)
        assert joined.member_id.startswith("csr_")
        assert joined.generation == 1
        assert joined.assignments == [0, 1, 2]
        assert joined.group_id == await topic.group_id("g")
        assert {s.member_id for s in await topic.partitions("g")} == {joined.member_id}

    async def test_a_second_member_rebalances_and_every_partition_has_one_owner(self, make_topic: MakeTopic):
        topic = await make_topic(partitions=3)
        first = await join(topic)
        second = await join(topic)
        assert second.generation == first.generation + 1
        answer = await heartbeat(topic, ref(topic, first))
        assert answer.should_rejoin is True  # it joined before the rebalance
        assert sorted(answer.assignments + second.assignments) == [0, 1, 2]
        assert set(answer.assignments).isdisjoint(second.assignments)
        assert sorted([len(answer.assignments), len(second.assignments)]) == [1, 2]

    async def test_rejoining_a_live_member_changes_nothing(self, make_topic: MakeTopic):
        topic = await make_topic(partitions=2)
        first = await join(topic)
        await join(topic)
        again = await join(topic, member_id=first.member_id)
        current = await heartbeat(topic, ref(topic, again))
        assert again.member_id == first.member_id
        assert again.generation == current.generation  # no rebalance: the generation it already had
        assert again.assignments == current.assignments and current.should_rejoin is False

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [({"start_from": "middle"}, "startFrom"), ({"member_id": "not-ours"}, "memberId")],
    )
    async def test_refuses_bad_arguments(self, make_topic: MakeTopic, kwargs: dict[str, object], field: str):
        topic = await make_topic()
        with pytest.raises(InvalidRequest) as refused:
            await join(topic, **kwargs)
        assert [d["field"] for d in refused.value.details or []] == [field]

    @pytest.mark.parametrize(("start_from", "position"), [("earliest", 0), ("latest", 5)])
    async def test_a_new_group_starts_where_it_is_told(
        self, make_topic: MakeTopic, start_from: str, position: int
    ):
        topic = await make_topic(partitions=1)
        await topic.publish(5)
        await join(topic, start_from=start_from)
        (state,) = await topic.partitions("g")
        assert state.position == position

    async def test_a_push_member_holds_what_a_rebalance_takes_until_it_releases_it(
        self, make_topic: MakeTopic
    ):
        topic = await make_topic(partitions=2)
        pusher = await join(topic, push=True)
        puller = await join(topic)
        async with topic.services.metadata.session(readonly=True) as session:
            partition_rows = PartitionRepository.from_session(session)
            held = await partition_rows.owned_partitions(pusher.group_id, pusher.member_id)
        (moved,) = [o for o in held if o.member_id == puller.member_id]
        assert moved.held_by == pusher.member_id  # the new owner's, once the push member lets go
        assert moved.partition in puller.assignments


class TestHeartbeat:
    async def test_a_current_member_is_kept_and_told_nothing_changed(self, make_topic: MakeTopic):
        topic = await make_topic(partitions=2)
        joined = await join(topic)
        answer = await heartbeat(topic, ref(topic, joined))
        assert answer == membership.Heartbeat(joined.generation, False, [0, 1])

    async def test_an_unknown_member_is_not_found(self, make_topic: MakeTopic):
        topic = await make_topic()
        joined = await join(topic)
        stranger = MemberRef(topic.ref, "g", "csr_nobody", joined.generation)
        with pytest.raises(MemberNotFound):
            await heartbeat(topic, stranger)

    async def test_an_expired_member_is_swept_by_the_next_call_and_its_partitions_move(
        self, make_topic: MakeTopic
    ):
        topic = await make_topic(partitions=2)
        gone = await join(topic)
        stays = await join(topic)
        await expire(topic, gone.member_id)
        with pytest.raises(MemberNotFound):
            await heartbeat(topic, ref(topic, gone))
        # The sweep its refusal did stuck (committed despite the error): the other member sees it.
        answer = await heartbeat(topic, ref(topic, stays))
        assert answer.generation == stays.generation + 1 and answer.should_rejoin is True
        assert answer.assignments == [0, 1]
        assert {s.member_id for s in await topic.partitions("g")} == {stays.member_id}


class TestLeave:
    async def test_the_others_get_the_partitions_and_the_leaves_unacked_messages_at_once(
        self, make_topic: MakeTopic
    ):
        topic = await make_topic(partitions=1)
        await topic.publish(4)
        services = topic.services
        leaving = await join(topic, start_from="earliest")
        taken = await leases.poll(services.metadata, services.log, ref(topic, leaving), max_messages=10)
        assert len(taken) == 4
        stays = await join(topic)
        await membership.leave(services.metadata, topic.ref, "g", leaving.member_id)
        current = await heartbeat(topic, ref(topic, stays))
        assert current.assignments == [0]
        # Leased to the member that left with a 30 s deadline, due now for the one that stays.
        member = MemberRef(topic.ref, "g", stays.member_id, current.generation)
        again = await leases.poll(services.metadata, services.log, member, max_messages=10)
        assert [orjson.loads(m)["id"] for m in again] == [orjson.loads(m)["id"] for m in taken]
        # A clean leave spends no retry: the same attempt again.
        assert {orjson.loads(m)["attempt"] for m in again} == {1}

    async def test_leaving_twice_is_not_found(self, make_topic: MakeTopic):
        topic = await make_topic()
        joined = await join(topic)
        await membership.leave(topic.services.metadata, topic.ref, "g", joined.member_id)
        with pytest.raises(MemberNotFound):
            await membership.leave(topic.services.metadata, topic.ref, "g", joined.member_id)
