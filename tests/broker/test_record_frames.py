"""The bulk read's records and frames (``reading.read_records``, ``app.broker.record_frames``) on both engines.

A real topic of the SQLite deployment names the topic (id, name, id prefix); its logs are made in an engine
of the test's own, local (16 KiB segments, so a read crosses many) or JetStream (the session's cluster),
with chosen timestamps so retention is the test's to apply. Frames are decoded by the Spark reader's decoder
(``queuecore_spark._records``). What must hold on both engines: a bulk read answers exactly the messages
and offsets the JSON read (``reading.read_partition``) answers, from any start, across segment
boundaries, below the earliest retained offset after retention, when everything expired, and in a
partition added later.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import orjson
import pytest
from queuecore_spark._records import decode

from app.broker import reading, record_frames
from app.broker.messages import encode_headers
from app.broker.topics import TopicRef
from app.kit.clock import now_ms
from app.stores.log.protocol import LogEngine, RecordIn, TopicLogConfig
from tests.broker.conftest import MakeTopic
from tests.fixtures.records import CONNECTOR_ARROW_SCHEMA
from tests.stores.log.conftest import BACKENDS, log_backend

__all__ = ["log_backend"]

pytestmark = [
    pytest.mark.parametrize("deployment", ["sqlite"], indirect=True),
    pytest.mark.parametrize("log_backend", BACKENDS, indirect=True),
]

COUNT = 600  # about 150 KB: some nine 16 KiB segments on the local engine


def record(i: int, timestamp_ms: int) -> RecordIn:
    user = {"n": str(i), "ü": "✓"} if i % 4 == 0 else None
    return RecordIn(
        value=orjson.dumps(None if i % 9 == 0 else {"i": i, "pad": "x" * 200, "text": "é✓"}),
        key=f"k{i % 5}".encode() if i % 3 == 0 else None,
        headers=encode_headers(user, f"idem-{i}" if i % 5 == 0 else None, expires_at_ms=None),
        timestamp_ms=timestamp_ms,
    )


@pytest.fixture
async def topic(make_topic: MakeTopic) -> TopicRef:
    return (await make_topic(partitions=2)).ref


@pytest.fixture
async def log(log_backend, topic: TopicRef) -> LogEngine:
    """The topic's logs: COUNT records in partition 0 (the first half an hour old), none in 1."""
    engine: LogEngine = await log_backend.open()
    await engine.create_topic(topic.id, topic.partitions, TopicLogConfig())
    now, old = now_ms(), now_ms() - 3_600_000
    for at in range(0, COUNT, 20):
        stamp = old if at < COUNT // 2 else now
        await engine.append(topic.id, {0: [record(i, stamp) for i in range(at, at + 20)]})
    return engine


Row = tuple[str, int, str | None, str, dict[str, str], int]


async def bulk(log: LogEngine, topic: TopicRef, partition: int, **kwargs: Any) -> tuple[list[Row], int, int]:
    run = await reading.read_records(log, topic, partition, **kwargs)
    body = b"".join(record_frames.encode(topic, partition, run.chunks, run.next_offset, run.earliest_offset))
    decoded = decode(body, topic.name, partition, CONNECTOR_ARROW_SCHEMA)
    rows = [
        (
            r["id"],
            r["offset"],
            r["key"],
            r["data"],
            dict(r["headers"]),
            int(r["timestamp"].timestamp() * 1000),
        )
        for b in decoded.batches
        for r in b.to_pylist()
    ]
    assert (decoded.next_offset, decoded.earliest_offset) == (run.next_offset, run.earliest_offset)
    return rows, decoded.next_offset, decoded.earliest_offset


