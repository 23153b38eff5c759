"""Consumer groups (``app/broker/groups.py``): names and dead-letter config refused with their field,
the config upsert (create with defaults, merge, remove the DLQ), describe and list (per-partition
``current``/``latest``/lag and live members, as the module computes them), delete (refused while
members are connected, with its DLQ log otherwise), and the per-group delivery stats.

On the SQLite and Postgres deployments with the local log engine; every test makes its own topic in a
fresh project (``make_topic``), so the session-wide deployments are shared safely.
"""

from __future__ import annotations

import pytest

from app.broker import dead_letter_logs, groups
from app.broker.delivery import membership
from app.broker.errors import GroupActive, GroupNotFound, InvalidRequest
from app.kit.clock import now_ms
from app.stores.log.local import retention
from app.stores.log.protocol import TopicLogConfig
from app.stores.metadata.partition_repositories import PartitionRepository
from tests.broker.conftest import ON_DATABASES, TopicUnderTest

# The flow-control fields of a group config, unset (tests/api/test_flow.py tests them).
NO_FLOW = {"maxInFlight": None, "rate": None, "filter": None}

# Members joined here stay live for the whole test (the longest session timeout allowed).
LONG_SESSION = "5m"


def refused_field(error: pytest.ExceptionInfo[InvalidRequest]) -> str:
    assert error.value.code == "INVALID_REQUEST"
    (detail,) = error.value.details or []
    return str(detail["field"])


class TestNames:
    @pytest.mark.parametrize("name", ["g", "orders-v2", "a.b_c-1", "9lives", "x" * 249])
    def test_accepted_names(self, name):
        assert groups.validate_name(name) == name

    @pytest.mark.parametrize("name", ["", "-lead", ".lead", "_lead", "with space", "x" * 250, "é", "a/b"])
    def test_refused_names_name_the_group_field(self, name):
        with pytest.raises(InvalidRequest) as refused:
            groups.validate_name(name)
        assert refused_field(refused) == "group"


class TestDeadLetterConfig:
    def test_null_removes_and_omitted_fields_take_their_defaults(self):
        assert groups.parse_dead_letter(None) is None
        assert groups.parse_dead_letter({}) == {
            "maxRetries": 5,
            "retryDelay": "30s",
            "alertThreshold": 100,
            "breaker": {"failureRate": 0.5, "minAttempts": 100, "window": "60s"},
        }
        assert groups.parse_dead_letter({"maxRetries": 0, "retryDelay": None}) == {
            "maxRetries": 0,
            "retryDelay": "30s",
            "alertThreshold": 100,
            "breaker": {"failureRate": 0.5, "minAttempts": 100, "window": "60s"},
        }

    def test_breaker_null_turns_it_off_and_its_omitted_fields_take_defaults(self):
        assert groups.parse_dead_letter({"breaker": None})["breaker"] is None
        assert groups.parse_dead_letter({"breaker": {"minAttempts": 10}})["breaker"] == {
            "failureRate": 0.5,
            "minAttempts": 10,
            "window": "60s",
        }
        assert groups.parse_dead_letter({"breaker": {"failureRate": 0, "window": "1d"}})["breaker"] == {
            "failureRate": 0,
            "minAttempts": 100,
            "window": "1d",
        }

    @pytest.mark.parametrize(
        ("value", "field"),
        [
            ([], "deadLetter"),
            ("5", "deadLetter"),
            ({"maxRetries": 1, "zeta": 1, "alpha": 2}, "deadLetter.alpha"),
            ({"maxRetries": 101}, "deadLetter.maxRetries"),
            ({"maxRetries": -1}, "deadLetter.maxRetries"),
            ({"maxRetries": True}, "deadLetter.maxRetries"),
            ({"maxRetries": 2.0}, "deadLetter.maxRetries"),
            ({"alertThreshold": 0}, "deadLetter.alertThreshold"),
            ({"alertThreshold": 1_000_001}, "deadLetter.alertThreshold"),
            ({"retryDelay": "2h"}, "deadLetter.retryDelay"),
            ({"retryDelay": 30}, "deadLetter.retryDelay"),
            ({"breaker": 1}, "deadLetter.breaker"),
            ({"breaker": {"failureRate": 1}}, "deadLetter.breaker.failureRate"),
            ({"breaker": {"failureRate": -0.1}}, "deadLetter.breaker.failureRate"),
            ({"breaker": {"failureRate": "0.5"}}, "deadLetter.breaker.failureRate"),
            ({"breaker": {"failureRate": True}}, "deadLetter.breaker.failureRate"),
            ({"breaker": {"minAttempts": 0}}, "deadLetter.breaker.minAttempts"),
            ({"breaker": {"minAttempts": 1.5}}, "deadLetter.breaker.minAttempts"),
            ({"breaker": {"window": "500ms"}}, "deadLetter.breaker.window"),
            ({"breaker": {"window": 60}}, "deadLetter.breaker.window"),
            ({"breaker": {"bogus": 1}}, "deadLetter.breaker.bogus"),
        ],
    )
    def test_refusals_name_the_field(self, value, field):
        with pytest.raises(InvalidRequest) as refused:
            groups.parse_dead_letter(value)
        assert refused_field(refused) == field

    def test_the_bounds_themselves_are_accepted(self):
        low = groups.parse_dead_letter({"maxRetries": 0, "alertThreshold": 1, "retryDelay": "0s"})
        high = groups.parse_dead_letter({"maxRetries": 100, "alertThreshold": 1_000_000, "retryDelay": "1h"})
        assert low == {
            "maxRetries": 0,
            "alertThreshold": 1,
            "retryDelay": "0s",
            "breaker": {"failureRate": 0.5, "minAttempts": 100, "window": "60s"},
        }
        assert high == {
            "maxRetries": 100,
            "alertThreshold": 1_000_000,
            "retryDelay": "1h",
            "breaker": {"failureRate": 0.5, "minAttempts": 100, "window": "60s"},
        }


