"""``client.consumer_groups`` against a real server, sync and async."""

from __future__ import annotations

import pytest
from sdk_support import unique

import queuecore
from queuecore import DeadLetter

pytestmark = pytest.mark.integration


def publish(client, topic, per_partition):
    for partition, count in enumerate(per_partition):
        for i in range(count):
            client.publish(topic, {"n": i}, partition=partition)


class TestSync:
    def test_update_creates_then_merges(self, client, topic):
        group = unique("g")
        created = client.consumer_groups.update(topic, group, ack_timeout="45s")
        assert isinstance(created, queuecore.ConsumerGroup)
        assert (created.name, created.topic, created.consumers) == (group, topic, 0)
        assert created.config.ack_timeout == "45s"
        assert [p.id for p in created.partitions] == [0, 1, 2]
        assert all(p.consumer is None for p in created.partitions)

        merged = client.consumer_groups.update(
            topic, group, session_timeout="20s", dead_letter=DeadLetter(max_retries=3, retry_delay="5s")
        )
        assert (merged.config.ack_timeout, merged.config.session_timeout) == ("45s", "20s")
        assert merged.config.dead_letter is not None
        assert (merged.config.dead_letter.max_retries, merged.config.dead_letter.retry_delay) == (3, "5s")

        as_dict = client.consumer_groups.update(topic, group, dead_letter={"alert_threshold": 7})
        assert as_dict.config.dead_letter is not None
        assert as_dict.config.dead_letter.alert_threshold == 7

        removed = client.consumer_groups.update(topic, group, dead_letter=None)
        assert removed.config.dead_letter is None
        assert removed.config.ack_timeout == "45s"

    def test_flow_control_and_filter(self, client, topic):
        group = unique("g")
        flow = client.consumer_groups.update(
            topic, group, max_in_flight=200, rate=2.5, filter='headers.type = "order"'
        )
        assert (flow.config.max_in_flight, flow.config.rate) == (200, 2.5)
        assert flow.config.filter == 'headers.type = "order"'
        assert flow.filter_applies_from is not None
        assert [(s.partition, s.offset) for s in flow.filter_applies_from] == [(0, 0), (1, 0), (2, 0)]
        assert isinstance(flow.filter_applies_from[0], queuecore.FilterStart)
        kept = client.consumer_groups.update(topic, group, ack_timeout="20s")
        assert (kept.config.max_in_flight, kept.config.rate, kept.filter_applies_from) == (200, 2.5, None)
        with pytest.raises(queuecore.BadRequestError) as info:
            client.consumer_groups.update(topic, group, filter="headers.type =")
        assert info.value.details is not None and info.value.details[0]["field"] == "filter"
        assert info.value.details[0]["position"] == 15
        removed = client.consumer_groups.update(topic, group, max_in_flight=None, rate=None, filter=None)
        assert (removed.config.max_in_flight, removed.config.rate, removed.config.filter) == (
            None,
            None,
            None,
        )

    def test_invalid_config(self, client, topic):
        with pytest.raises(queuecore.BadRequestError):
            client.consumer_groups.update(topic, unique("g"), ack_timeout="13h")

    def test_list_and_describe(self, client, topic):
        publish(client, topic, [2, 3, 0])
        group = unique("g")
        client.consumer_groups.update(topic, group)
        groups = client.consumer_groups.list(topic)
        assert isinstance(groups, list)
        (summary,) = [g for g in groups if g.name == group]
        assert isinstance(summary, queuecore.ConsumerGroupSummary)
        assert summary.consumers == 0
        detail = client.consumer_groups.describe(topic, group)
        assert sum(p.lag for p in detail.partitions) == summary.lag
        assert detail.request_id and detail.request_id.startswith("req_")

    def test_reset_offsets(self, client, topic):
        publish(client, topic, [2, 3, 1])
        group = unique("g")
        client.consumer_groups.update(topic, group)
        latest = client.consumer_groups.reset_offsets(topic, group, to="latest")
        assert [(p.partition, p.current) for p in latest] == [(0, 2), (1, 3), (2, 1)]
        assert all(p.lag == 0 for p in client.consumer_groups.describe(topic, group).partitions)
        earliest = client.consumer_groups.reset_offsets(topic, group, to="earliest")
        assert [p.current for p in earliest] == [0, 0, 0]
        exact = client.consumer_groups.reset_offsets(topic, group, to=2)
        assert [p.current for p in exact] == [2, 2, 1]  # clamped to what is retained

    def test_delete(self, client, topic):
        group = unique("g")
        client.consumer_groups.update(topic, group)
        client.consumer_groups.delete(topic, group)
        assert group not in [g.name for g in client.consumer_groups.list(topic)]
        with pytest.raises(queuecore.NotFoundError) as info:
            client.consumer_groups.describe(topic, group)
        assert info.value.code == "GROUP_NOT_FOUND"

    def test_missing_topic(self, client):
        with pytest.raises(queuecore.NotFoundError) as info:
            client.consumer_groups.list(unique("missing"))
        assert info.value.code == "TOPIC_NOT_FOUND"


