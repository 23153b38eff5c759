"""Append-once across API nodes (``app.broker.idempotency``): ``SharedIdempotency`` over the idempotency
records of the real JetStream engine (``engine.idempotency_records``) on the session's 3-node cluster.

Two engines, two connections, stand for two API nodes. Each node's ``write`` appends the messages to the
topic's log (the idempotency key in the record's key, where ``key_of`` finds it) and counts its calls, so
a test sees exactly what was appended, by whom. What must hold:

* keys repeated in one batch are appended once and answer the first one's placement, as replays;
* a key seen before (on any node) answers its original placement and appends nothing;
* a pending claim is waited for and answered once placed; one left stale (its node died mid-append),
  or pending past ``stale_after``, is taken over and its message appended by the waiter;
* an ``unknown`` record (an append failed in a way that may have stored it) whose message IS in the log
  is answered from the log and placed there; one whose message is not is taken over and appended;
* a failed write leaves its keys ``unknown``, and the error reaches the caller;
* two concurrent appends of one key on two nodes append it once, and both answer the same placement.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from app.broker.idempotency import SharedIdempotency, shared_idempotency
from app.broker.publishing import Receipt
from app.kit.clock import now_ms
from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine
from app.stores.log.protocol import EngineUnavailable, Record, RecordIn, TopicLogConfig
from tests.stores.log.conftest import open_local
from tests.system.faults.latency_proxy import LatencyProxy

WINDOW = 600.0
HANG_GUARD = 30.0  # how long an append may take before the test fails instead of hanging


def key_of(record: Record) -> str | None:
    return record.key.decode() if record.key is not None else None


class Node:
    """One API node: its own engine connection, its SharedIdempotency, and the writes it made."""

    def __init__(self, engine: JetStreamLogEngine, topic: str, *, stale_after: float = 15.0) -> None:
        self.engine = engine
        self.topic = topic
        self.records = engine.idempotency_records(WINDOW)
        self.shared = SharedIdempotency(self.records, engine, stale_after=stale_after)
        self.writes: list[list[str | None]] = []  # the keys of each write, in order
        self.fail_next_write = False

    async def append(self, keys: Sequence[str | None]) -> tuple[list[Receipt], list[bool]]:
        async def write(indexes: list[int]) -> list[Receipt]:
            self.writes.append([keys[i] for i in indexes])
            if self.fail_next_write:
                self.fail_next_write = False
                raise EngineUnavailable("the append timed out")
            return await store(self.engine, self.topic, [keys[i] for i in indexes])

        async with asyncio.timeout(HANG_GUARD):
            return await self.shared.append(self.topic, 1, keys, write, Receipt, key_of)


async def store(engine: JetStreamLogEngine, topic: str, keys: Sequence[str | None]) -> list[Receipt]:
    """Append one record per key to partition 0 (the key in the record's key); their placements."""
    stamp = now_ms()
    records = [RecordIn(value=b"message", key=k.encode() if k else None, timestamp_ms=stamp) for k in keys]
    base = (await engine.append(topic, {0: records}))[0]
    return [Receipt(0, base + i, stamp, 1) for i in range(len(keys))]


async def log_keys(engine: JetStreamLogEngine, topic: str) -> list[str | None]:
    return [key_of(r) for r in await engine.read(topic, 0, 0, max_records=1000)]


@pytest.fixture
async def engines(nats_cluster) -> AsyncIterator[tuple[JetStreamLogEngine, JetStreamLogEngine]]:
    opened = []
    for _ in range(2):
        engine = JetStreamLogEngine(JetStreamConfig(servers=tuple(nats_cluster.url.split(","))))
        await engine.start()
        opened.append(engine)
    try:
        yield opened[0], opened[1]
    finally:
        for engine in opened:
            await engine.close()


@pytest.fixture
async def topic(engines) -> AsyncIterator[str]:
    topic = f"top_{secrets.token_hex(6)}"
    await engines[0].create_topic(topic, 1, TopicLogConfig(replicas=1))
    yield topic
    await engines[0].delete_topic(topic)


@pytest.fixture
def nodes(engines, topic) -> tuple[Node, Node]:
    return Node(engines[0], topic), Node(engines[1], topic)


class TestOneRequest:
    async def test_keys_repeated_in_a_batch_are_appended_once_and_answer_the_first_ones_placement(
        self, nodes, topic
    ) -> None:
        a, _ = nodes
        placed, replayed = await a.append(["k1", None, "k1", "k2", "k2", None, "k1"])
        assert a.writes == [["k1", None, "k2", None]]
        assert replayed == [False, False, True, False, True, False, True]
        assert placed[2] == placed[6] == placed[0] and placed[4] == placed[3]
        assert [p.offset for p in (placed[0], placed[1], placed[3], placed[5])] == [0, 1, 2, 3]
        assert await log_keys(a.engine, topic) == ["k1", None, "k2", None]

    async def test_the_record_of_a_written_key_says_where_its_message_landed(self, nodes, topic) -> None:
        a, _ = nodes
        await a.append([None, "k"])
        entry = await a.records.get(topic, "k")
        assert entry is not None
        assert (entry.state, entry.partition, entry.offset) == ("placed", 0, 1)

    async def test_messages_without_keys_are_written_every_time(self, nodes, topic) -> None:
        a, _ = nodes
        await a.append([None])
        await a.append([None, None])
        assert a.writes == [[None], [None, None]]
        assert await log_keys(a.engine, topic) == [None, None, None]


class TestReplays:
    async def test_a_replay_on_another_node_answers_the_original_placement_and_appends_nothing(
        self, nodes, topic
    ) -> None:
        a, b = nodes
        (first,), _ = await a.append(["order-17"])
        (again,), replayed = await b.append(["order-17"])
        assert replayed == [True]
        assert again == first
        assert b.writes == []
        assert await log_keys(a.engine, topic) == ["order-17"]

    async def test_a_batch_of_seen_and_new_keys_writes_only_the_new_ones(self, nodes, topic) -> None:
        a, b = nodes
        (seen,), _ = await a.append(["seen"])
        placed, replayed = await b.append(["new", "seen", None])
        assert b.writes == [["new", None]]
        assert replayed == [False, True, False]
        assert placed[1] == seen
        assert await log_keys(a.engine, topic) == ["seen", "new", None]


class TestPendingClaims:
    async def test_a_pending_claim_is_waited_for_and_its_placement_answered(self, nodes, topic) -> None:
        a, b = nodes
        claim = await a.records.claim(topic, "k", now_ms())  # node a is appending "k" right now
        assert claim.state == "won"
        waiting = asyncio.create_task(b.append(["k"]))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # b waits for a's append, it does not write one of its own
        (landed,) = await store(a.engine, topic, ["k"])
        await a.records.place(topic, "k", landed.partition, landed.offset, landed.timestamp_ms, 4)
        (answer,), replayed = await waiting
        assert replayed == [True]
        assert (answer.partition, answer.offset, answer.latency_ms) == (0, landed.offset, 4)
        assert b.writes == []
        assert await log_keys(a.engine, topic) == ["k"]

    async def test_a_stale_pending_claim_is_taken_over_and_its_message_appended(self, engines, topic) -> None:
        a = Node(engines[0], topic)
        # Longer than the hang guard: only the claim's age can make it stale in time.
        b = Node(engines[1], topic, stale_after=2 * HANG_GUARD)
        # A node claimed "k" ten minutes ago and died before appending: nothing of it is in the log.
        await a.records.claim(topic, "k", now_ms() - 600_000)
        (placed,), replayed = await b.append(["k"])
        assert replayed == [False]
        assert b.writes == [["k"]]
        assert await log_keys(a.engine, topic) == ["k"]
        entry = await a.records.get(topic, "k")
        assert entry is not None and (entry.state, entry.offset) == ("placed", placed.offset)

    async def test_a_claim_pending_longer_than_stale_after_is_taken_over(self, engines, topic) -> None:
        a = Node(engines[0], topic)
        b = Node(engines[1], topic, stale_after=0.5)
        await a.records.claim(topic, "k", now_ms())  # fresh, but its node never places it
        (_placed,), replayed = await b.append(["k"])
        assert replayed == [False]
        assert b.writes == [["k"]]
        assert await log_keys(a.engine, topic) == ["k"]

    async def test_an_unknown_record_whose_message_is_in_the_log_is_answered_from_the_log(
        self, nodes, topic
    ) -> None:
        a, b = nodes
        await store(a.engine, topic, [None, None])
        # Node a claimed "k", its append stored the message but answered an error: the record says unknown.
        await a.records.claim(topic, "k", now_ms())
        (landed,) = await store(a.engine, topic, ["k"])
        await a.records.abandon_many(topic, ["k"], now_ms())
        assert (await a.records.get(topic, "k")).state == "unknown"  # type: ignore[union-attr]
        (answer,), replayed = await b.append(["k"])
        assert replayed == [True]
        assert (answer.partition, answer.offset, answer.timestamp_ms) == (0, 2, landed.timestamp_ms)
        assert b.writes == []
        assert await log_keys(a.engine, topic) == [None, None, "k"]
        entry = await a.records.get(topic, "k")
        assert entry is not None and (entry.state, entry.offset) == ("placed", 2)

    async def test_an_unknown_record_whose_message_is_not_in_the_log_is_taken_over_and_appended(
        self, nodes, topic
    ) -> None:
        a, b = nodes
        await a.records.claim(topic, "k", now_ms())
        await store(a.engine, topic, ["other"])
        await a.records.abandon_many(topic, ["k"], now_ms())
        (placed,), replayed = await b.append(["k"])
        assert replayed == [False]
        assert b.writes == [["k"]]
        assert await log_keys(a.engine, topic) == ["other", "k"]
        assert placed.offset == 1


class TestFailures:
    async def test_a_failed_write_leaves_its_keys_unknown_and_reaches_the_caller(self, nodes, topic) -> None:
        a, b = nodes
        a.fail_next_write = True
        with pytest.raises(EngineUnavailable):
            await a.append(["k1", None, "k2"])
        for key in ("k1", "k2"):
            entry = await a.records.get(topic, key)
            assert entry is not None and entry.state == "unknown"
        # The retry (here on the other node) finds nothing in the log and appends them, once.
        placed, replayed = await b.append(["k1", None, "k2"])
        assert replayed == [False, False, False]
        assert b.writes == [["k1", None, "k2"]]
        assert await log_keys(a.engine, topic) == ["k1", None, "k2"]
        assert [p.offset for p in placed] == [0, 1, 2]


class TestConcurrentNodes:
    @pytest.mark.parametrize("round_", range(3))
    async def test_two_concurrent_appends_of_one_key_on_two_nodes_append_once(
        self, nodes, topic, round_: int
    ) -> None:
        a, b = nodes
        key = f"race-{round_}"
        (one, two) = await asyncio.gather(a.append([key]), b.append([key]))
        assert len(a.writes) + len(b.writes) == 1
        assert one[0] == two[0]
        assert sorted([one[1][0], two[1][0]]) == [False, True]
        assert await log_keys(a.engine, topic) == [key]


class TestWhereShared:
    async def test_an_engine_shared_by_processes_gets_shared_idempotency_and_an_exclusive_one_none(
        self, engines, tmp_path: Path
    ) -> None:
        assert isinstance(shared_idempotency(engines[0], 60_000), SharedIdempotency)
        local = await open_local(tmp_path / "log")
        try:
            assert shared_idempotency(local, 60_000) is None
        finally:
            await local.close()


class TestALinkCutMidAppend:
    async def test_an_append_the_node_could_not_send_is_never_sent_after_the_retry_took_over(
        self, lone_nats
    ) -> None:
        """Node a claims "k", then loses its link to NATS before its append goes out; the client's retry
        on node b takes the stale claim over and appends "k". When a's link comes back, its append must
        not go out then: it was answered 503 long before, and "k" would be stored twice (nats-py keeps
        what is published while reconnecting and sends it on reconnecting, however late)."""
        host, port = lone_nats.removeprefix("nats://").rsplit(":", 1)
        link = LatencyProxy(host, int(port))
        await link.start()
        listen = link.port
        cut_off = JetStreamLogEngine(
            JetStreamConfig(
                servers=(f"nats://127.0.0.1:{listen}",), default_replicas=1, request_timeout_seconds=1.0
            )
        )
        direct = JetStreamLogEngine(JetStreamConfig(servers=(lone_nats,), default_replicas=1))
        await cut_off.start()
        await direct.start()
        topic = f"top_{secrets.token_hex(6)}"
        await direct.create_topic(topic, 1, TopicLogConfig(replicas=1))
        try:
            await store(cut_off, topic, [None])  # node a knows the topic's stream: its append is one request
            a = Node(cut_off, topic)
            b = Node(direct, topic, stale_after=1.0)
            severed = False

            async def write_behind_a_cut(indexes: list[int]) -> list[Receipt]:
                nonlocal severed
                await link.close()  # every connection through it ends; none is accepted
                severed = True
                while cut_off.nc is None or cut_off.nc.is_connected:
                    await asyncio.sleep(0.01)
                return await store(cut_off, topic, ["k"])

            with pytest.raises(EngineUnavailable):
                async with asyncio.timeout(HANG_GUARD):
                    await a.shared.append(topic, 1, ["k"], write_behind_a_cut, Receipt, key_of)
            assert severed
            (placed,), replayed = await b.append(["k"])
            assert replayed == [False]
            link = LatencyProxy(host, int(port), listen_port=listen)
            await link.start()
            async with asyncio.timeout(HANG_GUARD):
                while cut_off.nc is None or not cut_off.nc.is_connected:
                    await asyncio.sleep(0.05)
                await cut_off.nc.flush()
            await asyncio.sleep(0.5)  # what it sent on reconnecting is stored by now
            # Read by a node that starts now: the others' view of the log's end may be older than the write.
            fresh = JetStreamLogEngine(JetStreamConfig(servers=(lone_nats,), default_replicas=1))
            await fresh.start()
            try:
                assert await log_keys(fresh, topic) == [None, "k"]
            finally:
                await fresh.close()
            assert placed.offset == 1
        finally:
            await direct.delete_topic(topic)
            await cut_off.close()
            await direct.close()
            await link.close()


async def store_deduped(engine: JetStreamLogEngine, topic: str, keys: Sequence[str]) -> list[Receipt]:
    """``store``, each record carrying its key as its dedupe id (as the publisher's keyed records do)."""
    stamp = now_ms()
    records = [RecordIn(value=b"message", key=k.encode(), timestamp_ms=stamp, dedupe_id=k) for k in keys]
    base = (await engine.append(topic, {0: records}))[0]
    return [Receipt(0, base + i, stamp, 1) for i in range(len(keys))]


class TestALateOriginal:
    async def test_a_take_over_after_the_original_landed_late_is_refused_and_answered_from_the_log(
        self, engines, topic
    ) -> None:
        """Node a claimed "k" and sent its append; it landed only after node b had found the claim stale,
        looked in the log (nothing yet) and taken it over. b's append of "k" carries the same message id
        as a's: JetStream refuses it (nothing of it stored), b answers 503, and the client's retry finds
        a's message in the log."""
        a = Node(engines[0], topic)
        b = Node(engines[1], topic, stale_after=0.5)
        await a.records.claim(topic, "k", now_ms())
        landed: list[Receipt] = []

        async def write_after_the_late_original(indexes: list[int]) -> list[Receipt]:
            landed.extend(await store_deduped(a.engine, topic, ["k"]))  # a's append, landing now
            return await store_deduped(b.engine, topic, ["k"])

        with pytest.raises(EngineUnavailable, match="stored before"):
            async with asyncio.timeout(HANG_GUARD):
                await b.shared.append(topic, 1, ["k"], write_after_the_late_original, Receipt, key_of)
        (answer,), replayed = await b.append(["k"])
        assert replayed == [True] and b.writes == []
        assert (answer.partition, answer.offset) == (0, landed[0].offset)
        assert await log_keys(a.engine, topic) == ["k"]


class TestDedupeIds:
    async def test_a_record_sent_twice_is_stored_once_and_a_batch_holding_it_not_at_all(
        self, engines, topic
    ) -> None:
        engine = engines[0]
        await store_deduped(engine, topic, ["k1"])
        with pytest.raises(EngineUnavailable, match="stored before"):
            await store_deduped(engines[1], topic, ["k1"])
        with pytest.raises(EngineUnavailable, match="stored before"):
            await store_deduped(engine, topic, ["k2", "k1", "k3"])
        await store_deduped(engine, topic, ["k2", "k3"])
        await store(engine, topic, [None, None])  # records without ids are stored every time
        assert await log_keys(engine, topic) == ["k1", "k2", "k3", None, None]


class TestALostAck:
    async def test_a_message_stored_long_before_its_append_failed_is_found_by_the_retry(
        self, nodes, topic
    ) -> None:
        """Node a's append stored "k", but its ack was lost: the append failed seconds later (a NATS
        restart: a request timeout, then a wait for the link). The retry on node b must find "k" in the
        log, where it was stored, rather than look only from the failure's time on and store it again."""
        a, b = nodes

        async def stored_then_failed(indexes: list[int]) -> list[Receipt]:
            await store(a.engine, topic, ["k"])
            await asyncio.sleep(5.5)  # longer than the scan's allowance for clock skew (5 s)
            raise EngineUnavailable("JetStream did not acknowledge an append: TimeoutError")

        with pytest.raises(EngineUnavailable):
            async with asyncio.timeout(HANG_GUARD):
                await a.shared.append(topic, 1, ["k"], stored_then_failed, Receipt, key_of)
        (answer,), replayed = await b.append(["k"])
        assert replayed == [True] and b.writes == []
        assert (answer.partition, answer.offset) == (0, 0)
        assert await log_keys(a.engine, topic) == ["k"]
