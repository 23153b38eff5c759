"""The publisher over the real local engine: idempotency across restarts, its window, atomic batches."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import pytest

from app.broker import message_ids, publishing
from app.broker.errors import InvalidRequest, PayloadTooLarge
from app.broker.publishing import OutgoingMessage, Publisher
from app.broker.topics import TopicRef
from app.stores.log.local import LocalLogConfig, LocalLogEngine
from app.stores.log.protocol import TopicLogConfig, UnknownLog

TOPIC = "top_0000000000publ1sh"[:20]


class _FixedDirectory:
    """Resolves every name to one topic: the publisher's directory without a metadata store."""

    def __init__(self, topic: TopicRef) -> None:
        self.topic = topic

    async def resolve(self, scope, name):
        return self.topic

    def forget(self, scope, name):
        pass


@asynccontextmanager
async def running(root, window_ms: int = 86_400_000):
    engine = LocalLogEngine(root, LocalLogConfig())
    await engine.start()
    await engine.create_topic(TOPIC, 3, TopicLogConfig())
    ref = TopicRef(TOPIC, "t", 3, "exactly-once", message_ids.topic_prefix(TOPIC), 1)
    try:
        yield Publisher(engine, _FixedDirectory(ref), dedup_window_ms=window_ms), engine  # type: ignore[arg-type]
    finally:
        await engine.close()


def message(data: bytes = b"1", key: str | None = None, idem: str | None = None) -> OutgoingMessage:
    return OutgoingMessage(data, key, None, None, idem)


class TestIdempotency:
    async def test_replay_survives_restart(self, tmp_path):
        async with running(tmp_path) as (publisher, _):
            _, first, replayed = await publisher.publish(None, "t", message(), "order-1")
            assert not replayed
        async with running(tmp_path) as (publisher, engine):
            _, again, replayed = await publisher.publish(None, "t", message(b"2"), "order-1")
            assert replayed and (again.partition, again.offset) == (first.partition, first.offset)
            total = sum([(await engine.partition_info(TOPIC, p)).latest_offset for p in range(3)])
            assert total == 1

    async def test_window_is_configurable(self, tmp_path):
        async with running(tmp_path, window_ms=100) as (publisher, _):
            await publisher.publish(None, "t", message(), "k")
            await asyncio.sleep(0.15)
            _, _, replayed = await publisher.publish(None, "t", message(), "k")
            assert not replayed

    async def test_failed_append_releases_the_key(self, tmp_path):
        async with running(tmp_path) as (publisher, engine):
            await engine.delete_topic(TOPIC)
            with pytest.raises(UnknownLog):
                await publisher.publish(None, "t", message(), "k2")
            await engine.create_topic(TOPIC, 3, TopicLogConfig())
            _, placed, replayed = await publisher.publish(None, "t", message(), "k2")
            assert not replayed and placed.offset == 0

    async def test_a_topic_deleted_here_takes_its_keys_with_it(self, tmp_path):
        async with running(tmp_path) as (publisher, engine):
            await publisher.publish(None, "t", message(), "k3")
            await engine.delete_topic(TOPIC)
            await engine.create_topic(TOPIC, 3, TopicLogConfig())
            publisher.topic_deleted(None, "t", TOPIC)  # type: ignore[arg-type]
            _, placed, replayed = await publisher.publish(None, "t", message(), "k3")
            assert not replayed and placed.offset == 0


class TestBatches:
    async def test_batch_spans_partitions_atomically_in_order(self, tmp_path):
        async with running(tmp_path) as (publisher, engine):
            batch = [message(str(i).encode(), key=f"k{i % 5}") for i in range(50)]
            _, placed, replayed = await publisher.publish_batch(None, "t", batch)
            assert not any(replayed) and len(placed) == 50
            for p in range(3):
                offsets = [pl.offset for pl in placed if pl.partition == p]
                assert offsets == list(range(len(offsets)))
                records = await engine.read(TOPIC, p, 0, max_records=100)
                assert [r.value for r in records] == [
                    batch[i].data for i, pl in enumerate(placed) if pl.partition == p
                ]

    def test_parse_batch_limits(self):
        with pytest.raises(InvalidRequest):
            publishing.parse_batch({"messages": []})
        with pytest.raises(PayloadTooLarge):
            publishing.parse_batch({"messages": [{"data": "x" * (256 * 1024)}]})
        parsed = publishing.parse_batch(
            {"messages": [{"data": None}, {"data": [1], "key": "k", "idempotencyKey": "i"}]}
        )
        assert parsed[0].data == b"null" and parsed[1].idempotency_key == "i"