async def pages(log: LogEngine, topic: TopicRef, partition: int, start: int | None, count: int) -> list[Row]:
    """``count`` messages (or all there are) by the JSON read, following ``next_offset`` from ``start``."""
    out: list[Row] = []
    page = await reading.read_partition(log, topic, partition, from_offset=start, limit=1000)
    while True:
        for raw in page.messages:
            m = orjson.loads(raw)
            stamp = int(datetime.fromisoformat(m["timestamp"]).timestamp() * 1000)
            out.append(
                (m["id"], m["offset"], m["key"], orjson.dumps(m["data"]).decode(), m["headers"], stamp)
            )
        if len(out) >= count or not page.messages:
            return out[:count]
        page = await reading.read_partition(log, topic, partition, from_offset=page.next_offset, limit=1000)


async def same_as_json(
    log: LogEngine, topic: TopicRef, partition: int, start: int | None, **kwargs: Any
) -> list[Row]:
    rows, next_offset, earliest = await bulk(log, topic, partition, from_offset=start, **kwargs)
    assert rows == await pages(log, topic, partition, start, len(rows))
    json_page = await reading.read_partition(log, topic, partition, from_offset=start, limit=1000)
    assert earliest == json_page.earliest_offset
    assert next_offset == (rows[-1][1] + 1 if rows else json_page.next_offset)
    return rows


class TestSameAsTheJsonRead:
    async def test_the_whole_partition_across_segments(self, log, topic) -> None:
        rows = await same_as_json(log, topic, 0, None)
        assert [r[1] for r in rows] == list(range(COUNT))
        assert rows[0][3] == "null" and rows[4][4] == {"n": "4", "ü": "✓"} and rows[5][4] == {}
        assert (rows[3][2], rows[1][2]) == ("k3", None)

    async def test_from_any_start_with_any_limit(self, log, topic) -> None:
        for start, limit in ((0, 1), (17, 50), (333, 1000), (599, 10), (123, 477)):
            rows = await same_as_json(log, topic, 0, start, limit=limit)
            assert [r[1] for r in rows] == list(range(start, min(COUNT, start + limit)))

    async def test_following_next_offset_reads_each_record_once(self, log, topic) -> None:
        seen: list[int] = []
        at = 0
        while at < COUNT:
            rows, at, _ = await bulk(log, topic, 0, from_offset=at, limit=97)
            seen += [r[1] for r in rows]
        assert seen == list(range(COUNT))

    async def test_an_end_offset_and_the_end(self, log, topic) -> None:
        rows = await same_as_json(log, topic, 0, 250, until_offset=260)
        assert [r[1] for r in rows] == list(range(250, 260))
        assert await bulk(log, topic, 0, from_offset=COUNT) == ([], COUNT, 0)
        assert await bulk(log, topic, 1) == ([], 0, 0)

    async def test_below_the_earliest_after_retention(self, log, topic) -> None:
        await log.update_config(topic.id, TopicLogConfig(retention_ms=60_000))
        await log.enforce_retention(now_ms())
        earliest = (await log.partition_info(topic.id, 0)).earliest_offset
        assert 0 < earliest <= COUNT // 2
        rows = await same_as_json(log, topic, 0, 0)
        assert rows[0][1] == earliest and rows[-1][1] == COUNT - 1
        assert (await bulk(log, topic, 0, from_offset=0, limit=5))[2] == earliest

    async def test_when_everything_expired(self, log, topic) -> None:
        await log.update_config(topic.id, TopicLogConfig(retention_ms=1000))
        await log.enforce_retention(now_ms() + 3_600_000)
        assert await bulk(log, topic, 0, from_offset=0) == ([], COUNT, COUNT)
        assert await same_as_json(log, topic, 0, None) == []

    async def test_a_partition_added_later(self, log, topic) -> None:
        await log.add_partitions(topic.id, 3)
        wider = dataclasses.replace(topic, partitions=3)
        assert await bulk(log, wider, 2) == ([], 0, 0)
        await log.append(topic.id, {2: [record(i, now_ms()) for i in range(30)]})
        rows = await same_as_json(log, wider, 2, None)
        assert [r[1] for r in rows] == list(range(30))
