"""Group offsets (``app/broker/offsets.py``): reading ``current``/``latest``/``lag``, seek by offset and
by time, the live reset (``offsets/reset``) and the stopped-group reset (``reset-offsets``): targets
resolved and clamped to what the partition retains, what committed offsets read back afterwards, the
partition's in-flight leases dropped, and each refusal with its field or code.

On the SQLite and Postgres deployments with the local log engine (``make_topic``: a topic in a fresh
project). Records with chosen timestamps are appended to the topic's log directly.
"""

from __future__ import annotations

import pytest

from app.broker import groups, offsets, topics
from app.broker.delivery import membership
from app.broker.errors import GroupActive, GroupNotFound, InvalidRequest
from app.kit.clock import now_ms
from app.stores.log.local import retention
from app.stores.log.protocol import RecordIn
from app.stores.metadata.lease_repositories import LeaseRepository
from tests.broker.conftest import ON_DATABASES, TopicUnderTest

LONG_SESSION = "5m"  # members joined here stay live for the whole test


def refused_field(error: pytest.ExceptionInfo[InvalidRequest]) -> str:
    assert error.value.code == "INVALID_REQUEST"
    (detail,) = error.value.details or []
    return str(detail["field"])


class TestParseTarget:
    @pytest.mark.parametrize("value", ["earliest", "latest"])
    def test_earliest_and_latest_are_always_targets(self, value):
        assert offsets.parse_target(value, allow_offset=False) == value
        assert offsets.parse_target(value, allow_offset=True) == value

    def test_an_offset_only_where_allowed(self):
        assert offsets.parse_target(0, allow_offset=True) == 0
        assert offsets.parse_target(42, allow_offset=True) == 42
        with pytest.raises(InvalidRequest) as refused:
            offsets.parse_target(42, allow_offset=False)
        assert refused_field(refused) == "to"
        assert "'earliest' or 'latest'" in refused.value.message

    @pytest.mark.parametrize("value", [-1, True, "5", 1.0, None, "EARLIEST", "first"])
    def test_anything_else_is_refused_naming_the_field(self, value):
        with pytest.raises(InvalidRequest) as refused:
            offsets.parse_target(value, allow_offset=True, field="target")
        assert refused_field(refused) == "target"


async def upsert(topic: TopicUnderTest, name: str = "g") -> str:
    async with topic.services.metadata.unit() as uow:
        return (await groups.upsert_config(uow, topic.ref, name)).id


async def read_offsets(
    topic: TopicUnderTest, partition: int | None = None, name: str = "g"
) -> list[tuple[int, int, int, int]]:
    async with topic.services.metadata.unit(readonly=True) as uow:
        lags = await offsets.get_offsets(uow, topic.services.log, topic.ref, name, partition)
    return [(p.partition, p.current, p.latest, p.lag) for p in lags]


async def seek(
    topic: TopicUnderTest, partition: int = 0, name: str = "g", **target: object
) -> offsets.Position:
    async with topic.services.metadata.unit() as uow:
        return await offsets.seek(uow, topic.services.log, topic.ref, name, partition, **target)  # type: ignore[arg-type]


async def reset_live(
    topic: TopicUnderTest, to: object, partition: int | None = None
) -> list[offsets.Position]:
    async with topic.services.metadata.unit() as uow:
        return await offsets.reset_live(uow, topic.services.log, topic.ref, "g", to, partition)


async def reset_stopped(topic: TopicUnderTest, to: object) -> list[offsets.Position]:
    async with topic.services.metadata.unit() as uow:
        return await offsets.reset_stopped(uow, topic.services.log, topic.ref, "g", to)


async def append_at(topic: TopicUnderTest, partition: int, *timestamps: int) -> None:
    """One record per timestamp (epoch ms), in that order."""
    records = [RecordIn(value=b"%d" % i, timestamp_ms=ts) for i, ts in enumerate(timestamps)]
    await topic.services.log.append(topic.ref.id, {partition: records})


async def expire_everything(topic: TopicUnderTest, partition: int) -> None:
    """Retention removes every record of the partition (eight days from now is past its seven)."""
    log = topic.services.log.manager.log(topic.ref.id, partition)
    assert await retention.enforce_retention(log, now_ms() + 8 * 86_400_000) >= 1


@ON_DATABASES
class TestGetOffsets:
    async def test_every_partition_or_one(self, make_topic):
        topic = await make_topic(partitions=3)
        await topic.publish(2, partition=0)
        await topic.publish(5, partition=2)
        await upsert(topic)
        assert await read_offsets(topic) == [(0, 0, 2, 2), (1, 0, 0, 0), (2, 0, 5, 5)]
        assert await read_offsets(topic, 2) == [(2, 0, 5, 5)]

    async def test_a_partition_outside_the_topic_or_an_unknown_group_is_refused(self, make_topic):
        topic = await make_topic(partitions=2)
        await upsert(topic)
        with pytest.raises(InvalidRequest) as refused:
            await read_offsets(topic, 2)
        assert refused_field(refused) == "partition"
        with pytest.raises(GroupNotFound):
            await read_offsets(topic, name="ghost")


