"""Every log engine honours one contract (``app/stores/log/protocol.py``).

The classes run every scenario on every backend in ``BACKENDS`` (``local`` and ``jetstream``),
through the indirect ``log_backend`` fixture. Scenarios use only the protocol, so they say nothing about
segments or files; backend-specific behaviour is tested beside each backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

import pytest

from app.kit.clock import now_ms
from app.stores.log.protocol import (
    LogEngine,
    LogEngineError,
    RecordIn,
    RecordTooLarge,
    TopicLogConfig,
    UnknownLog,
    ValueRecords,
)
from tests.stores.log import batch_writer
from tests.stores.log.conftest import BACKENDS, start_child

every_engine = pytest.mark.parametrize("log_backend", BACKENDS, indirect=True)


def values(records) -> list[bytes]:
    return [r.value for r in records]


def batch(prefix: str, n: int, **kwargs) -> list[RecordIn]:
    return [RecordIn(value=f"{prefix}-{i}".encode(), **kwargs) for i in range(n)]


async def read_all(engine: LogEngine, topic: str, partition: int, offset: int = 0) -> list:
    out = []
    while True:
        chunk = await engine.read(topic, partition, offset, max_records=500)
        if not chunk:
            return out
        out.extend(chunk)
        offset = chunk[-1].offset + 1


@every_engine
class TestTopics:
    async def test_created_topic_is_empty(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 3, TopicLogConfig())
        for p in range(3):
            info = await engine.partition_info(topic, p)
            assert (info.partition, info.earliest_offset, info.latest_offset) == (p, 0, 0)
            assert await engine.read(topic, p, 0) == []

    async def test_create_is_idempotent(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        await engine.append(topic, {0: batch("a", 3)})
        await engine.create_topic(topic, 2, TopicLogConfig())
        assert (await engine.partition_info(topic, 0)).latest_offset == 3

    async def test_add_partitions_keeps_existing_ones(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        await engine.append(topic, {0: batch("a", 2)})
        await engine.add_partitions(topic, 4)
        assert (await engine.partition_info(topic, 0)).latest_offset == 2
        for p in (1, 2, 3):
            assert (await engine.partition_info(topic, p)).latest_offset == 0
        assert await engine.append(topic, {3: batch("b", 2)}) == {3: 0}

    async def test_delete_removes_the_topic(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        await engine.append(topic, {0: batch("a", 2)})
        await engine.delete_topic(topic)
        with pytest.raises(UnknownLog):
            await engine.partition_info(topic, 0)
        await engine.delete_topic(topic)  # idempotent

    async def test_recreated_topic_starts_empty(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        await engine.append(topic, {0: batch("a", 5)})
        await engine.delete_topic(topic)
        await engine.create_topic(topic, 1, TopicLogConfig())
        assert (await engine.partition_info(topic, 0)).latest_offset == 0
        assert await engine.read(topic, 0, 0) == []


@every_engine
class TestDescribePartitions:
    async def test_every_partition_in_order_with_its_offsets(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 3, TopicLogConfig())
        await engine.append(topic, {1: batch("a", 2), 2: batch("b", 1)})
        described = await engine.describe_partitions(topic, 3)
        assert [(d.partition, d.earliest_offset, d.latest_offset) for d in described] == [
            (0, 0, 0),
            (1, 0, 2),
            (2, 0, 1),
        ]
        for d in described:
            info = await engine.partition_info(topic, d.partition)
            assert (info.earliest_offset, info.latest_offset) == (d.earliest_offset, d.latest_offset)

    async def test_where_the_copies_live(self, engine, log_backend, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        for described in await engine.describe_partitions(topic, 2):
            replicas = described.replicas
            # As many copies as the topic keeps, on as many servers, the leader first and alone.
            assert len(replicas) == engine.default_replicas
            assert len({r.server for r in replicas}) == len(replicas)
            assert replicas[0].leader and replicas[0].current and replicas[0].lag == 0
            assert not any(r.leader for r in replicas[1:])
            if log_backend.kind == "jetstream":
                # The session cluster's three servers are tagged az:zone-a/-b/-c (infra/nats_cluster.py), and
                # JetStream's unique_tag puts each copy in a zone of its own.
                assert {r.server for r in replicas} == {"n0", "n1", "n2"}
                assert sorted(r.zone or "" for r in replicas) == ["zone-a", "zone-b", "zone-c"]
                assert {r.server: r.zone for r in replicas} == {
                    "n0": "zone-a",
                    "n1": "zone-b",
                    "n2": "zone-c",
                }
            else:
                # One copy, on this machine, in no zone unless one is configured (tests/stores/log/local).
                assert replicas[0].zone is None

    async def test_a_partition_info_after_a_describe_knows_the_zones(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        [described] = await engine.describe_partitions(topic, 1)
        info = await engine.partition_info(topic, 0)
        assert {r.server: r.zone for r in info.replicas} == {r.server: r.zone for r in described.replicas}


@every_engine
class TestUnknownLog:
    async def test_every_call_on_an_unknown_topic_raises(self, engine, topic_id):
        topic = topic_id()
        calls = [
            engine.append(topic, {0: batch("a", 1)}),
            engine.read(topic, 0, 0),
            engine.offset_for_time(topic, 0, 0),
            engine.partition_info(topic, 0),
            engine.describe_partitions(topic, 2),
            engine.wait_for(topic, 0, 0, 0.01),
            engine.add_partitions(topic, 2),
            engine.update_config(topic, TopicLogConfig(retention_ms=1)),
        ]
        for call in calls:
            with pytest.raises(UnknownLog):
                await call

    async def test_unknown_partition_raises_and_appends_nothing(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        with pytest.raises(UnknownLog):
            await engine.read(topic, 2, 0)
        with pytest.raises(UnknownLog):
            await engine.append(topic, {0: batch("a", 1), 2: batch("b", 1)})
        assert (await engine.partition_info(topic, 0)).latest_offset == 0


@every_engine
class TestDeletionRace:
    """Appends and reads that meet their topic being deleted fail with ``UnknownLog`` (the edge answers 404
    ``TOPIC_NOT_FOUND``), never another error, and nothing of them is half-written."""

    async def test_appends_and_reads_during_a_delete_succeed_whole_or_meet_an_unknown_log(
        self, engine, topic_id
    ):
        topic = topic_id()
        partitions = 4
        await engine.create_topic(topic, partitions, TopicLogConfig())
        await engine.append(topic, {p: batch(f"seed{p}", 3) for p in range(partitions)})
        outcomes: list[str] = []
        unexpected: list[BaseException] = []
        deleted = asyncio.Event()

        def record(error: BaseException | None) -> None:
            if error is None:
                outcomes.append("ok")
            elif isinstance(error, UnknownLog):
                outcomes.append("unknown")
            else:
                unexpected.append(error)

        async def appender(n: int) -> None:
            i = 0
            while not deleted.is_set() or i < 3:
                i += 1
                p = (n + i) % partitions
                # Single-partition and multi-partition (atomic) appends alike.
                records = (
                    {p: batch(f"a{n}.{i}", 2)} if i % 2 else {q: batch(f"t{n}.{i}", 2) for q in range(2)}
                )
                try:
                    bases = await engine.append(topic, records)
                except BaseException as error:  # noqa: BLE001 - judged below
                    record(error)
                else:
                    assert set(bases) == set(records)
                    record(None)
                await asyncio.sleep(0)

        async def reader(n: int) -> None:
            i = 0
            while not deleted.is_set() or i < 3:
                i += 1
                p = (n + i) % partitions
                try:
                    got = await engine.read(topic, p, 0, max_records=1000)
                    await engine.partition_info(topic, p)
                except BaseException as error:  # noqa: BLE001 - judged below
                    record(error)
                else:
                    # Whole records, dense from the earliest: nothing half-written is ever read.
                    assert [r.offset for r in got] == list(range(len(got)))
                    assert all(r.value.count(b"-") == 1 for r in got)
                    record(None)
                await asyncio.sleep(0)

        async def deleter() -> None:
            await asyncio.sleep(0.05)
            await engine.delete_topic(topic)
            deleted.set()

        await asyncio.gather(*(appender(n) for n in range(4)), *(reader(n) for n in range(4)), deleter())
        assert unexpected == [], unexpected
        assert "unknown" in outcomes and "ok" in outcomes
        with pytest.raises(UnknownLog):
            await engine.append(topic, {0: batch("late", 1)})
        with pytest.raises(UnknownLog):
            await engine.read(topic, 0, 0)
        # A topic of the same id made afterwards starts empty: no record of the race survives in it.
        await engine.create_topic(topic, partitions, TopicLogConfig())
        for p in range(partitions):
            assert (await engine.partition_info(topic, p)).latest_offset == 0
            assert await engine.read(topic, p, 0) == []

    async def test_a_waiter_on_a_deleted_topic_meets_an_unknown_log(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        waiting = asyncio.create_task(engine.wait_for(topic, 0, 0, 5.0))
        await asyncio.sleep(0.05)
        await engine.delete_topic(topic)
        # Woken (False: nothing was committed) or told the log is gone; the next look says so either way.
        with contextlib.suppress(UnknownLog):
            assert await waiting is False
        with pytest.raises(UnknownLog):
            await engine.wait_for(topic, 0, 0, 0.01)


@every_engine
class TestAppendAndRead:
    async def test_offsets_are_dense_from_zero(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        assert await engine.append(topic, {0: batch("a", 3)}) == {0: 0}
        assert await engine.append(topic, {0: batch("b", 1)}) == {0: 3}
        assert await engine.append(topic, {0: batch("c", 2)}) == {0: 4}
        records = await engine.read(topic, 0, 0)
        assert [r.offset for r in records] == list(range(6))
        assert values(records) == [b"a-0", b"a-1", b"a-2", b"b-0", b"c-0", b"c-1"]
        assert (await engine.partition_info(topic, 0)).latest_offset == 6

    async def test_records_come_back_byte_identical(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        given = [
            RecordIn(value=b"", key=None, headers=None, timestamp_ms=1_700_000_000_000),
            RecordIn(value=b"\x00\xff" * 100, key=b"", headers=b"", timestamp_ms=1_700_000_000_001),
            RecordIn(value=b'{"a":1}', key=b"user-1", headers=b'{"h":"v"}', timestamp_ms=1_700_000_000_002),
            RecordIn(
                value=bytes(range(256)) * 40, key=b"k" * 300, headers=None, timestamp_ms=1_700_000_000_003
            ),
        ]
        await engine.append(topic, {0: given})
        records = await engine.read(topic, 0, 0)
        assert [(r.value, r.key, r.headers, r.timestamp_ms) for r in records] == [
            (g.value, g.key, g.headers, g.timestamp_ms) for g in given
        ]

    async def test_unset_timestamp_is_the_append_time(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        before = now_ms()
        await engine.append(topic, {0: [RecordIn(value=b"x")]})
        (record,) = await engine.read(topic, 0, 0)
        assert before <= record.timestamp_ms <= now_ms()

    async def test_read_from_the_middle_and_past_the_end(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        await engine.append(topic, {0: batch("a", 10)})
        assert [r.offset for r in await engine.read(topic, 0, 7)] == [7, 8, 9]
        assert await engine.read(topic, 0, 10) == []
        assert await engine.read(topic, 0, 1000) == []

    async def test_max_records_and_max_bytes(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        await engine.append(topic, {0: [RecordIn(value=b"x" * 100) for _ in range(20)]})
        assert [r.offset for r in await engine.read(topic, 0, 2, max_records=3)] == [2, 3, 4]
        assert len(await engine.read(topic, 0, 0, max_bytes=350)) == 3
        # At least one record, even over max_bytes.
        assert [r.offset for r in await engine.read(topic, 0, 5, max_bytes=1)] == [5]

    async def test_reads_cross_many_batches(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        for i in range(40):
            await engine.append(topic, {0: [RecordIn(value=f"{i}-{j}".encode() * 20) for j in range(5)]})
        records = await read_all(engine, topic, 0)
        assert [r.offset for r in records] == list(range(200))
        assert records[123].value == b"24-3" * 20

    async def test_concurrent_appends_get_dense_distinct_offsets(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())

        async def writer(w: int) -> list[tuple[int, int, int]]:
            got = []
            for i in range(10):
                n = 1 + (w + i) % 4
                base = (await engine.append(topic, {0: batch(f"w{w}-{i}", n)}))[0]
                got.append((base, n, w))
            return got

        results = [x for chunk in await asyncio.gather(*(writer(w) for w in range(16))) for x in chunk]
        offsets = sorted(o for base, n, _ in results for o in range(base, base + n))
        assert offsets == list(range(len(offsets)))
        records = await read_all(engine, topic, 0)
        by_offset = {r.offset: r.value for r in records}
        for base, n, w in results:
            assert by_offset[base].startswith(f"w{w}-".encode())
            assert [by_offset[base + k][-1:] for k in range(n)] == [str(k).encode() for k in range(n)]


@every_engine
class TestGroupCommit:
    """Appends that meet at one partition are written together (one fsync, one Raft round) and still
    answered one by one: each with offsets of its own, whole, and failing alone."""

    async def test_many_concurrent_appenders_each_read_back_exactly_their_records(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        answered: list[tuple[int, list[RecordIn]]] = []

        async def appender(a: int) -> None:
            for i in range(6):
                records = [
                    RecordIn(f"a{a}-{i}-{k}".encode(), f"k{a}".encode() if k % 2 else None, b'{"h":1}')
                    for k in range(1 + (a * 7 + i) % 5)
                ]
                base = (await engine.append(topic, {0: records}))[0]
                answered.append((base, records))

        await asyncio.gather(*(appender(a) for a in range(60)))
        stored = {r.offset: r for r in await read_all(engine, topic, 0)}
        assert sorted(stored) == list(range(sum(len(rs) for _, rs in answered)))
        for base, records in answered:
            got = [stored[base + k] for k in range(len(records))]
            assert [(r.value, r.key, r.headers) for r in got] == [
                (r.value, r.key, r.headers) for r in records
            ]

    async def test_appends_past_one_write_are_split_whole(self, engine, topic_id):
        # 3,000 records meeting at once: more than one JetStream atomic batch holds (1,000), so the write is
        # several batches; no append is cut between two of them.
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())

        async def appender(a: int) -> tuple[int, int]:
            return a, (await engine.append(topic, {0: batch(f"s{a}", 150)}))[0]

        bases = await asyncio.gather(*(appender(a) for a in range(20)))
        stored = {r.offset: r.value for r in await read_all(engine, topic, 0)}
        assert len(stored) == 3000
        for a, base in bases:
            assert [stored[base + k] for k in range(150)] == [f"s{a}-{k}".encode() for k in range(150)]

    async def test_an_oversized_record_fails_only_its_own_append(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        too_large = [RecordIn(b"x" * 10), RecordIn(b"y" * (engine.max_record_bytes - 3), b"key", b"{}")]
        largest = RecordIn(b"z" * (engine.max_record_bytes - 5), b"key", b"{}")

        async def fine(a: int) -> tuple[int, int]:
            return a, (await engine.append(topic, {0: batch(f"ok{a}", 3)}))[0]

        async def oversized() -> None:
            await engine.append(topic, {0: too_large})

        results = await asyncio.gather(
            *(fine(a) for a in range(10)),
            oversized(),
            *(fine(a) for a in range(10, 20)),
            return_exceptions=True,
        )
        assert isinstance(results[10], RecordTooLarge)
        answered = [r for r in results if not isinstance(r, BaseException)]
        assert len(answered) == 20
        stored = {r.offset: r.value for r in await read_all(engine, topic, 0)}
        assert len(stored) == 60
        for a, base in answered:
            assert [stored[base + k] for k in range(3)] == [f"ok{a}-{k}".encode() for k in range(3)]
        # A record of exactly the limit is stored.
        base = (await engine.append(topic, {0: [largest]}))[0]
        assert (await engine.read(topic, 0, base, max_records=1))[0].value == largest.value


@every_engine
class TestAtomicAppends:
    async def test_multi_partition_append_returns_each_base(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 3, TopicLogConfig())
        await engine.append(topic, {1: batch("pre", 2)})
        bases = await engine.append(topic, {0: batch("a", 2), 1: batch("b", 3), 2: batch("c", 1)})
        assert bases == {0: 0, 1: 2, 2: 0}
        assert values(await engine.read(topic, 1, 0)) == [b"pre-0", b"pre-1", b"b-0", b"b-1", b"b-2"]
        assert values(await engine.read(topic, 2, 0)) == [b"c-0"]

    async def test_an_answered_append_is_whole_in_every_partition(self, engine, topic_id):
        # Once append returns, every partition it named holds its whole part: never some of them.
        # (On the local engine a reader never sees one part before another either; that stronger property
        # is tested beside it. On JetStream the parts of a committed append appear partition by partition.)
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        for i in range(30):
            await engine.append(topic, {0: batch(f"x{i}", 2), 1: batch(f"y{i}", 3)})
            a = (await engine.partition_info(topic, 0)).latest_offset
            b = (await engine.partition_info(topic, 1)).latest_offset
            assert (a, b) == (2 * (i + 1), 3 * (i + 1))
        assert values(await engine.read(topic, 1, 87)) == [b"y29-0", b"y29-1", b"y29-2"]

    async def test_concurrent_multi_partition_appends(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 3, TopicLogConfig())

        async def writer(w: int) -> list[dict[int, int]]:
            out = []
            for i in range(8):
                parts = {p: batch(f"w{w}i{i}p{p}", 1 + p) for p in range(3) if (w + i + p) % 3 or p == 0}
                bases = await engine.append(topic, parts)
                out.append({p: bases[p] for p in parts})
            return out

        results = [x for chunk in await asyncio.gather(*(writer(w) for w in range(10))) for x in chunk]
        for p in range(3):
            records = await read_all(engine, topic, p)
            assert [r.offset for r in records] == list(range(len(records)))
            by_offset = {r.offset: r.value for r in records}
            for bases in results:
                if p in bases:
                    assert by_offset[bases[p]].endswith(f"p{p}-0".encode())


PLAIN_VALUES = [b"null", b'{"a":1}', b"", b'"' + b"x" * 5000 + b'"', b"[1,2,3]", b"true", b"7"]


@every_engine
class TestValueRecords:
    """Values alone at one timestamp (``ValueRecords``), as ``Publisher.publish_plain`` appends a batch of bare
    messages: one run of values per partition, in one atomic append. They are the records they stand for."""

    async def test_values_spread_over_partitions_read_back_as_records(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 3, TopicLogConfig())
        await engine.append(topic, {1: batch("pre", 2)})
        stamp = 1_700_000_000_000
        runs = {p: PLAIN_VALUES[p::3] for p in range(3)}
        bases = await engine.append(topic, {p: ValueRecords(run, stamp) for p, run in runs.items()})
        assert bases == {0: 0, 1: 2, 2: 0}
        for p, run in runs.items():
            records = await engine.read(topic, p, bases[p])
            assert [(r.offset, r.value, r.key, r.headers, r.timestamp_ms) for r in records] == [
                (bases[p] + i, value, None, None, stamp) for i, value in enumerate(run)
            ]

    async def test_an_unset_timestamp_is_the_append_time_of_every_value(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        before = now_ms()
        await engine.append(topic, {0: ValueRecords(PLAIN_VALUES)})
        records = await engine.read(topic, 0, 0)
        assert values(records) == PLAIN_VALUES
        assert len({r.timestamp_ms for r in records}) == 1
        assert before <= records[0].timestamp_ms <= now_ms()

    async def test_an_oversized_value_refuses_the_whole_append(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        too_large = b"x" * (engine.max_record_bytes + 1)
        with pytest.raises(RecordTooLarge):
            await engine.append(
                topic, {0: ValueRecords([b"1", b"2"], 0), 1: ValueRecords([b"3", too_large, b"4"], 0)}
            )
        assert [(await engine.partition_info(topic, p)).latest_offset for p in range(2)] == [0, 0]
        assert await engine.append(topic, {1: ValueRecords([b"after"])}) == {1: 0}


@every_engine
class TestOffsetForTime:
    async def test_first_offset_at_or_after_a_time(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        base = 1_700_000_000_000
        for i in range(30):
            await engine.append(
                topic, {0: [RecordIn(value=b"v" * 50, timestamp_ms=base + 10 * i + j) for j in range(3)]}
            )
        assert await engine.offset_for_time(topic, 0, 0) == 0
        assert await engine.offset_for_time(topic, 0, base) == 0
        assert await engine.offset_for_time(topic, 0, base + 1) == 1
        assert await engine.offset_for_time(topic, 0, base + 3) == 3
        assert await engine.offset_for_time(topic, 0, base + 10 * 17 + 2) == 17 * 3 + 2
        assert await engine.offset_for_time(topic, 0, base + 10 * 29 + 2) == 89
        # Past the last record: the latest offset.
        assert await engine.offset_for_time(topic, 0, base + 10_000) == 90

    async def test_empty_partition(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        assert await engine.offset_for_time(topic, 0, 123) == 0


# A wait that only a record can end, and how long a test may take before it fails instead of hanging.
_FOREVER = 3600.0
_HANG_GUARD = 60.0


@every_engine
class TestWaitFor:
    async def test_returns_at_once_when_committed(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        await engine.append(topic, {0: batch("a", 1)})
        assert await engine.wait_for(topic, 0, 0, 5.0) is True

    async def test_times_out(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        assert await engine.wait_for(topic, 0, 0, 0.1) is False
        # False told the truth: record 0 does not exist. (That a waiter waits out its timeout rather than
        # answering at once: a waiter still waiting when the record arrives answers True, below.)
        assert (await engine.partition_info(topic, 0)).latest_offset == 0
        await engine.append(topic, {0: batch("a", 1)})
        assert await engine.wait_for(topic, 0, 0, 0.1) is True

    async def test_waiters_wake_when_data_commits(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        # Timeouts no test outlives: a waiter that answers True was woken by its record, never by its
        # timeout, and one still pending has not given up early.
        waiters = [asyncio.create_task(engine.wait_for(topic, 0, 0, _FOREVER)) for _ in range(5)]
        later = asyncio.create_task(engine.wait_for(topic, 0, 3, _FOREVER))
        other = asyncio.create_task(engine.wait_for(topic, 1, 0, _FOREVER))
        everyone = [*waiters, later, other]
        try:
            async with asyncio.timeout(_HANG_GUARD):
                await asyncio.sleep(0.05)
                assert not any(w.done() for w in everyone)
                await engine.append(topic, {0: batch("a", 2)})
                assert await asyncio.gather(*waiters) == [True] * 5
                # Offsets 0 and 1 committed: the waiter for offset 3 and the other partition's wait on.
                assert not later.done() and not other.done()
                await engine.append(topic, {1: batch("b", 1)})
                assert await other is True
                assert not later.done()
                await engine.append(topic, {0: batch("c", 2)})
                assert await later is True
        finally:
            for waiter in everyone:
                waiter.cancel()


@every_engine
class TestWatch:
    async def test_wakes_once_when_the_offset_commits(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        woken: list[str] = []
        engine.watch(topic, 0, 0, lambda: woken.append("first"))
        engine.watch(topic, 0, 2, lambda: woken.append("third"))
        engine.watch(topic, 1, 0, lambda: woken.append("other partition"))
        await asyncio.sleep(0.02)
        assert woken == []
        await engine.append(topic, {0: batch("a", 1)})
        assert woken == ["first"]  # by the time the append is answered
        await engine.append(topic, {0: batch("b", 1)})
        assert woken == ["first"]
        await engine.append(topic, {0: batch("c", 1)})
        assert woken == ["first", "third"]
        await engine.append(topic, {0: batch("d", 3)})
        assert woken == ["first", "third"]  # once each

    async def test_wakes_at_once_when_committed_already(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        await engine.append(topic, {0: batch("a", 2)})
        woken: list[int] = []
        engine.watch(topic, 0, 1, lambda: woken.append(1))
        assert woken == [1]
        engine.watch(topic, 0, 2, lambda: woken.append(2))
        assert woken == [1]

    async def test_a_cancelled_watch_is_not_called(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        woken: list[str] = []
        cancel = engine.watch(topic, 0, 0, lambda: woken.append("cancelled"))
        engine.watch(topic, 0, 0, lambda: woken.append("kept"))
        cancel()
        cancel()  # twice is harmless
        await engine.append(topic, {0: batch("a", 1)})
        assert woken == ["kept"]

    async def test_a_deleted_topic_wakes_its_watchers(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        woken: list[int] = []
        engine.watch(topic, 0, 0, lambda: woken.append(0))
        await engine.delete_topic(topic)
        assert woken == [0]  # the waiter looks again and meets the unknown topic

    async def test_unknown_topic_and_negative_offset_are_refused(self, engine, topic_id):
        with pytest.raises(UnknownLog):
            engine.watch(topic_id(), 0, 0, lambda: None)
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        with pytest.raises(LogEngineError):
            engine.watch(topic, 0, -1, lambda: None)


@every_engine
class TestRetention:
    async def test_expired_data_goes_and_earliest_moves(self, engine, topic_id):
        topic = topic_id()
        now = now_ms()
        await engine.create_topic(topic, 1, TopicLogConfig(retention_ms=60_000))
        old = now - 3_600_000
        for _i in range(20):
            await engine.append(topic, {0: [RecordIn(value=b"o" * 1000, timestamp_ms=old) for _ in range(4)]})
        for _i in range(5):
            await engine.append(topic, {0: [RecordIn(value=b"n" * 1000, timestamp_ms=now) for _ in range(4)]})
        deleted = await engine.enforce_retention(now)
        assert deleted >= 1
        info = await engine.partition_info(topic, 0)
        assert 0 < info.earliest_offset <= 80
        assert info.latest_offset == 100
        # Unexpired data is all still there.
        records = await read_all(engine, topic, 0, 0)
        assert records[0].offset == info.earliest_offset
        assert [r.offset for r in records][-20:] == list(range(80, 100))

    async def test_all_expired_keeps_latest_offset(self, engine, topic_id):
        topic = topic_id()
        now = now_ms()
        await engine.create_topic(topic, 1, TopicLogConfig(retention_ms=1000))
        for _i in range(10):
            await engine.append(
                topic, {0: [RecordIn(value=b"o" * 1000, timestamp_ms=now - 10_000) for _ in range(4)]}
            )
        await engine.enforce_retention(now)
        info = await engine.partition_info(topic, 0)
        assert info.earliest_offset == info.latest_offset == 40
        assert await engine.read(topic, 0, 0) == []
        assert await engine.append(topic, {0: batch("a", 1)}) == {0: 40}
        assert [r.offset for r in await engine.read(topic, 0, 0)] == [40]

    async def test_retention_bytes(self, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig(retention_bytes=40_000))
        for _i in range(50):
            await engine.append(topic, {0: [RecordIn(value=b"s" * 1000) for _ in range(4)]})
        await engine.enforce_retention(now_ms())
        info = await engine.partition_info(topic, 0)
        assert info.earliest_offset > 0 and info.latest_offset == 200
        assert 40_000 - 20_000 <= info.size_bytes <= 40_000 + 20_000

    async def test_update_config_takes_effect(self, engine, topic_id):
        topic = topic_id()
        now = now_ms()
        await engine.create_topic(topic, 1, TopicLogConfig())
        for _i in range(10):
            await engine.append(
                topic, {0: [RecordIn(value=b"o" * 1000, timestamp_ms=now - 10_000) for _ in range(4)]}
            )
        await engine.enforce_retention(now)
        assert (await engine.partition_info(topic, 0)).earliest_offset == 0
        await engine.update_config(topic, TopicLogConfig(retention_ms=1000))
        await engine.enforce_retention(now)
        assert (await engine.partition_info(topic, 0)).earliest_offset == 40


@every_engine
class TestRestart:
    async def test_close_and_reopen_keeps_everything(self, log_backend, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig(retention_ms=86_400_000))
        for i in range(30):
            await engine.append(topic, {0: batch(f"a{i}", 3), 1: batch(f"b{i}", 1)})
        before = [await read_all(engine, topic, p) for p in range(2)]
        engine = await log_backend.reopen()
        assert [await read_all(engine, topic, p) for p in range(2)] == before
        assert (await engine.partition_info(topic, 0)).latest_offset == 90
        assert await engine.append(topic, {0: batch("after", 1)}) == {0: 90}
        assert await engine.append(topic, {1: batch("after", 1)}) == {1: 30}

    async def test_durability_and_health(self, engine):
        assert engine.durability in ("fsync",) or engine.durability.startswith("replicated:")
        assert await engine.check() is True
        assert await engine.health() == "ok"


async def health_settles(engine: LogEngine, state: str, within: float) -> str:
    """Ask ``health()`` until it says ``state`` or ``within`` seconds have passed; what it said last."""
    deadline = time.monotonic() + within
    while (said := await engine.health()) != state and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return said


@pytest.mark.parametrize("outage", BACKENDS, indirect=True)
class TestHealth:
    """``health()`` says ``ok`` while the engine's storage serves and ``down`` once it is gone (the local
    engine's disk takes no writes; JetStream has no server left to talk to). That it heals without a restart
    is a system test's (``tests/system/test_disk_outage.py``, ``test_nats_faults.py``): a JetStream cluster
    whose every server restarts takes ~7 s to answer again here."""

    async def test_down_once_the_storage_is_gone(self, outage):
        engine = await outage.open()
        assert await engine.health() == "ok"
        outage.inject()
        assert await health_settles(engine, "down", within=10) == "down"
        assert await engine.check() is False


@every_engine
class TestCapabilities:
    async def test_an_engine_shared_by_processes_shares_its_idempotency_records(self, engine, topic_id):
        """An engine other processes write to (not ``exclusive``) must keep idempotency records they all
        see; one that a single process owns has none (its publisher keeps keys in memory)."""
        records = engine.idempotency_records(60)
        if engine.exclusive:
            assert records is None
            return
        assert records is not None
        topic = topic_id()
        first = await records.claim(topic, "key-1", now_ms())
        assert first.state == "won"
        # Another process's view of the same records: the claim is there, pending.
        seen = await engine.idempotency_records(60).get(topic, "key-1")
        assert seen is not None and seen.state == "pending"
        await records.place(topic, "key-1", 0, 7, 1234, 5)
        again = await engine.idempotency_records(60).claim(topic, "key-1", now_ms())
        assert (again.state, again.partition, again.offset) == ("placed", 0, 7)


@every_engine
@pytest.mark.slow
class TestCrashMidBatch:
    """A process appending batches that span every partition (``batch_writer``) is SIGKILLed. Once an engine
    is open on the same storage again - recovered at its start (local), or once a commit record the dead
    process left is rolled forward (JetStream: by any node, ``recover_after_seconds`` after its commit) -
    every batch is in all of its partitions whole, or in none, and every batch that was answered is there.

    On the local engine the kill alone catches batches written to some partitions and not yet committed. On
    JetStream a kill alone almost never does (a batch's parts leave in one flush), so the last partition
    refuses records before the kill (``LogBackend.refusing``), as one without a leader would: the batches
    then committed are cut after their other parts, and only the roll-forward can make them whole."""

    async def test_every_batch_is_whole_or_absent_after_its_writer_is_killed(self, log_backend, topic_id):
        topic = topic_id()
        engine = await log_backend.open()
        await engine.create_topic(topic, batch_writer.PARTITIONS, TopicLogConfig())
        await log_backend.close()  # a local engine's directory has one owner at a time: now the writer
        child = start_child(
            "-m",
            "tests.stores.log.batch_writer",
            log_backend.kind,
            str(log_backend.root),
            log_backend.nats_url,
            topic,
        )
        lines: list[bytes] = []

        def read_until(kind: bytes, count: int) -> None:
            assert child.stdout is not None
            seen = 0
            while seen < count:
                line = child.stdout.readline()
                assert line, "the writer exited"
                lines.append(line)
                seen += line.startswith(kind)

        try:
            read_until(b"A ", 6)
            # Then the last partition refuses its parts for a while (JetStream; the local engine goes on as
            # it was), and the writer is killed with batches in flight.
            async with log_backend.refusing(topic, batch_writer.PARTITIONS - 1):
                read_until(b"S ", 2 * batch_writer.WRITERS)
                child.kill()
        finally:
            child.kill()
        out, err = child.communicate(timeout=10)
        assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]
        lines += out.splitlines(keepends=True)
        said = [(line[:2], line[2:-1].decode()) for line in lines if line.endswith(b"\n")]  # not one cut
        started = {tag for kind, tag in said if kind == b"S "}
        answered = {tag for kind, tag in said if kind == b"A "}
        assert started - answered, "the kill caught no batch in flight"

        engine = await log_backend.open(recover_after_seconds=1.0, recovery_interval_seconds=0.2)
        full = dict.fromkeys(range(batch_writer.PARTITIONS), batch_writer.RECORDS)
        deadline = time.monotonic() + 10
        rounds = 0
        while True:
            rounds += 1
            counts: dict[str, dict[int, int]] = {}
            for p in range(batch_writer.PARTITIONS):
                records = await read_to_end(engine, topic, p)
                assert [r.offset for r in records] == list(range(len(records)))
                for r in records:
                    found = counts.setdefault(batch_writer.tag_of(r.value), {})
                    found[p] = found.get(p, 0) + 1
            partial = {tag: found for tag, found in counts.items() if found != full}
            if not partial or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)  # JetStream: a commit record is rolled forward a second after its commit
        assert not partial, f"batches stored in part after their writer was killed: {partial}"
        assert not answered - counts.keys(), f"answered batches lost: {answered - counts.keys()}"
        assert not counts.keys() - started, f"batches never appended: {counts.keys() - started}"
        unanswered = started - answered
        print(
            f"{len(answered)} batches answered, {len(unanswered)} unanswered at the kill: "
            f"{len(unanswered & counts.keys())} of them stored whole; read {rounds} times"
        )


async def read_to_end(engine: LogEngine, topic: str, partition: int) -> list:
    """Every record up to the partition's latest offset, asked for again while a read comes back short (on
    JetStream a new engine may be answered by a replica that has not caught up with its leader yet)."""
    end = (await engine.partition_info(topic, partition)).latest_offset
    out: list = []
    for _ in range(500):
        if len(out) >= end:
            return out
        chunk = await engine.read(topic, partition, len(out), max_records=500)
        out.extend(chunk)
        if not chunk:
            await asyncio.sleep(0.01)
    raise AssertionError(f"partition {partition}: {len(out)} records read of {end}")
