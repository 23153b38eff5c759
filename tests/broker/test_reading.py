"""Reading a partition without a group, and one message by id (``app.broker.reading``).

A real topic of the SQLite deployment names the topic (its id, name and id prefix); its partitions' logs
are made in a local engine of the test's own, with small segments and chosen timestamps, so retention
and times are the test's to set. What must hold:

* ``check_partition`` and the read's bounds refuse with 400 naming the field (``partition``, ``limit``,
  ``fromOffset``); ``parse_timestamp`` takes epoch milliseconds of any length and ISO-8601, and a
  refusal names the caller's field;
* a read starts at ``fromOffset``, at the first message at ``fromTimestamp`` (the later of the two when
  both are given), or at the earliest retained; below the earliest it starts there; at the latest it is
  empty with ``next_offset`` = latest; beyond it is ``OffsetOutOfRange`` with both bounds; following
  ``next_offset`` reads every message once;
* ``get_message`` answers a message by its id, and 404 for an id of another topic, of a partition the
  topic does not have, or of an offset not (or no longer) in the log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.broker import message_ids, reading
from app.broker.errors import InvalidRequest, MessageNotFound, OffsetOutOfRange
from app.broker.topics import TopicRef
from app.stores.log.local import LocalLogEngine
from app.stores.log.protocol import RecordIn, TopicLogConfig
from tests.broker.conftest import MakeTopic
from tests.stores.log.conftest import open_local

ON_SQLITE = pytest.mark.parametrize("deployment", ["sqlite"], indirect=True)
"""The topic's row is the deployment's; its logs are the test's own, so one metadata database is enough."""

T0 = 1_700_000_000_000  # message i of a partition is stamped T0 + 1000 i


@pytest.fixture
async def topic(make_topic: MakeTopic) -> TopicRef:
    return (await make_topic(partitions=2)).ref


@pytest.fixture
async def log(tmp_path: Path, topic: TopicRef) -> AsyncIterator[LocalLogEngine]:
    """The topic's logs in a local engine of the test: 50 messages in partition 0, none in 1."""
    engine = await open_local(tmp_path / "log", segment_bytes=1024, index_interval_bytes=128)
    await engine.create_topic(topic.id, topic.partitions, TopicLogConfig())
    for i in range(50):
        record = RecordIn(value=orjson.dumps({"n": i, "pad": "x" * 40}), timestamp_ms=T0 + 1000 * i)
        await engine.append(topic.id, {0: [record]})
    yield engine
    await engine.close()


def decoded(page: reading.StreamPage) -> list[dict[str, Any]]:
    return [orjson.loads(m) for m in page.messages]


def numbers(page: reading.StreamPage) -> list[int]:
    return [m["data"]["n"] for m in decoded(page)]


def field_of(error: InvalidRequest) -> str:
    return str(error.details[0]["field"])  # type: ignore[index]


@ON_SQLITE
class TestRefusals:
    async def test_a_partition_the_topic_does_not_have_is_refused_naming_the_field(self, topic, log) -> None:
        for partition in (-1, 2, 99):
            with pytest.raises(InvalidRequest) as refused:
                reading.check_partition(topic, partition)
            assert field_of(refused.value) == "partition" and "0–1" in str(refused.value)
            with pytest.raises(InvalidRequest):
                await reading.read_partition(log, topic, partition)
        reading.check_partition(topic, 0)
        reading.check_partition(topic, 1)

    async def test_a_limit_outside_1_to_1000_is_refused(self, topic, log) -> None:
        for limit in (0, -5, 1001):
            with pytest.raises(InvalidRequest) as refused:
                await reading.read_partition(log, topic, 0, limit=limit)
            assert field_of(refused.value) == "limit"
        assert len((await reading.read_partition(log, topic, 0, limit=1)).messages) == 1
        assert len((await reading.read_partition(log, topic, 0, limit=1000)).messages) == 50

    async def test_a_negative_from_offset_is_refused(self, topic, log) -> None:
        with pytest.raises(InvalidRequest) as refused:
            await reading.read_partition(log, topic, 0, from_offset=-1)
        assert field_of(refused.value) == "fromOffset"

    async def test_a_from_offset_beyond_the_latest_is_out_of_range_with_both_bounds(self, topic, log) -> None:
        with pytest.raises(OffsetOutOfRange) as refused:
            await reading.read_partition(log, topic, 0, from_offset=51)
        assert refused.value.details == [
            {
                "field": "fromOffset",
                "issue": "51 is beyond the partition's latest offset 50 (the next to be written)",
                "earliestOffset": 0,
                "latestOffset": 50,
            }
        ]
        with pytest.raises(OffsetOutOfRange):
            await reading.read_partition(log, topic, 1, from_offset=1)  # an empty partition too


class TestParseTimestamp:
    def test_epoch_milliseconds_of_any_length_are_taken_as_they_are(self) -> None:
        assert reading.parse_timestamp("0") == 0
        assert reading.parse_timestamp("1700000000123") == 1_700_000_000_123
        assert reading.parse_timestamp("9" * 30) == int("9" * 30)

    def test_iso_8601_is_taken_with_its_time_zone(self) -> None:
        assert reading.parse_timestamp("2023-11-14T22:13:20.000Z") == T0
        assert reading.parse_timestamp("2023-11-14T23:13:20.000+01:00") == T0

    @pytest.mark.parametrize("value", ["yesterday", "-5", "12.5", "", "2023-13-01T00:00:00Z"])
    def test_anything_else_is_refused_naming_the_callers_field(self, value: str) -> None:
        with pytest.raises(InvalidRequest) as refused:
            reading.parse_timestamp(value, "since")
        assert field_of(refused.value) == "since"