@ON_DATABASES
class TestSeek:
    async def test_seeking_to_an_offset_commits_it_for_that_partition_only(self, make_topic):
        topic = await make_topic(partitions=2)
        await topic.publish(6, partition=0)
        await topic.publish(6, partition=1)
        await upsert(topic)
        assert await seek(topic, 0, offset=4) == offsets.Position(0, 4)
        assert await read_offsets(topic) == [(0, 4, 6, 2), (1, 0, 6, 6)]
        positions = {s.partition: (s.committed, s.position) for s in await topic.partitions("g")}
        assert positions == {0: (4, 4), 1: (None, None)}
        assert await seek(topic, 0, offset=1) == offsets.Position(0, 1)  # backwards too: a replay
        assert await read_offsets(topic, 0) == [(0, 1, 6, 5)]

    async def test_an_offset_past_the_end_or_below_the_start_is_clamped(self, make_topic):
        topic = await make_topic(partitions=1)
        await topic.publish(3, partition=0)
        await upsert(topic)
        assert await seek(topic, offset=1000) == offsets.Position(0, 3)
        await expire_everything(topic, 0)
        assert await seek(topic, offset=0) == offsets.Position(0, 3)  # 0..2 are no longer retained
        assert await read_offsets(topic) == [(0, 3, 3, 0)]

    async def test_seeking_to_a_time_finds_the_first_record_at_or_after_it(self, make_topic):
        topic = await make_topic(partitions=1)
        await upsert(topic)
        await append_at(topic, 0, 1_000_000, 2_000_000, 2_000_000, 3_000_000)
        assert await seek(topic, timestamp=2_000_000) == offsets.Position(0, 1)
        assert await seek(topic, timestamp=2_000_001) == offsets.Position(0, 3)
        assert await seek(topic, timestamp=0) == offsets.Position(0, 0)
        assert await seek(topic, timestamp=9_000_000) == offsets.Position(0, 4)  # after the last: the end
        # ISO-8601 with a zone, and epoch milliseconds as digits, name the same instant.
        assert await seek(topic, timestamp="1970-01-01T00:50:00Z") == offsets.Position(0, 3)
        assert await seek(topic, timestamp="2000000") == offsets.Position(0, 1)
        assert await read_offsets(topic) == [(0, 1, 4, 3)]

    @pytest.mark.parametrize(
        ("target", "field"),
        [
            ({}, "offset"),
            ({"offset": 1, "timestamp": 1}, "offset"),
            ({"offset": -1}, "offset"),
            ({"offset": True}, "offset"),
            ({"timestamp": -5}, "timestamp"),
            ({"timestamp": 1.5}, "timestamp"),
        ],
    )
    async def test_refusals_name_their_field_and_move_nothing(self, make_topic, target, field):
        topic = await make_topic(partitions=1)
        await topic.publish(2, partition=0)
        await upsert(topic)
        await seek(topic, offset=1)
        with pytest.raises(InvalidRequest) as refused:
            await seek(topic, **target)
        assert refused_field(refused) == field
        assert await read_offsets(topic) == [(0, 1, 2, 1)]

    @pytest.mark.parametrize("timestamp", ["2026-01-01T00:00:00", "yesterday"])
    async def test_an_unparseable_timestamp_names_the_timestamp_field(self, make_topic, timestamp):
        topic = await make_topic(partitions=1)
        await upsert(topic)
        with pytest.raises(InvalidRequest) as refused:
            await seek(topic, timestamp=timestamp)
        assert refused_field(refused) == "timestamp"

    async def test_a_partition_outside_the_topic_or_an_unknown_group_is_refused(self, make_topic):
        topic = await make_topic(partitions=2)
        await upsert(topic)
        with pytest.raises(InvalidRequest) as refused:
            await seek(topic, 2, offset=0)
        assert refused_field(refused) == "partition"
        with pytest.raises(GroupNotFound):
            await seek(topic, 0, name="ghost", offset=0)

    async def test_a_seek_drops_the_partitions_in_flight_leases_while_the_member_stays(self, make_topic):
        topic = await make_topic(partitions=2)
        await topic.publish(3, partition=0)
        await topic.publish(3, partition=1)
        group_id = await upsert(topic)
        member = await membership.join(
            topic.services.metadata, topic.services.log, topic.ref, "g", session_timeout=LONG_SESSION
        )
        keys = [(p, o) for p in (0, 1) for o in range(3)]
        async with topic.services.metadata.session() as session:
            await LeaseRepository.from_session(session).add_leases(
                group_id, member.member_id, now_ms() + 60_000, keys
            )
        await seek(topic, 0, offset=2)  # a live group may seek: no GROUP_ACTIVE
        async with topic.services.metadata.session(readonly=True) as session:
            left = await LeaseRepository.from_session(session).leases_among(group_id, keys)
        assert sorted(left) == [(1, 0), (1, 1), (1, 2)]  # partition 0's are gone, partition 1's kept
        await membership.leave(topic.services.metadata, topic.ref, "g", member.member_id)


