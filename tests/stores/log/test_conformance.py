"""Every log engine honours one contract (``app/stores/log/protocol.py``).

The classes run every scenario on every backend in ``BACKENDS`` (``local`` and ``jetstream``),
through the indirect ``log_backend`` fixture. Scenarios use only the protocol, so they say nothing about
segments or files; backend-specific behaviour is tested beside each backend. This module holds topics,
appends and reads; ``test_conformance_time.py`` holds waits, watches, retention and offsets by time, and
``test_conformance_lifecycle.py`` restarts, health, capabilities and a crash mid-batch.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from app.kit.clock import now_ms
from app.stores.log.protocol import (
    RecordColumns,
    RecordIn,
    RecordTooLarge,
    TopicLogConfig,
    UnknownLog,
    ValueRecords,
)
from tests.stores.log.scenarios import batch, every_engine, read_all, values


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

    async def test_a_read_in_columns_answers_what_a_read_answers(self, engine, topic_id):
        # The bulk read's: the same records by the same limits, from anywhere, across batches.
        topic = topic_id()
        await engine.create_topic(topic, 1, TopicLogConfig())
        for i in range(6):
            await engine.append(
                topic,
                {
                    0: [
                        RecordIn(
                            value=b"%d-%d" % (i, j) * (1 + j),
                            key=None if j % 2 else b"key-%d" % j,
                            headers=None if j % 3 else b'{"h":null}',
                            timestamp_ms=1_700_000_000_000 + 7 * i + j,
                        )
                        for j in range(12 if i % 2 else 3)  # batches of many records and of few
                    ]
                },
            )
        await engine.append(topic, {0: ValueRecords([b"v"] * 5, 1_700_000_000_100)})
        for offset, max_records, max_bytes in (
            (0, 100, 1 << 20),
            (3, 9, 1 << 20),
            (7, 100, 40),
            (12, 1, 1),
            (13, 30, 150),
            (29, 100, 1 << 20),
            (44, 100, 1 << 20),
            (50, 100, 1 << 20),
        ):
            records = await engine.read(topic, 0, offset, max_records=max_records, max_bytes=max_bytes)
            columns = await engine.read_columns(topic, 0, offset, max_records, max_bytes)
            assert columns.records() == records, (offset, max_records, max_bytes)
            assert columns == RecordColumns.of(records)

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
