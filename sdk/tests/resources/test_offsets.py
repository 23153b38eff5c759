"""``client.offsets`` against a real server, sync and async."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest
from sdk_support import unique

import queuecore

pytestmark = pytest.mark.integration


@pytest.fixture
def group(client, topic):
    for partition, count in enumerate([5, 2, 0]):
        for i in range(count):
            client.publish(topic, {"n": i}, partition=partition)
    name = unique("g")
    client.consumer_groups.update(topic, name)
    return name


class TestSync:
    def test_get_one_partition(self, client, topic, group):
        offset = client.offsets.get(topic, group=group, partition=0)
        assert isinstance(offset, queuecore.Offset)
        assert (offset.latest, offset.lag) == (5, 5 - offset.current)

    def test_get_every_partition(self, client, topic, group):
        offsets = client.offsets.get(topic, group=group)
        assert [type(o) for o in offsets] == [queuecore.PartitionOffset] * 3
        assert [(o.partition, o.latest) for o in offsets] == [(0, 5), (1, 2), (2, 0)]

    def test_seek_to_an_offset(self, client, topic, group):
        client.offsets.reset(topic, group=group, to="latest")
        moved = client.offsets.seek(topic, group=group, partition=0, offset=3)
        assert (moved.partition, moved.offset) == (0, 3)
        offset = client.offsets.get(topic, group=group, partition=0)
        assert (offset.current, offset.latest, offset.lag) == (3, 5, 2)

    def test_seek_beyond_the_end_lands_at_the_end_with_a_warning(self, client, topic, group, caplog):
        with caplog.at_level(logging.WARNING, logger="queuecore"):
            moved = client.offsets.seek(topic, group=group, partition=0, offset=4800)
        assert (moved.partition, moved.offset) == (0, 5)
        (record,) = [r for r in caplog.records if "seek" in r.getMessage()]
        assert "asked for offset 4800, landed at 5" in record.getMessage()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="queuecore"):
            client.offsets.seek(topic, group=group, partition=0, offset=2)
        assert caplog.records == []  # landed where asked: nothing to say

    def test_seek_to_a_time(self, client, topic, group):
        client.offsets.reset(topic, group=group, to="latest")
        past = datetime.now(timezone.utc) - timedelta(hours=1)
        assert client.offsets.seek(topic, group=group, partition=0, timestamp=past).offset == 0
        future_ms = int((datetime.now(timezone.utc) + timedelta(hours=1)).timestamp() * 1000)
        assert client.offsets.seek(topic, group=group, partition=0, timestamp=future_ms).offset == 5

    def test_seek_needs_exactly_one_target(self, client, topic, group):
        with pytest.raises(TypeError):
            client.offsets.seek(topic, group=group, partition=0)

    def test_reset(self, client, topic, group):
        moved = client.offsets.reset(topic, group=group, to="latest")
        assert [(p.partition, p.current) for p in moved] == [(0, 5), (1, 2), (2, 0)]
        one = client.offsets.reset(topic, group=group, to="earliest", partition=1)
        assert [(p.partition, p.current) for p in one] == [(1, 0)]
        assert client.offsets.get(topic, group=group, partition=1).lag == 2
        assert client.offsets.get(topic, group=group, partition=0).lag == 0

    def test_missing_group(self, client, topic):
        with pytest.raises(queuecore.NotFoundError) as info:
            client.offsets.get(topic, group=unique("missing"))
        assert info.value.code == "GROUP_NOT_FOUND"


class TestAsync:
    async def test_every_call(self, async_client, topic, group):
        offsets = await async_client.offsets.get(topic, group=group)
        assert [o.latest for o in offsets] == [5, 2, 0]
        reset = await async_client.offsets.reset(topic, group=group, to="latest")
        assert [p.current for p in reset] == [5, 2, 0]
        moved = await async_client.offsets.seek(topic, group=group, partition=0, offset=1)
        assert moved.offset == 1
        one = await async_client.offsets.get(topic, group=group, partition=0)
        assert (one.current, one.latest, one.lag) == (1, 5, 4)
