"""The budgeted reader (``app/broker/delivery/reader.py``) on every deployment's log engine: the budget and
what counts against it, the fair order across partitions, what is passed over (leased offsets, the
filter, the delay gate), and where a partition's reading stops."""

from __future__ import annotations

from typing import Any

import pytest

from app.broker import filters, publishing
from app.broker.delivery import reader as reader_module
from app.broker.delivery.delays import TimeGate
from app.broker.delivery.reader import BudgetedReader, ReadCursor
from app.kit.clock import now_ms
from app.stores.log.protocol import LogEngine, Record
from tests.broker.delivery.conftest import MakeTopic, TopicUnderTest


async def publish(topic: TopicUnderTest, items: list[dict[str, Any]], partition: int = 0) -> None:
    body = {"messages": [{"data": i, "partition": partition, **item} for i, item in enumerate(items)]}
    await topic.services.publisher.publish_batch(topic.scope, topic.name, publishing.parse_batch(body))


class CountingLog:
    """The deployment's log engine, with the reads made through it counted."""

    def __init__(self, log: LogEngine) -> None:
        self._log = log
        self.reads: list[tuple[int, int, int]] = []  # partition, offset, max_records

    async def read(
        self, topic_id: str, partition: int, offset: int, max_records: int = 100, max_bytes: int = 1 << 20
    ) -> list[Record]:
        self.reads.append((partition, offset, max_records))
        return await self._log.read(topic_id, partition, offset, max_records=max_records, max_bytes=max_bytes)


class Leased:
    """A caller's ``lease``: records what it was handed and moves the cursor; takes at most ``most``."""

    def __init__(self, most: int | None = None) -> None:
        self.most = most
        self.calls: list[tuple[int, list[int], int]] = []  # partition, offsets, end

    async def __call__(self, cursor: ReadCursor, records: list[Record], end: int) -> int:
        taken = records if self.most is None else records[: self.most]
        self.calls.append((cursor.partition, [r.offset for r in taken], end))
        cursor.position = end if len(taken) == len(records) else records[len(taken)].offset
        return len(taken)

    def offsets(self, partition: int) -> list[int]:
        return [o for p, offsets, _ in self.calls if p == partition for o in offsets]

    @property
    def count(self) -> int:
        return sum(len(offsets) for _, offsets, _ in self.calls)


def make_reader(
    topic: TopicUnderTest,
    lease: Leased,
    *,
    gate: TimeGate | None = None,
    filter_text: str | None = None,
    readable: Any = None,
) -> tuple[BudgetedReader[ReadCursor], CountingLog]:
    log = CountingLog(topic.services.log)
    predicate = filters.predicate_of(filter_text)
    reader = BudgetedReader(
        log,  # type: ignore[arg-type]
        topic.ref.id,
        gate if gate is not None else TimeGate(now_ms()),
        predicate,
        lease,
        readable,
    )
    return reader, log


