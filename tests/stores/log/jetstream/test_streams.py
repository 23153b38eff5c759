"""A topic's streams on the session's real 3-node cluster: created all at once, and rolled back whole when
one of them cannot be; deleted all at once."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from app.stores.log.jetstream import JetStreamLogEngine, codec
from app.stores.log.jetstream.client import JetStreamError
from app.stores.log.protocol import RecordIn, TopicLogConfig, UnknownLog


@pytest.fixture
def engine(js_engine: JetStreamLogEngine) -> JetStreamLogEngine:
    return js_engine


async def streams_left(engine: JetStreamLogEngine, topic: str) -> list[int]:
    """The topic's streams, looked at until none is left (at most 50 looks): a delete is answered by each
    stream's leader, and the meta leader, which answers ``STREAM.NAMES``, may apply it a moment later."""
    for _ in range(50):
        left = await engine.streams.partitions(topic)
        if not left:
            return left
        await asyncio.sleep(0.1)
    return left


async def test_a_failed_creation_leaves_none_of_the_streams_it_made(engine):
    topic = f"top_{secrets.token_hex(6)}"
    # Another stream already takes partition 5's subject: its stream cannot be created.
    squatter = f"QCTEST{secrets.token_hex(4).upper()}"
    await engine.client.api(
        f"STREAM.CREATE.{squatter}",
        {"name": squatter, "subjects": [codec.subject(topic, 5)], "num_replicas": 1},
        timeout=30,
    )
    try:
        with pytest.raises(JetStreamError):
            await engine.create_topic(topic, 12, TopicLogConfig(replicas=3))
        assert await streams_left(engine, topic) == []
        with pytest.raises(UnknownLog):
            await engine.append(topic, {0: [RecordIn(b"x")]})
    finally:
        await engine.client.api(f"STREAM.DELETE.{squatter}", stream=squatter, timeout=30)
    # The same topic can be made once the subject is free.
    await engine.create_topic(topic, 12, TopicLogConfig(replicas=3))
    assert await engine.streams.partitions(topic) == list(range(12))
    await engine.delete_topic(topic)


async def test_creating_again_keeps_the_streams_and_their_records(engine):
    # Streams that exist are not "made" by a second creation, so a later failure would not delete them.
    topic = f"top_{secrets.token_hex(6)}"
    await engine.create_topic(topic, 2, TopicLogConfig(replicas=3))
    await engine.append(topic, {1: [RecordIn(b"kept")]})
    await engine.create_topic(topic, 2, TopicLogConfig(replicas=3))
    assert [r.value for r in await engine.read(topic, 1, 0)] == [b"kept"]
    await engine.delete_topic(topic)


async def test_many_partitions_are_created_and_deleted_whole(engine):
    topic = f"top_{secrets.token_hex(6)}"
    await engine.create_topic(topic, 48, TopicLogConfig(replicas=3))
    assert await engine.streams.partitions(topic) == list(range(48))
    await engine.append(topic, {47: [RecordIn(b"last")]})
    await engine.delete_topic(topic)
    assert await streams_left(engine, topic) == []


async def test_the_replicas_of_each_stream_are_in_three_zones(engine, nats_cluster):
    # The session's cluster is three nodes in three zones with unique_tag "az": one replica per zone.
    zone_of = {f"n{node.index}": node.zone for node in nats_cluster.nodes}
    topic = f"top_{secrets.token_hex(6)}"
    await engine.create_topic(topic, 3, TopicLogConfig(replicas=3))
    try:
        for partition in range(3):
            cluster = (await engine.streams.info(topic, partition))["cluster"]
            servers = [cluster["leader"], *(replica["name"] for replica in cluster.get("replicas", []))]
            assert sorted(zone_of[name] for name in servers) == ["zone-a", "zone-b", "zone-c"], cluster
    finally:
        await engine.delete_topic(topic)
