"""The publisher over the real local engine: idempotency across restarts, its window, atomic batches."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import orjson
import pytest

from app.broker import message_ids, publishing
from app.broker.errors import InvalidRequest, PayloadTooLarge
from app.broker.messages import decode_headers, encode_headers
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

    async def test_a_record_with_only_an_idempotency_key_stores_its_headers_as_before(self, tmp_path):
        # The bytes every earlier version wrote (and a restart's rebuild reads), made without a dict now.
        async with running(tmp_path) as (publisher, engine):
            keys = ["plain", 'quote " and é', "x" * 256]
            _, placed, _ = await publisher.publish_batch(None, "t", [message(idem=k) for k in keys])
            for key, at in zip(keys, placed, strict=True):
                [record] = await engine.read(TOPIC, at.partition, at.offset, max_records=1)
                assert record.headers == orjson.dumps({"h": None, "i": key})
                assert encode_headers(None, key) == record.headers
                assert decode_headers(record.headers) == ({}, key)

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

    async def test_a_key_being_written_is_answered_to_every_request_that_sends_it(self, tmp_path):
        # Three batches at once share keys: each key is written once, by the first request to send it,
        # and the others answer its placement as replays (their own new keys are written by them).
        async with running(tmp_path) as (publisher, engine):
            batches = [[message(b"%d" % i, idem=f"shared-{i}") for i in range(20)] for _ in range(3)]
            for n, batch in enumerate(batches):
                batch.append(message(b"own", idem=f"own-{n}"))
            answers = await asyncio.gather(*(publisher.publish_batch(None, "t", b) for b in batches))
            placements = [[(at.partition, at.offset) for at in placed] for _, placed, _ in answers]
            assert placements[0][:20] == placements[1][:20] == placements[2][:20]
            assert [replayed.count(True) for _, _, replayed in answers] == [0, 20, 20]
            total = sum([(await engine.partition_info(TOPIC, p)).latest_offset for p in range(3)])
            assert total == 23

    async def test_a_failed_write_reaches_the_requests_waiting_for_its_keys_and_frees_them(self, tmp_path):
        async with running(tmp_path) as (publisher, engine):
            await engine.delete_topic(TOPIC)
            keys = [f"k{i}" for i in range(5)]
            results = await asyncio.gather(
                *(publisher.publish_batch(None, "t", [message(idem=k) for k in keys]) for _ in range(3)),
                return_exceptions=True,
            )
            assert all(isinstance(r, UnknownLog) for r in results), results
            await engine.create_topic(TOPIC, 3, TopicLogConfig())
            _, placed, replayed = await publisher.publish_batch(None, "t", [message(idem=k) for k in keys])
            assert not any(replayed) and len(placed) == 5


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

    @pytest.mark.parametrize(
        "item",
        [
            {"data": {"a": 1}, "idempotencyKey": "k"},
            {"data": [1, "é"], "idempotencyKey": "k" * 256, "partition": 2},
            {"data": None, "idempotencyKey": "k", "partition": None},
            {"data": 1, "idempotencyKey": "k", "partition": 0},
        ],
    )
    def test_an_item_with_a_key_and_a_partition_parses_as_parse_message_says(self, item):
        # parse_batch takes these shapes (an SDK's and Spark's items) without calling parse_message.
        expected = publishing.parse_message(item, index=0, allow_idempotency_key=True)
        assert publishing.parse_batch({"messages": [item]}) == [expected]

    @pytest.mark.parametrize(
        ("item", "field"),
        [
            ({"data": 1, "idempotencyKey": ""}, "messages[0].idempotencyKey"),
            ({"data": 1, "idempotencyKey": "k" * 257}, "messages[0].idempotencyKey"),
            ({"data": 1, "idempotencyKey": "a\nb"}, "messages[0].idempotencyKey"),
            ({"data": 1, "idempotencyKey": 7}, "messages[0].idempotencyKey"),
            ({"data": 1, "idempotencyKey": "k", "partition": -1}, "messages[0].partition"),
            ({"data": 1, "idempotencyKey": "k", "partition": True}, "messages[0].partition"),
            ({"data": 1, "idempotencyKey": "k", "partition": "1"}, "messages[0].partition"),
            ({"data": 1, "idempotencyKey": "k", "extra": 1}, "messages[0].extra"),
            ({"idempotencyKey": "k", "partition": 1}, "messages[0].data"),
        ],
    )
    def test_a_wrong_item_of_those_shapes_is_refused_naming_its_field(self, item, field):
        with pytest.raises(InvalidRequest) as refused:
            publishing.parse_batch({"messages": [item]})
        assert refused.value.details[0]["field"] == field
