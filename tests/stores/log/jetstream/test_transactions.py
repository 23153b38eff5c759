"""Cross-partition appends on JetStream: a commit record left behind by a publisher that died is rolled
forward by another node, whole, and a part applied before the death is not applied twice."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine, codec
from app.stores.log.protocol import LogEngineError, RecordIn, TopicLogConfig


async def _engine(url: str, **overrides: float) -> JetStreamLogEngine:
    engine = JetStreamLogEngine(JetStreamConfig(servers=tuple(url.split(",")), **overrides))  # type: ignore[arg-type]
    await engine.start()
    return engine


async def _values(engine: JetStreamLogEngine, topic: str, partition: int) -> list[bytes]:
    return [r.value for r in await engine.read(topic, partition, 0, max_records=1000)]


@pytest.fixture
async def publisher(nats_cluster):
    # Recovery never runs on its own here (a day between rounds): it stands for the publisher that dies.
    engine = await _engine(nats_cluster.url, recovery_interval_seconds=86_400)
    yield engine
    await engine.close()


class TestRollForward:
    @pytest.mark.parametrize("applied_before_death", [(), (0,)])
    async def test_a_dead_publishers_commit_record_is_applied_whole_once(
        self, nats_cluster, publisher, applied_before_death
    ):
        topic = f"top_{secrets.token_hex(6)}"
        await publisher.create_topic(topic, 3, TopicLogConfig(replicas=3))
        await publisher.append(topic, {1: [RecordIn(value=b"before")]})
        stamp = 1_700_000_000_000
        frames = {
            p: [codec.encode(RecordIn(value=f"p{p}-{i}".encode()), stamp) for i in range(p + 2)]
            for p in range(3)
        }
        txns = publisher._transactions()
        txn_id = txns.new_id()
        await txns.commit(txn_id, topic, frames)  # step 1 done: the append has happened
        for partition in applied_before_death:  # step 2 partly done, then the publisher is gone
            await publisher.appends.store(topic, partition, frames[partition], f"{txn_id}.{partition}")
        assert (
            await _values(publisher, topic, 2) == []
        )  # not applied yet: nobody sees any of partition 2's part

        # Another node, recovering commit records older than 0.2 s every 0.1 s.
        other = await _engine(nats_cluster.url, recover_after_seconds=0.2, recovery_interval_seconds=0.1)
        try:
            for _ in range(100):
                if len(await _values(other, topic, 2)) == 4:
                    break
                await asyncio.sleep(0.1)
            assert await _values(other, topic, 0) == [b"p0-0", b"p0-1"]  # once, also when applied before
            assert await _values(other, topic, 1) == [b"before", b"p1-0", b"p1-1", b"p1-2"]
            assert await _values(other, topic, 2) == [b"p2-0", b"p2-1", b"p2-2", b"p2-3"]
            # And the commit record is gone: a later round applies nothing again.
            info = await other.client.api(f"STREAM.INFO.{codec.TXN_STREAM}")
            await asyncio.sleep(0.5)
            assert await _values(other, topic, 0) == [b"p0-0", b"p0-1"]
            assert not any(
                m.headers and m.headers.get("Nats-Subject") == codec.TXN_SUBJECT_PREFIX + txn_id
                for _, _, m in await other.client.direct_get(
                    codec.TXN_STREAM, int(info["state"].get("first_seq", 1)), 1000, 8 << 20
                )
            )
        finally:
            await other.close()


class TestFinishAfterAFailedApply:
    async def test_the_committing_node_applies_the_rest_itself_without_waiting_for_recovery(
        self, nats_cluster, publisher
    ):
        """A partition refuses its part (its stream takes no more messages: a real refusal by the server,
        standing for a stream without a leader): the publisher hears an error, and the node applies the part
        again in the background until the stream takes it. Recovery never runs here (``publisher``), so
        only that retry can complete the batch."""
        topic = f"top_{secrets.token_hex(6)}"
        await publisher.create_topic(topic, 3, TopicLogConfig(replicas=3))
        name = codec.stream_name(topic, 2)
        config = (await publisher.client.api(f"STREAM.INFO.{name}", stream=name))["config"]
        # One message, then refuse new ones: filled with one record first.
        await publisher.client.api(
            f"STREAM.UPDATE.{name}", {**config, "max_msgs": 1, "discard": "new"}, stream=name
        )
        await publisher.append(topic, {2: [RecordIn(value=b"only")]})
        batch = {p: [RecordIn(value=f"p{p}".encode())] for p in range(3)}
        with pytest.raises(LogEngineError):
            await publisher.append(topic, batch)
        assert await _values(publisher, topic, 0) == [b"p0"]  # applied where it could be
        assert await _values(publisher, topic, 2) == [b"only"]  # refused there
        await publisher.client.api(f"STREAM.UPDATE.{name}", config, stream=name)
        for _ in range(300):
            if await _values(publisher, topic, 2) == [b"only", b"p2"]:
                break
            await asyncio.sleep(0.1)
        assert await _values(publisher, topic, 2) == [b"only", b"p2"]
        assert [await _values(publisher, topic, p) for p in (0, 1)] == [[b"p0"], [b"p1"]]  # once each


class TestALateCommitRecordOfKeyedRecords:
    async def test_is_refused_where_a_retry_stored_its_keyed_records(self, nats_cluster, publisher):
        """A publisher's commit record is stored, its answer lost (503); a retry elsewhere stores the same
        keyed records in a new transaction; then recovery rolls the first forward. Each part holding a
        record the retry stored is refused by that record's message id (kept in the commit record), so no
        keyed record is stored twice."""
        topic = f"top_{secrets.token_hex(6)}"
        await publisher.create_topic(topic, 2, TopicLogConfig(replicas=3))
        batch = {
            0: [RecordIn(value=b"k0", dedupe_id="key-0"), RecordIn(value=b"plain")],
            1: [RecordIn(value=b"k1", dedupe_id="key-1")],
        }
        stamp = 1_700_000_000_000
        frames = {p: [codec.encode_deduped(r, stamp) for r in rs] for p, rs in batch.items()}
        txns = publisher._transactions()
        await txns.commit(txns.new_id(), topic, frames)  # stored; the publisher never heard (nor applied)
        await publisher.append(topic, batch)  # the retry, another transaction: applied whole
        assert [await _values(publisher, topic, p) for p in (0, 1)] == [[b"k0", b"plain"], [b"k1"]]

        other = await _engine(nats_cluster.url, recover_after_seconds=0.2, recovery_interval_seconds=0.1)
        try:
            for _ in range(100):  # until recovery has dealt with the late commit record (purged it)
                info = await other.client.api(f"STREAM.INFO.{codec.TXN_STREAM}")
                if not info["state"].get("messages"):
                    break
                await asyncio.sleep(0.1)
            assert not info["state"].get("messages")
            assert [await _values(other, topic, p) for p in (0, 1)] == [[b"k0", b"plain"], [b"k1"]]
        finally:
            await other.close()

    def test_a_commit_record_chunk_keeps_its_records_message_ids(self):
        frames = [
            codec.encode_deduped(RecordIn(value=b"a", dedupe_id="key-a"), 1),
            codec.encode_deduped(RecordIn(value=b"b"), 1),
        ]
        [(chunk, dedupe)] = list(codec.chunks("t1", 3, frames))
        topic_id, partition, read = codec.read_chunk(chunk, dedupe)
        assert (topic_id, partition, read) == ("t1", 3, frames)
        assert [getattr(f, "msg_id", None) for f in read] == [frames[0].msg_id, None]  # type: ignore[attr-defined]
        assert codec.read_chunk(chunk)[2] == frames  # a reader of the release before: the same frames


class TestFinishAfterAnUnansweredCommit:
    async def test_a_commit_record_stored_without_an_answer_is_applied_without_waiting_for_recovery(
        self, nats_cluster, publisher
    ):
        """The commit request goes out but its answer does not come in time (a client timeout far below a
        round trip: the request is sent and stored all the same). The publisher hears an error; the node
        looks for the record and, finding it, applies the batch. Recovery never runs here (``publisher``)."""
        topic = f"top_{secrets.token_hex(6)}"
        await publisher.create_topic(topic, 2, TopicLogConfig(replicas=3))
        timeout = publisher.client.timeout
        publisher.client.timeout = 1e-6
        try:
            with pytest.raises(LogEngineError):
                await publisher.append(topic, {p: [RecordIn(value=f"p{p}".encode())] for p in range(2)})
        finally:
            publisher.client.timeout = timeout
        for _ in range(100):
            if [await _values(publisher, topic, p) for p in (0, 1)] == [[b"p0"], [b"p1"]]:
                break
            await asyncio.sleep(0.1)
        assert [await _values(publisher, topic, p) for p in (0, 1)] == [[b"p0"], [b"p1"]]