def test_lag_is_never_negative():
    assert groups.PartitionLag(0, None, current=3, latest=10).lag == 7
    assert groups.PartitionLag(0, None, current=10, latest=3).lag == 0


async def upsert(topic: TopicUnderTest, name: str = "g", **config: object) -> dict[str, object]:
    async with topic.services.metadata.unit() as uow:
        group = await groups.upsert_config(uow, topic.ref, name, **config)  # type: ignore[arg-type]
        return groups.config_of(group)


async def describe(topic: TopicUnderTest, name: str = "g") -> groups.GroupDetail:
    async with topic.services.metadata.unit(readonly=True) as uow:
        return await groups.describe_group(uow, topic.services.log, topic.ref, name)


async def join(topic: TopicUnderTest, name: str = "g") -> membership.Membership:
    services = topic.services
    return await membership.join(
        services.metadata, services.log, topic.ref, name, start_from="earliest", session_timeout=LONG_SESSION
    )


@ON_DATABASES
class TestConfig:
    async def test_the_first_put_creates_the_group_with_defaults_and_a_row_per_partition(self, make_topic):
        topic = await make_topic(partitions=3)
        config = await upsert(topic, ack_timeout="90s")
        assert config == {"ackTimeout": "90s", "sessionTimeout": "10s", "deadLetter": None, **NO_FLOW}
        async with topic.services.metadata.unit(readonly=True) as uow:
            group = await groups.get_group(uow, topic.ref, "g")
            assert (group.ack_timeout_ms, group.session_timeout_ms, group.generation) == (90_000, 10_000, 0)
            rows = await uow.partitions.partitions(group.id)
        assert [(r.partition, r.member_id, r.committed) for r in rows] == [(p, None, None) for p in range(3)]

    async def test_later_puts_merge_and_a_null_dead_letter_removes_it(self, make_topic):
        topic = await make_topic()
        await upsert(topic, ack_timeout="45s", dead_letter={"maxRetries": 2})
        merged = await upsert(topic, session_timeout="20s")
        assert merged == {
            "ackTimeout": "45s",
            "sessionTimeout": "20s",
            "deadLetter": {
                "maxRetries": 2,
                "retryDelay": "30s",
                "alertThreshold": 100,
                "breaker": {"failureRate": 0.5, "minAttempts": 100, "window": "60s"},
            },
            **NO_FLOW,
        }
        assert (await upsert(topic, dead_letter=None))["deadLetter"] is None
        assert (await describe(topic)).config == {
            "ackTimeout": "45s",
            "sessionTimeout": "20s",
            "deadLetter": None,
            **NO_FLOW,
        }

    @pytest.mark.parametrize(
        ("config", "field"),
        [
            ({"ack_timeout": "500ms"}, "ackTimeout"),
            ({"ack_timeout": "13h"}, "ackTimeout"),
            ({"session_timeout": "1s"}, "sessionTimeout"),
            ({"session_timeout": "10 s"}, "sessionTimeout"),
            ({"dead_letter": {"maxRetries": 500}}, "deadLetter.maxRetries"),
        ],
    )
    async def test_a_refused_value_creates_nothing_and_changes_nothing(self, make_topic, config, field):
        topic = await make_topic()
        with pytest.raises(InvalidRequest) as refused:
            await upsert(topic, "fresh", **config)
        assert refused_field(refused) == field
        async with topic.services.metadata.unit(readonly=True) as uow:
            with pytest.raises(GroupNotFound):
                await groups.get_group(uow, topic.ref, "fresh")
        before = await upsert(topic, "kept", ack_timeout="60s")
        with pytest.raises(InvalidRequest):
            # One bad field refuses the whole put: the good ones beside it are not applied either.
            await upsert(topic, "kept", **{"ack_timeout": "120s", "session_timeout": "20s", **config})
        assert (await describe(topic, "kept")).config == before

    async def test_a_bad_name_is_refused_before_anything_is_written(self, make_topic):
        topic = await make_topic()
        with pytest.raises(InvalidRequest) as refused:
            await upsert(topic, "no spaces")
        assert refused_field(refused) == "group"
        async with topic.services.metadata.unit(readonly=True) as uow:
            assert await groups.list_groups(uow, topic.services.log, topic.ref) == []