class TestAsync:
    async def test_every_call(self, client, async_client, topic):
        publish(client, topic, [1, 1, 1])
        group = unique("g")
        created = await async_client.consumer_groups.update(
            topic, group, ack_timeout="10s", dead_letter={"max_retries": 2}
        )
        assert created.config.ack_timeout == "10s"
        assert created.config.dead_letter is not None and created.config.dead_letter.max_retries == 2
        groups = await async_client.consumer_groups.list(topic)
        assert [g.name for g in groups] == [group]
        detail = await async_client.consumer_groups.describe(topic, group)
        assert len(detail.partitions) == 3
        moved = await async_client.consumer_groups.reset_offsets(topic, group, to="latest")
        assert [p.current for p in moved] == [1, 1, 1]
        flow = await async_client.consumer_groups.update(
            topic, group, max_in_flight=5, rate=1, filter='key = "k"'
        )
        assert (flow.config.max_in_flight, flow.config.rate, flow.config.filter) == (5, 1.0, 'key = "k"')
        await async_client.consumer_groups.delete(topic, group)
        assert await async_client.consumer_groups.list(topic) == []


class TestPauseAndBreaker:
    def test_pause_until_then_resume(self, client, topic):
        from datetime import datetime, timedelta, timezone

        group = unique("g")
        client.consumer_groups.update(topic, group)
        until = datetime.now(timezone.utc) + timedelta(minutes=5)
        paused = client.consumer_groups.pause(topic, group, until=until)
        assert isinstance(paused, queuecore.GroupPause)
        assert paused.paused is True and paused.until is not None
        assert abs((paused.until - until).total_seconds()) < 0.001
        detail = client.consumer_groups.describe(topic, group)
        assert (detail.paused, detail.paused_reason, detail.paused_until) == (True, "user", paused.until)
        assert client.consumer_groups.pause(topic, group).until is None  # until resumed
        resumed = client.consumer_groups.resume(topic, group)
        assert (resumed.paused, resumed.until) == (False, None)
        detail = client.consumer_groups.describe(topic, group)
        assert (detail.paused, detail.paused_reason, detail.paused_until) == (False, None, None)
        with pytest.raises(queuecore.BadRequestError):
            client.consumer_groups.pause(topic, group, until="yesterday")
        with pytest.raises(queuecore.NotFoundError):
            client.consumer_groups.pause(topic, unique("missing"))

    def test_breaker_config_defaults_set_and_off(self, client, topic):
        group = unique("g")
        made = client.consumer_groups.update(topic, group, dead_letter=DeadLetter(max_retries=2))
        assert made.config.dead_letter is not None and made.config.dead_letter.breaker is not None
        breaker = made.config.dead_letter.breaker
        assert (breaker.failure_rate, breaker.min_attempts, breaker.window) == (0.5, 100, "60s")
        tuned = client.consumer_groups.update(
            topic, group, dead_letter=DeadLetter(breaker=queuecore.Breaker(min_attempts=20, window="5m"))
        )
        assert tuned.config.dead_letter is not None and tuned.config.dead_letter.breaker is not None
        assert tuned.config.dead_letter.breaker.min_attempts == 20
        assert tuned.config.dead_letter.breaker.window == "5m"
        off = client.consumer_groups.update(topic, group, dead_letter={"breaker": None})
        assert off.config.dead_letter is not None and off.config.dead_letter.breaker is None
        with pytest.raises(queuecore.BadRequestError):
            client.consumer_groups.update(topic, group, dead_letter={"breaker": {"failure_rate": 2}})

    async def test_async_pause_and_resume(self, client, async_client, topic):
        group = unique("g")
        client.consumer_groups.update(topic, group)
        assert (await async_client.consumer_groups.pause(topic, group)).paused is True
        assert (await async_client.consumer_groups.describe(topic, group)).paused_reason == "user"
        assert (await async_client.consumer_groups.resume(topic, group)).paused is False