@ON_SQLITE
class TestReadPartition:
    async def test_a_read_without_a_start_begins_at_the_earliest_message(self, topic, log) -> None:
        page = await reading.read_partition(log, topic, 0, limit=3)
        assert numbers(page) == [0, 1, 2]
        assert (page.next_offset, page.earliest_offset) == (3, 0)
        first = decoded(page)[0]
        assert (first["topic"], first["partition"], first["offset"]) == (topic.name, 0, 0)
        assert first["id"] == message_ids.encode(topic.id, 0, 0, prefix=topic.id_prefix)

    async def test_following_next_offset_reads_every_message_once(self, topic, log) -> None:
        seen: list[int] = []
        offset = 0
        while True:
            page = await reading.read_partition(log, topic, 0, from_offset=offset, limit=7)
            if not page.messages:
                break
            seen += numbers(page)
            offset = page.next_offset
        assert seen == list(range(50))
        assert offset == 50

    async def test_a_read_at_the_latest_offset_is_empty_and_stays_there(self, topic, log) -> None:
        page = await reading.read_partition(log, topic, 0, from_offset=50)
        assert (page.messages, page.next_offset) == ([], 50)
        empty = await reading.read_partition(log, topic, 1)
        assert (empty.messages, empty.next_offset, empty.earliest_offset) == ([], 0, 0)

    async def test_a_read_from_a_timestamp_starts_at_the_first_message_stamped_at_or_after_it(
        self, topic, log
    ) -> None:
        page = await reading.read_partition(log, topic, 0, from_timestamp=str(T0 + 20_500), limit=2)
        assert numbers(page) == [21, 22]
        iso = await reading.read_partition(log, topic, 0, from_timestamp="2023-11-14T22:13:30.000Z", limit=1)
        assert numbers(iso) == [10]

    async def test_a_timestamp_past_every_message_reads_nothing_from_the_latest(self, topic, log) -> None:
        page = await reading.read_partition(log, topic, 0, from_timestamp=str(T0 + 10**9))
        assert (page.messages, page.next_offset) == ([], 50)

    async def test_with_both_a_timestamp_and_an_offset_the_later_start_wins(self, topic, log) -> None:
        later_offset = await reading.read_partition(
            log, topic, 0, from_timestamp=str(T0 + 5_000), from_offset=30, limit=1
        )
        assert numbers(later_offset) == [30]
        later_time = await reading.read_partition(
            log, topic, 0, from_timestamp=str(T0 + 40_000), from_offset=30, limit=1
        )
        assert numbers(later_time) == [40]

    async def test_a_read_below_the_earliest_retained_starts_at_the_earliest(self, topic, log) -> None:
        await log.update_config(topic.id, TopicLogConfig(retention_ms=1000))
        await log.enforce_retention(T0 + 30_000)  # drops whole segments older than that
        earliest = (await log.partition_info(topic.id, 0)).earliest_offset
        assert 0 < earliest < 50, "retention must have dropped some segments, not all"
        page = await reading.read_partition(log, topic, 0, from_offset=0, limit=2)
        assert numbers(page) == [earliest, earliest + 1]
        assert page.earliest_offset == earliest
        by_time = await reading.read_partition(log, topic, 0, from_timestamp="0", limit=1)
        assert numbers(by_time) == [earliest]


@ON_SQLITE
class TestGetMessage:
    async def test_a_message_is_found_by_its_id(self, topic, log) -> None:
        message_id = message_ids.encode(topic.id, 0, 17, prefix=topic.id_prefix)
        message = orjson.loads(await reading.get_message(log, topic, message_id))
        assert (message["id"], message["offset"], message["data"]["n"]) == (message_id, 17, 17)
        page = await reading.read_partition(log, topic, 0, from_offset=17, limit=1)
        assert await reading.get_message(log, topic, message_id) == page.messages[0]

    async def test_an_offset_not_in_the_log_is_not_found(self, topic, log) -> None:
        for partition, offset in ((0, 50), (0, 10**6), (1, 0)):
            with pytest.raises(MessageNotFound):
                await reading.get_message(log, topic, message_ids.encode(topic.id, partition, offset))

    async def test_an_offset_no_longer_retained_is_not_found(self, topic, log) -> None:
        await log.update_config(topic.id, TopicLogConfig(retention_ms=1000))
        await log.enforce_retention(T0 + 30_000)
        earliest = (await log.partition_info(topic.id, 0)).earliest_offset
        assert earliest > 0
        with pytest.raises(MessageNotFound):
            await reading.get_message(log, topic, message_ids.encode(topic.id, 0, earliest - 1))
        await reading.get_message(log, topic, message_ids.encode(topic.id, 0, earliest))

    async def test_an_id_of_another_topic_or_partition_is_not_found(self, topic, log, make_topic) -> None:
        other = (await make_topic()).ref
        with pytest.raises(MessageNotFound):
            await reading.get_message(log, topic, message_ids.encode(other.id, 0, 3))
        wider = dataclasses.replace(topic, partitions=5)
        with pytest.raises(MessageNotFound):
            await reading.get_message(log, topic, message_ids.encode(wider.id, 4, 0))

    async def test_something_that_is_not_a_message_id_is_refused(self, topic, log) -> None:
        with pytest.raises(InvalidRequest) as refused:
            await reading.get_message(log, topic, "msg_not-an-id")
        assert field_of(refused.value) == "messageId"
