"""Group commit on JetStream (``writer.StreamWriter``), on the session's real 3-node cluster: appends that
meet at a partition share JetStream publishes, each caller still hears its own offsets, and a write that
fails is heard by every caller in it (and by nobody else)."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine, codec
from app.stores.log.jetstream.writer import StreamWriter
from app.stores.log.protocol import EngineUnavailable, RecordIn, TopicLogConfig, UnknownLog


@pytest.fixture
def engine(js_engine: JetStreamLogEngine) -> JetStreamLogEngine:
    return js_engine


def topic_id() -> str:
    return f"top_{secrets.token_hex(6)}"


async def _written_once(engine: JetStreamLogEngine) -> tuple[str, StreamWriter[bytes]]:
    """A new 1-partition topic with one record at offset 0, and its partition's writer."""
    topic = topic_id()
    await engine.create_topic(topic, 1, TopicLogConfig(replicas=3))
    await engine.append(topic, {0: [RecordIn(b"first")]})
    return topic, engine.appends.writers[codec.stream_name(topic, 0)]


async def test_concurrent_single_appends_share_a_few_writes(engine):
    topic, writer = await _written_once(engine)
    before = writer.writes

    bases = await asyncio.gather(*(engine.append(topic, {0: [RecordIn(b"%d" % i)]}) for i in range(200)))

    # All 200 were queued in one pass of the loop: the first goes alone, the rest in the next write.
    assert writer.writes - before <= 3
    offsets = sorted(b[0] for b in bases)
    assert offsets == list(range(1, 201))
    records = await engine.read(topic, 0, 1, max_records=500)
    assert {r.offset: r.value for r in records} == {b[0]: b"%d" % i for i, b in enumerate(bases)}


async def test_an_idle_partition_is_written_at_once_without_a_batch(engine):
    # No linger: one append to an idle partition is one publish, answered as soon as JetStream acks it.
    # Counted after the first append: a stream just created may answer "no stream" while its leader is
    # elected, and that first append is then sent again (a publish more, nothing stored twice).
    topic, writer = await _written_once(engine)
    before = writer.writes
    for i in range(1, 6):
        assert await engine.append(topic, {0: [RecordIn(b"%d" % i)]}) == {0: i}
    assert writer.writes - before == 5


async def test_a_failed_write_fails_every_append_in_it_and_stores_none(engine, nats_cluster):
    # The stream is deleted behind the engine's back (another node deleted the topic): every caller of
    # the coalesced write hears that the log is gone; nothing half-written remains anywhere.
    topic = topic_id()
    await engine.create_topic(topic, 1, TopicLogConfig(replicas=3))
    await engine.append(topic, {0: [RecordIn(b"x")]})
    other = JetStreamLogEngine(JetStreamConfig(servers=tuple(nats_cluster.url.split(","))))
    await other.start()
    try:
        await other.delete_topic(topic)
    finally:
        await other.close()
    results = await asyncio.gather(
        *(engine.append(topic, {0: [RecordIn(b"%d" % i)] * 3}) for i in range(20)), return_exceptions=True
    )
    # Each hears it as UnknownLog (the stream is gone), or as 503 when JetStream did not answer its look.
    assert all(isinstance(r, UnknownLog | EngineUnavailable) for r in results), results
    assert any(isinstance(r, UnknownLog) for r in results), results
    assert topic not in await engine.topic_ids()


async def test_an_append_that_half_fills_a_batch_is_sent_at_once(engine):
    # Appends of 600 records gain nothing by waiting for the write in flight: each is a write of its own,
    # beside it, and each caller still reads back exactly its records.
    topic, writer = await _written_once(engine)
    before = writer.writes

    async def big(a: int) -> tuple[int, int]:
        return a, (await engine.append(topic, {0: [RecordIn(b"%d-%d" % (a, k)) for k in range(600)]}))[0]

    bases = await asyncio.gather(*(big(a) for a in range(5)))
    assert writer.writes - before == 5
    records = {r.offset: r.value for r in await _read_all(engine, topic)}
    for a, base in bases:
        assert [records[base + k] for k in range(600)] == [b"%d-%d" % (a, k) for k in range(600)]


async def _read_all(engine, topic: str) -> list:
    out: list = []
    offset = 0
    while chunk := await engine.read(topic, 0, offset, max_records=1000):
        out.extend(chunk)
        offset = chunk[-1].offset + 1
    return out