@ON_DATABASES
class TestDescribeAndList:
    async def test_an_unknown_group_is_not_found_with_its_code(self, make_topic):
        topic = await make_topic()
        with pytest.raises(GroupNotFound) as missing:
            await describe(topic, "ghost")
        assert missing.value.code == "GROUP_NOT_FOUND"
        assert "ghost" in missing.value.message and topic.name in missing.value.message

    async def test_nothing_committed_reads_from_the_earliest_offset_and_lags_by_everything(self, make_topic):
        topic = await make_topic(partitions=2)
        await topic.publish(3, partition=0)
        await topic.publish(1, partition=1)
        await upsert(topic)
        detail = await describe(topic)
        assert (detail.name, detail.topic, detail.consumers) == ("g", topic.name, 0)
        assert [(p.partition, p.consumer, p.current, p.latest, p.lag) for p in detail.partitions] == [
            (0, None, 0, 3, 3),
            (1, None, 0, 1, 1),
        ]

    async def test_committed_offsets_set_current_and_lag(self, make_topic):
        topic = await make_topic(partitions=2)
        await topic.publish(5, partition=0)
        await topic.publish(4, partition=1)
        await upsert(topic)
        group_id = await topic.group_id("g")
        async with topic.services.metadata.session() as session:
            await PartitionRepository.from_session(session).set_offsets(group_id, {0: 2, 1: 4})
        lags = (await describe(topic)).partitions
        assert [(p.current, p.latest, p.lag) for p in lags] == [(2, 5, 3), (4, 4, 0)]

    async def test_current_never_points_below_what_retention_kept(self, make_topic):
        topic = await make_topic(partitions=1)
        await topic.publish(4, partition=0)
        await upsert(topic)
        group_id = await topic.group_id("g")
        async with topic.services.metadata.session() as session:
            await PartitionRepository.from_session(session).set_offsets(group_id, {0: 1})
        log = topic.services.log.manager.log(topic.ref.id, 0)
        # Every record is past the topic's retention (7 days) eight days from now: its segment goes.
        assert await retention.enforce_retention(log, now_ms() + 8 * 86_400_000) == 1
        (lag,) = (await describe(topic)).partitions
        assert (lag.current, lag.latest, lag.lag) == (4, 4, 0)  # committed 1, but 1..3 no longer exist

    async def test_live_members_are_counted_and_own_their_partitions(self, make_topic):
        topic = await make_topic(partitions=2)
        await upsert(topic)
        member = await join(topic)
        detail = await describe(topic)
        assert detail.consumers == 1
        assert [p.consumer for p in detail.partitions] == [member.member_id, member.member_id]
        await membership.leave(topic.services.metadata, topic.ref, "g", member.member_id)
        detail = await describe(topic)
        assert detail.consumers == 0
        assert [p.consumer for p in detail.partitions] == [None, None]

    async def test_the_list_sums_lag_and_counts_members_per_group_of_this_topic_only(self, make_topic):
        topic = await make_topic(partitions=2)
        other = await make_topic(partitions=1)
        await topic.publish(3, partition=0)
        await topic.publish(2, partition=1)
        await upsert(topic, "idle")
        await upsert(other, "elsewhere")
        member = await join(topic, "busy")
        async with topic.services.metadata.session() as session:
            group_id = await topic.group_id("busy")
            await PartitionRepository.from_session(session).set_offsets(group_id, {0: 3})
        async with topic.services.metadata.unit(readonly=True) as uow:
            found = await groups.list_groups(uow, topic.services.log, topic.ref)
        assert sorted(found, key=lambda g: g.name) == [
            groups.GroupSummary("busy", consumers=1, lag=2),
            groups.GroupSummary("idle", consumers=0, lag=5),
        ]
        await membership.leave(topic.services.metadata, topic.ref, "busy", member.member_id)


