"""The bare-message batch path (``plain_batch`` + ``Publisher.publish_plain``) says and stores exactly
what the general path (``parse_batch`` + ``publish_batch`` + ``results``) does for the same batches."""

from __future__ import annotations

from contextlib import AsyncExitStack

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.broker import message_ids, publishing
from app.broker.publishing import Publisher
from app.broker.topics import TopicRef
from app.stores.log.local import LocalLogConfig, LocalLogEngine
from app.stores.log.protocol import TopicLogConfig

TOPIC = "top_00000000plainbat"


class _FixedDirectory:
    def __init__(self, topic: TopicRef) -> None:
        self.topic = topic

    async def resolve(self, scope, name):
        return self.topic


async def _publisher(stack: AsyncExitStack, root, partitions: int) -> tuple[Publisher, LocalLogEngine]:
    engine = LocalLogEngine(root, LocalLogConfig())
    await engine.start()
    stack.push_async_callback(engine.close)
    await engine.create_topic(TOPIC, partitions, TopicLogConfig())
    ref = TopicRef(TOPIC, "t", partitions, "exactly-once", message_ids.topic_prefix(TOPIC), 1)
    return Publisher(engine, _FixedDirectory(ref)), engine  # type: ignore[arg-type]


class TestPlainBatch:
    @pytest.mark.parametrize(
        "body",
        [
            [],
            {"messages": [{"data": 1}], "extra": 1},
            {"messages": {"data": 1}},
            {"messages": []},
            {"messages": [{"data": 1}] * 1001},
            {"messages": [{"data": 1}, {"data": 2, "key": "k"}]},
            {"messages": [{"data": 1}, {"data": 2, "idempotencyKey": "i"}]},
            {"messages": [{"data": 1}, [1]]},
            {"messages": [{"data": 1}, {"key": "k"}]},
            {"messages": [{"data": "x" * (256 * 1024)}]},
        ],
    )
    def test_anything_but_bare_messages_goes_the_general_way(self, body):
        assert publishing.plain_batch(body) is None

    def test_bare_messages_are_their_data_as_json(self):
        body = {"messages": [{"data": None}, {"data": {"a": [1, 2.5, "é"]}}, {"data": "x" * 262142}]}
        assert publishing.plain_batch(body) == [m.data for m in publishing.parse_batch(body)]

    @pytest.mark.parametrize("partitions", [1, 2, 3, 5])
    async def test_answers_and_records_match_the_general_path(self, tmp_path, monkeypatch, partitions):
        monkeypatch.setattr(publishing, "now_ms", lambda: 1_764_000_000_123)
        async with AsyncExitStack() as stack:
            plain, plain_engine = await _publisher(stack, tmp_path / "plain", partitions)
            general, general_engine = await _publisher(stack, tmp_path / "general", partitions)
            # Sizes that end between partitions and cross the 128-offset steps of the ids.
            for size in (1, 2, 3, 5, 130, 1000, 7, 256):
                body = {"messages": [{"data": {"n": size, "i": i}} for i in range(size)]}
                values = publishing.plain_batch(body)
                assert values is not None
                _, items = await plain.publish_plain(None, "t", values)
                topic, placed, _ = await general.publish_batch(None, "t", publishing.parse_batch(body))
                assert items == general.results_json(topic, placed)
                assert items == orjson.dumps([general.result(topic, at) for at in placed])
            for p in range(partitions):
                ours = await plain_engine.read(TOPIC, p, 0, max_records=5000, max_bytes=1 << 30)
                theirs = await general_engine.read(TOPIC, p, 0, max_records=5000, max_bytes=1 << 30)
                assert ours == theirs and ours


class TestIdRuns:
    @given(partition=st.integers(0, 300), first=st.integers(0, 2**40), count=st.integers(1, 400))
    def test_a_run_is_each_id_in_turn(self, partition, first, count):
        ids = message_ids.encode_run(TOPIC, partition, first, count)
        assert ids == [message_ids.encode(TOPIC, partition, o).encode() for o in range(first, first + count)]

    def test_runs_cross_the_varint_steps(self):
        for first in (0, 100, 16_300, 2_097_100):
            ids = message_ids.encode_run(TOPIC, 1, first, 300)
            assert ids == [message_ids.encode(TOPIC, 1, o).encode() for o in range(first, first + 300)]