class TestBudget:
    async def test_reads_up_to_the_budget_then_on_from_where_it_stopped(self, make_topic: MakeTopic) -> None:
        topic = await make_topic(partitions=3)
        for partition in range(3):
            await publish(topic, [{}] * 10, partition)
        cursors = [ReadCursor(p, 0) for p in range(3)]
        lease = Leased()
        reader, _ = make_reader(topic, lease)
        assert await reader.read(cursors, 12) == 0
        assert lease.count == 12
        for p in range(3):  # each partition's in offset order from its position, none twice
            assert lease.offsets(p) == list(range(len(lease.offsets(p))))
        assert await reader.read(cursors, 100) == 100 - 18
        assert sorted(lease.offsets(0) + lease.offsets(1) + lease.offsets(2)) == sorted(list(range(10)) * 3)
        assert [c.position for c in cursors] == [10, 10, 10]

    async def test_every_partition_may_come_first(
        self, make_topic: MakeTopic, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        topic = await make_topic(partitions=3)
        for partition in range(3):
            await publish(topic, [{}] * 10, partition)
        for first in range(3):  # the random turn decides who gets a budget smaller than one partition
            monkeypatch.setattr(reader_module.random, "randrange", lambda n, first=first: first)
            lease = Leased()
            reader, _ = make_reader(topic, lease)
            await reader.read([ReadCursor(p, 0) for p in range(3)], 4)
            assert [(p, offsets) for p, offsets, _ in lease.calls] == [(first, [0, 1, 2, 3])]

    async def test_what_the_caller_does_not_take_is_left_to_the_next_partition(
        self, make_topic: MakeTopic, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        topic = await make_topic(partitions=2)
        await publish(topic, [{}] * 10, 0)
        await publish(topic, [{}] * 10, 1)
        monkeypatch.setattr(reader_module.random, "randrange", lambda n: 0)
        lease = Leased(most=2)  # as a push member's rate granting two tokens
        reader, _ = make_reader(topic, lease)
        cursors = [ReadCursor(0, 0), ReadCursor(1, 0)]
        assert await reader.read(cursors, 5) == 1
        assert lease.calls == [(0, [0, 1], 5), (1, [0, 1], 3)]
        assert [c.position for c in cursors] == [2, 2]  # the rest is read again next time

    async def test_no_budget_reads_nothing(self, make_topic: MakeTopic) -> None:
        topic = await make_topic(partitions=2)
        await publish(topic, [{}] * 3, 0)
        lease = Leased()
        reader, log = make_reader(topic, lease)
        assert await reader.read([ReadCursor(0, 0), ReadCursor(1, 0)], 0) == 0
        assert await reader.read([], 10) == 10
        assert log.reads == [] and lease.calls == []


class TestPassedOver:
    async def test_leased_offsets_take_no_budget(self, make_topic: MakeTopic) -> None:
        topic = await make_topic()
        await publish(topic, [{}] * 10)
        lease = Leased()
        reader, _ = make_reader(topic, lease)
        await reader.read([ReadCursor(0, 0, {0, 1, 2, 5})], 4)
        assert lease.offsets(0) == [3, 4, 6, 7]
        assert lease.calls[-1][2] == 8

    async def test_the_filter_reads_on_past_non_matching_records(self, make_topic: MakeTopic) -> None:
        topic = await make_topic()
        await publish(topic, [{"headers": {"type": "refund"}}] * 20 + [{"headers": {"type": "order"}}] * 5)
        lease = Leased()
        reader, log = make_reader(topic, lease, filter_text='headers.type = "order"')
        assert await reader.read([ReadCursor(0, 0)], 5) == 0
        assert lease.calls == [(0, [20, 21, 22, 23, 24], 25)]  # one pass, one hand-over
        assert reader.filtered == {0}
        assert len(log.reads) > 1

    async def test_records_not_due_are_held_by_the_gate(self, make_topic: MakeTopic) -> None:
        topic = await make_topic()
        await publish(topic, [{"delay": "1h"}] * 3 + [{}] * 3)
        gate = TimeGate(now_ms())
        lease = Leased()
        reader, _ = make_reader(topic, lease, gate=gate)
        assert await reader.read([ReadCursor(0, 0)], 3) == 0
        assert lease.calls == [(0, [3, 4, 5], 6)]
        assert [(p, o) for p, o, _ in gate.held] == [(0, 0), (0, 1), (0, 2)]
        assert gate.expired == []

    async def test_expired_records_are_kept_by_the_gate(self, make_topic: MakeTopic) -> None:
        topic = await make_topic()
        await publish(topic, [{"ttl": "1m"}] * 2 + [{}] * 2)
        gate = TimeGate(now_ms() + 3_600_000)  # an hour on: the first two expired
        lease = Leased()
        reader, _ = make_reader(topic, lease, gate=gate)
        await reader.read([ReadCursor(0, 0)], 10)
        assert lease.calls == [(0, [2, 3], 4)]
        assert [x.offset for x in gate.expired] == [0, 1]


class TestWhereToStop:
    async def test_the_partitions_end_is_one_short_read(self, make_topic: MakeTopic) -> None:
        topic = await make_topic()
        await publish(topic, [{}] * 10)
        lease = Leased()
        reader, log = make_reader(topic, lease)
        assert await reader.read([ReadCursor(0, 0)], 100) == 90
        assert log.reads == [(0, 0, 100)]
        assert lease.calls == [(0, list(range(10)), 10)]

    async def test_nothing_new_is_not_handed_over(self, make_topic: MakeTopic) -> None:
        topic = await make_topic()
        await publish(topic, [{}] * 2)
        lease = Leased()
        reader, _ = make_reader(topic, lease)
        assert await reader.read([ReadCursor(0, 2)], 10) == 10
        assert lease.calls == []

    async def test_a_pass_reads_past_at_most_the_scan_limit(
        self, make_topic: MakeTopic, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(reader_module, "SCAN_LIMIT", 8)
        topic = await make_topic()
        await publish(topic, [{"headers": {"type": "refund"}}] * 20 + [{"headers": {"type": "order"}}])
        lease = Leased()
        reader, log = make_reader(topic, lease, filter_text='headers.type = "order"')
        await reader.read([ReadCursor(0, 0)], 5)
        # Past what it passed over, with nothing to hand over: the position moves, the rest waits.
        assert log.reads == [(0, 0, 5), (0, 5, 5)]
        assert lease.calls == [(0, [], 10)]

    async def test_a_partition_let_go_while_reading_is_not_handed_over(self, make_topic: MakeTopic) -> None:
        topic = await make_topic(partitions=2)
        await publish(topic, [{"delay": "1h"}, {}], 0)
        await publish(topic, [{}] * 2, 1)
        gate = TimeGate(now_ms())
        asked: list[int] = []

        def readable(cursor: ReadCursor) -> bool:
            asked.append(cursor.partition)
            return not (cursor.partition == 0 and asked.count(0) > 1)  # partition 0: gone after its read

        lease = Leased()
        reader, log = make_reader(topic, lease, gate=gate, readable=readable)
        assert await reader.read([ReadCursor(0, 0), ReadCursor(1, 0)], 10) == 8
        assert lease.calls == [(1, [0, 1], 2)]
        assert gate.held == []  # what it held back there is not its to write
        assert {p for p, _, _ in log.reads} == {0, 1}
