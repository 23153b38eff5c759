"""Committed reads of one partition (``app.stores.log.local.reads``), called directly.

* ``read_tail``: a read served from the in-memory tail starts at the asked offset (inside a batch too),
  never returns an offset at or past the high-watermark ``hw``, and stops at ``max_records`` or
  ``max_bytes`` (the first record is always taken).
* Every read here is made twice, as ``Record``s (``RecordTaker``) and in columns (``ColumnTaker``, the bulk
  read's): both answer the same records.
* ``read_segments``: the same contract over the segment files of a real partition: reads run across
  segments, from any offset (through the sparse index), bounded by ``hw`` even when the files hold more.
* ``offset_for_time``: the first offset at or after a time, across segments; ``hw`` when none is below it.
* Damage found on read is ``DamagedRecords`` (a 503 with a generic wire message; the detail names where):
  a batch that says another offset than the one expected, and bytes that are no whole batch.

Corruption found at start and flipped index bits are ``test_crash.py``'s.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from app.stores.errors import StoreUnavailable
from app.stores.log.local import reads
from app.stores.log.local.engine import LocalLogEngine
from app.stores.log.local.records import HEADER, BatchHeader, encode_batch, read_header
from app.stores.log.protocol import EngineUnavailable, Record, RecordColumns, RecordIn, TopicLogConfig
from tests.stores.log.conftest import open_local

TOPIC = "top_reads"


def tail_of(batches: list[list[bytes]], *, start: int = 0) -> list[tuple[BatchHeader, bytes]]:
    """An in-memory tail as ``PartitionLog`` keeps one: (header, header + body) per batch."""
    tail: list[tuple[BatchHeader, bytes]] = []
    offset = start
    for values in batches:
        records = [RecordIn(value=v, timestamp_ms=1000 + offset + i) for i, v in enumerate(values)]
        encoded = encode_batch(records, offset)
        buf = encoded.header + encoded.body
        header = read_header(buf)
        assert header is not None
        tail.append((header, buf))
        offset += len(values)
    return tail


def read_both(read: Callable[[reads.Taker], None], max_records: int, max_bytes: int) -> list[Record]:
    """What ``read`` puts in a ``RecordTaker``, once a ``ColumnTaker`` was given the same records, both
    ways it takes a batch (columns sliced out, or ``Record``s put in columns: for batches of few records)."""
    records = reads.RecordTaker(max_records, max_bytes)
    read(records)
    for few in (0, 1 << 30):
        columns = reads.ColumnTaker(max_records, max_bytes)
        columns.few_records = few
        read(columns)
        assert columns.columns().records() == records.records, few
    return records.records


def read_tail(
    tail: list[tuple[BatchHeader, bytes]], offset: int, max_records: int, max_bytes: int, hw: int
) -> list[Record]:
    return read_both(lambda taker: reads.read_tail(tail, offset, hw, taker), max_records, max_bytes)


def offsets(records: list[Record]) -> list[int]:
    return [r.offset for r in records]


BIG = 1 << 30


class TestReadTail:
    tail = tail_of([[b"a0", b"a1", b"a2"], [b"b3", b"b4"], [b"c5", b"c6", b"c7", b"c8"]], start=0)

    def test_a_read_starts_at_its_offset_even_inside_a_batch_and_runs_across_batches(self) -> None:
        found = read_tail(self.tail, 1, 100, BIG, hw=9)
        assert offsets(found) == list(range(1, 9))
        assert [r.value for r in found[:3]] == [b"a1", b"a2", b"b3"]
        assert found[0].timestamp_ms == 1001
        assert offsets(read_tail(self.tail, 6, 100, BIG, hw=9)) == [6, 7, 8]

    def test_nothing_at_or_past_the_high_watermark_is_returned(self) -> None:
        assert offsets(read_tail(self.tail, 0, 100, BIG, hw=4)) == [0, 1, 2, 3]
        assert offsets(read_tail(self.tail, 4, 100, BIG, hw=7)) == [4, 5, 6]
        assert read_tail(self.tail, 4, 100, BIG, hw=4) == []

    def test_a_read_stops_at_max_records(self) -> None:
        assert offsets(read_tail(self.tail, 1, 3, BIG, hw=9)) == [1, 2, 3]
        assert offsets(read_tail(self.tail, 2, 1, BIG, hw=9)) == [2]

    def test_a_read_stops_at_max_bytes_but_always_takes_the_first_record(self) -> None:
        assert offsets(read_tail(self.tail, 0, 100, 4, hw=9)) == [0, 1]  # two bytes a record
        assert offsets(read_tail(self.tail, 0, 100, 5, hw=9)) == [0, 1]
        assert offsets(read_tail(self.tail, 3, 100, 1, hw=9)) == [3]

    def test_a_tail_that_starts_past_the_offset_is_read_from_its_first_batch(self) -> None:
        later = tail_of([[b"x10", b"x11"], [b"y12"]], start=10)
        assert offsets(read_tail(later, 4, 100, BIG, hw=13)) == [10, 11, 12]


async def filled(root: Path, batches: int = 60, per_batch: int = 3, **overrides: int) -> LocalLogEngine:
    """A partition of several sealed segments: batch i holds values ``i.j`` stamped 1,000,000 + 10 i."""
    engine = await open_local(root, segment_bytes=2048, index_interval_bytes=256, **overrides)
    await engine.create_topic(TOPIC, 1, TopicLogConfig())
    for i in range(batches):
        batch = [
            RecordIn(value=f"{i}.{j}".encode() * 10, timestamp_ms=1_000_000 + 10 * i)
            for j in range(per_batch)
        ]
        await engine.append(TOPIC, {0: batch})
    return engine


def value(offset: int) -> bytes:
    return f"{offset // 3}.{offset % 3}".encode() * 10


@pytest.fixture
async def engine(tmp_path: Path):
    engine = await filled(tmp_path)
    assert len(list((tmp_path / f"{TOPIC}-0").glob("*.log"))) >= 4, "the reads must cross segments"
    yield engine
    await engine.close()


def read_files(
    engine: LocalLogEngine, offset: int, max_records: int, max_bytes: int, hw: int
) -> list[Record]:
    log = engine.manager.log(TOPIC, 0)
    return read_both(
        lambda taker: reads.read_segments(
            log.segments, log.open_segments, offset, hw, log.config.index_interval_bytes, taker
        ),
        max_records,
        max_bytes,
    )


class TestReadSegments:
    async def test_a_read_from_the_files_runs_across_segments_byte_for_byte(self, engine) -> None:
        found = read_files(engine, 0, 1000, BIG, hw=180)
        assert offsets(found) == list(range(180))
        assert all(r.value == value(r.offset) for r in found)
        assert found[-1].timestamp_ms == 1_000_000 + 10 * 59

    @pytest.mark.parametrize("offset", [1, 2, 40, 77, 100, 178, 179])
    async def test_a_read_starts_exactly_at_any_offset(self, engine, offset: int) -> None:
        found = read_files(engine, offset, 5, BIG, hw=180)
        assert offsets(found) == list(range(offset, min(offset + 5, 180)))
        assert found[0].value == value(offset)

    async def test_the_files_are_not_read_past_the_high_watermark(self, engine) -> None:
        assert offsets(read_files(engine, 95, 1000, BIG, hw=101)) == list(range(95, 101))
        assert read_files(engine, 101, 1000, BIG, hw=101) == []
        assert read_files(engine, 0, 1000, BIG, hw=0) == []

    async def test_a_read_from_the_files_stops_at_max_records_and_max_bytes(self, engine) -> None:
        assert offsets(read_files(engine, 10, 7, BIG, hw=180)) == list(range(10, 17))
        each = len(value(10))
        assert offsets(read_files(engine, 10, 1000, 3 * each, hw=180)) == [10, 11, 12]
        assert offsets(read_files(engine, 10, 1000, 1, hw=180)) == [10]  # the first is always taken

    async def test_the_engine_serves_the_same_records_as_the_files_after_a_restart(self, tmp_path) -> None:
        engine = await filled(tmp_path)
        await engine.close()
        engine = await open_local(tmp_path, segment_bytes=2048, index_interval_bytes=256)
        try:
            direct = read_files(engine, 33, 50, BIG, hw=180)
            assert await engine.read(TOPIC, 0, 33, max_records=50) == direct
        finally:
            await engine.close()


class TestRowsWrittenBefore:
    """A data directory written in rows (magic 1) by an earlier version (``fixtures/README.md``) opens, reads
    as written in both ways, takes appends (in columns) after it, and reads across the two formats."""

    @pytest.fixture
    async def rows(self, tmp_path: Path):
        root = tmp_path / "data"
        shutil.copytree(Path(__file__).parent / "fixtures" / "rows-fa8edb6", root)
        engine = await open_local(root, segment_bytes=1024, index_interval_bytes=128)
        yield engine, root
        await engine.close()

    async def test_the_rows_read_as_written_and_new_columns_read_after_them(self, rows) -> None:
        engine, root = rows
        old = await engine.read("top_rows", 0, 0, max_records=1000, max_bytes=BIG)
        assert [r.offset for r in old] == list(range(38))
        assert old[1] == Record(1, 1_700_000_000_001, b'{"n":1}', b"k1", b'{"h":null,"i":"id0"}')
        assert [r.timestamp_ms for r in old[-2:]] == [1, 1 << 41]
        assert await engine.read_columns("top_rows", 0, 0, 1000, BIG) == RecordColumns.of(old)
        values = await engine.read("top_rows", 1, 0, max_records=1000, max_bytes=BIG)
        assert [r.value for r in values] == [b'"v%d"' % i for i in range(20)]

        assert await engine.append("top_rows", {0: [RecordIn(b'"new"', b"k", b"{}", 5)] * 40}) == {0: 38}
        await engine.close()
        engine = await open_local(root, segment_bytes=1024, index_interval_bytes=128)
        try:
            for start, limit in ((0, 1000), (30, 20), (37, 2), (36, 5)):
                found = await engine.read("top_rows", 0, start, max_records=limit, max_bytes=BIG)
                assert [r.offset for r in found] == list(range(start, min(start + limit, 78)))
                assert found == old[start : start + limit] + [
                    Record(o, 5, b'"new"', b"k", b"{}") for o in range(max(start, 38), min(start + limit, 78))
                ]
                assert await engine.read_columns("top_rows", 0, start, limit, BIG) == RecordColumns.of(found)
        finally:
            await engine.close()


class TestOffsetForTime:
    def seek(self, engine: LocalLogEngine, timestamp: int, hw: int = 180) -> int:
        log = engine.manager.log(TOPIC, 0)
        return reads.offset_for_time(log.segments, log.open_segments, timestamp, hw)

    async def test_a_time_finds_the_first_offset_stamped_at_or_after_it_in_any_segment(self, engine) -> None:
        assert self.seek(engine, 0) == 0
        assert self.seek(engine, 1_000_000) == 0
        assert self.seek(engine, 1_000_001) == 3
        for batch in (5, 17, 33, 59):
            assert self.seek(engine, 1_000_000 + 10 * batch) == 3 * batch
            assert self.seek(engine, 1_000_000 + 10 * batch - 3) == 3 * batch

    async def test_a_time_past_every_record_is_the_high_watermark(self, engine) -> None:
        assert self.seek(engine, 1_000_000 + 10 * 59 + 1) == 180
        assert self.seek(engine, 10**15) == 180

    async def test_records_at_or_past_the_high_watermark_are_never_answered(self, engine) -> None:
        # The record stamped for batch 40 is at offset 120: with hw 100 it is not there yet.
        assert self.seek(engine, 1_000_000 + 10 * 40, hw=100) == 100
        assert self.seek(engine, 1_000_000 + 10 * 20, hw=100) == 60


def rewrite_header(segment: Path, position: int, **fields: int) -> None:
    """Change fields of the batch header at ``position`` in a segment file (the CRC is not recomputed)."""
    data = bytearray(segment.read_bytes())
    header = read_header(bytes(data), position)
    assert header is not None
    HEADER.pack_into(data, position, *header._replace(**fields))
    segment.write_bytes(bytes(data))


class TestDamage:
    async def damaged(self, tmp_path: Path, **fields: int) -> LocalLogEngine:
        """The first sealed segment with its second batch's header changed, the engine reopened."""
        engine = await filled(tmp_path)
        await engine.close()
        first = min((tmp_path / f"{TOPIC}-0").glob("*.log"))
        second_batch = read_header(first.read_bytes())
        assert second_batch is not None
        rewrite_header(first, second_batch.size, **fields)
        return await open_local(tmp_path, segment_bytes=2048, index_interval_bytes=256)

    async def test_a_batch_that_says_another_offset_than_expected_fails_the_read(self, tmp_path) -> None:
        engine = await self.damaged(tmp_path, base_offset=7)  # the second batch holds 3, 4, 5
        try:
            with pytest.raises(reads.DamagedRecords) as damaged:
                read_files(engine, 0, 1000, BIG, hw=180)
            assert "says offset 7, 3 expected" in str(damaged.value)
            # The first batch, before the damage, still reads.
            assert offsets(read_files(engine, 0, 3, BIG, hw=180)) == [0, 1, 2]
        finally:
            await engine.close()

    async def test_bytes_that_are_no_whole_batch_fail_the_read(self, tmp_path) -> None:
        engine = await self.damaged(tmp_path, batch_length=0)
        try:
            with pytest.raises(reads.DamagedRecords) as damaged:
                read_files(engine, 0, 1000, BIG, hw=180)
            assert "no whole batch" in str(damaged.value)
        finally:
            await engine.close()

    def test_damage_is_a_503_whose_wire_message_names_nothing_stored(self) -> None:
        damaged = reads.DamagedRecords("00000000000000000000.log: offsets from 3: CRC mismatch")
        assert isinstance(damaged, EngineUnavailable) and isinstance(damaged, StoreUnavailable)
        assert str(damaged) == "00000000000000000000.log: offsets from 3: CRC mismatch"
        assert "CRC" not in damaged.message and ".log" not in damaged.message
        assert "checksum" in damaged.message