@ON_DATABASES
class TestDelete:
    async def test_a_stopped_group_goes_with_its_partition_rows(self, make_topic):
        topic = await make_topic(partitions=2)
        await upsert(topic)
        group_id = await topic.group_id("g")
        async with topic.services.metadata.unit() as uow:
            assert await groups.delete_group(uow, topic.ref, "g") == group_id
        async with topic.services.metadata.unit(readonly=True) as uow:
            with pytest.raises(GroupNotFound):
                await groups.get_group(uow, topic.ref, "g")
            assert await uow.partitions.partitions(group_id) == []

    async def test_a_group_with_connected_members_is_refused_and_kept(self, make_topic):
        topic = await make_topic()
        await upsert(topic)
        member = await join(topic)
        async with topic.services.metadata.unit() as uow:
            with pytest.raises(GroupActive) as active:
                await groups.delete_group(uow, topic.ref, "g")
        assert active.value.code == "GROUP_ACTIVE"
        assert "1 connected member;" in active.value.message
        assert (await describe(topic)).consumers == 1
        await membership.leave(topic.services.metadata, topic.ref, "g", member.member_id)
        await groups.delete_group_and_dead_letters(
            topic.services.metadata, topic.services.log, topic.ref, "g"
        )

    async def test_an_unknown_group_is_not_found(self, make_topic):
        topic = await make_topic()
        async with topic.services.metadata.unit() as uow:
            with pytest.raises(GroupNotFound):
                await groups.delete_group(uow, topic.ref, "ghost")

    async def test_the_dlq_log_goes_once_the_group_is_deleted(self, make_topic):
        topic = await make_topic()
        await upsert(topic, dead_letter={})
        group_id = await topic.group_id("g")
        log = topic.services.log
        dlq_log = dead_letter_logs.log_id(group_id)
        await log.create_topic(dlq_log, 1, TopicLogConfig())
        assert dlq_log in await log.topic_ids()
        await groups.delete_group_and_dead_letters(topic.services.metadata, log, topic.ref, "g")
        assert dlq_log not in await log.topic_ids()
        async with topic.services.metadata.unit(readonly=True) as uow:
            with pytest.raises(GroupNotFound):
                await groups.get_group(uow, topic.ref, "g")

    async def test_a_group_without_a_dlq_log_is_deleted_all_the_same(self, make_topic):
        topic = await make_topic()
        await upsert(topic)
        await groups.delete_group_and_dead_letters(
            topic.services.metadata, topic.services.log, topic.ref, "g"
        )
        async with topic.services.metadata.unit(readonly=True) as uow:
            assert await groups.list_groups(uow, topic.services.log, topic.ref) == []


@ON_DATABASES
class TestDeliveryStats:
    async def test_each_group_reports_its_lag_and_in_flight_count(self, make_topic):
        topic = await make_topic(partitions=2)
        await topic.publish(4, partition=0)
        await topic.publish(2, partition=1)
        await upsert(topic, "behind")
        await upsert(topic, "caught-up")
        caught_up = await topic.group_id("caught-up")
        async with topic.services.metadata.session() as session:
            await PartitionRepository.from_session(session).set_offsets(caught_up, {0: 4, 1: 2})
        async with topic.services.metadata.unit(readonly=True) as uow:
            stats = await groups.delivery_stats(uow, topic.services.log, in_memory={caught_up: 7})
        mine = {s.group: s for s in stats if s.topic == topic.name and s.project_id == topic.scope.project_id}
        assert set(mine) == {"behind", "caught-up"}
        behind = mine["behind"]
        assert (behind.environment, behind.lag, behind.in_flight, behind.dead_letter_depth) == (
            "production",
            6,
            0,
            0,
        )
        assert behind.oldest_unacked_seconds >= 0.0
        assert (mine["caught-up"].lag, mine["caught-up"].in_flight) == (0, 7)
        assert mine["caught-up"].oldest_unacked_seconds == 0.0


@ON_DATABASES
class TestEnsureExists:
    """How a WebSocket consume makes its group before the upgrade (``ensure_exists``)."""

    async def test_makes_the_group_once_and_remembers_it(self, make_topic):
        topic: TopicUnderTest = await make_topic(partitions=2)
        known = groups.KnownGroups(ttl=60)
        await groups.ensure_exists(topic.services.metadata, topic.ref, "g", known)
        assert (topic.ref.id, "g") in known
        assert len(await topic.partitions("g")) == 2
        await groups.ensure_exists(topic.services.metadata, topic.ref, "g", known)  # nothing more
        async with topic.services.metadata.unit(readonly=True) as uow:
            assert [g.name for g in await groups.list_groups(uow, topic.services.log, topic.ref)] == ["g"]


class TestKnownGroups:
    def test_forgotten_after_the_ttl(self, monkeypatch):
        known = groups.KnownGroups(ttl=5)
        clock = [100.0]
        monkeypatch.setattr(groups.time, "monotonic", lambda: clock[0])
        known.add(("top_a", "g"))
        assert ("top_a", "g") in known and ("top_a", "h") not in known
        clock[0] += 5
        assert ("top_a", "g") not in known