@ON_DATABASES
class TestResetLive:
    async def test_every_partition_to_latest_then_back_to_earliest(self, make_topic):
        topic = await make_topic(partitions=2)
        await topic.publish(3, partition=0)
        await topic.publish(1, partition=1)
        await upsert(topic)
        assert await reset_live(topic, "latest") == [offsets.Position(0, 3), offsets.Position(1, 1)]
        assert await read_offsets(topic) == [(0, 3, 3, 0), (1, 1, 1, 0)]
        assert await reset_live(topic, "earliest") == [offsets.Position(0, 0), offsets.Position(1, 0)]
        assert await read_offsets(topic) == [(0, 0, 3, 3), (1, 0, 1, 1)]

    async def test_one_partition_only(self, make_topic):
        topic = await make_topic(partitions=2)
        await topic.publish(3, partition=0)
        await topic.publish(3, partition=1)
        await upsert(topic)
        assert await reset_live(topic, "latest", partition=1) == [offsets.Position(1, 3)]
        assert await read_offsets(topic) == [(0, 0, 3, 3), (1, 3, 3, 0)]

    async def test_earliest_is_what_retention_kept(self, make_topic):
        topic = await make_topic(partitions=1)
        await topic.publish(4, partition=0)
        await upsert(topic)
        await expire_everything(topic, 0)
        await topic.publish(1, partition=0)
        assert await reset_live(topic, "earliest") == [offsets.Position(0, 4)]

    async def test_it_works_while_members_consume(self, make_topic):
        topic = await make_topic(partitions=1)
        await topic.publish(2, partition=0)
        await upsert(topic)
        member = await membership.join(
            topic.services.metadata, topic.services.log, topic.ref, "g", session_timeout=LONG_SESSION
        )
        assert await reset_live(topic, "latest") == [offsets.Position(0, 2)]
        await membership.leave(topic.services.metadata, topic.ref, "g", member.member_id)

    @pytest.mark.parametrize(
        ("to", "partition", "field"), [(3, None, "to"), ("middle", None, "to"), ("latest", 5, "partition")]
    )
    async def test_refusals_name_their_field(self, make_topic, to, partition, field):
        topic = await make_topic(partitions=1)
        await upsert(topic)
        with pytest.raises(InvalidRequest) as refused:
            await reset_live(topic, to, partition)
        assert refused_field(refused) == field


@ON_DATABASES
class TestResetStopped:
    async def test_every_partition_to_one_offset_clamped_per_partition(self, make_topic):
        topic = await make_topic(partitions=3)
        await topic.publish(5, partition=0)
        await topic.publish(2, partition=1)
        await upsert(topic)
        assert await reset_stopped(topic, 3) == [
            offsets.Position(0, 3),
            offsets.Position(1, 2),
            offsets.Position(2, 0),
        ]
        assert await read_offsets(topic) == [(0, 3, 5, 2), (1, 2, 2, 0), (2, 0, 0, 0)]
        assert [p.current for p in await reset_stopped(topic, "latest")] == [5, 2, 0]

    async def test_partitions_added_since_the_group_was_made_get_their_rows(self, make_topic):
        topic = await make_topic(partitions=1)
        await upsert(topic)
        async with topic.services.metadata.unit() as uow:
            await topics.update_topic(uow, topic.services.log, topic.scope, topic.name, partitions=2)
        topic.services.publisher.topic_changed(topic.scope, topic.name)  # as the route does
        topic.ref = await topic.services.publisher.topics.resolve(topic.scope, topic.name)
        assert [s.partition for s in await topic.partitions("g")] == [0]
        await topic.publish(2, partition=1)
        assert await reset_stopped(topic, "latest") == [offsets.Position(0, 0), offsets.Position(1, 2)]
        assert [(s.partition, s.committed) for s in await topic.partitions("g")] == [(0, 0), (1, 2)]

    async def test_refused_while_members_are_connected(self, make_topic):
        topic = await make_topic(partitions=1)
        await topic.publish(2, partition=0)
        await upsert(topic)
        member = await membership.join(
            topic.services.metadata, topic.services.log, topic.ref, "g", session_timeout=LONG_SESSION
        )
        with pytest.raises(GroupActive) as active:
            await reset_stopped(topic, "latest")
        assert active.value.code == "GROUP_ACTIVE"
        assert "resetting its offsets" in active.value.message
        await membership.leave(topic.services.metadata, topic.ref, "g", member.member_id)
        assert await reset_stopped(topic, "latest") == [offsets.Position(0, 2)]

    @pytest.mark.parametrize("to", [-1, "middle", True])
    async def test_a_bad_target_is_refused(self, make_topic, to):
        topic = await make_topic(partitions=1)
        await upsert(topic)
        with pytest.raises(InvalidRequest) as refused:
            await reset_stopped(topic, to)
        assert refused_field(refused) == "to"
