"""Batch encoding: round trips, timestamps, CRC and framing checks (``records``).

Batches are written in columns (magic 2); batches in rows (magic 1), as every version before columns wrote
them, are still read: ``ROWS`` holds such batches, written by commit fa8edb6's engine (``fixtures/README.md``).
Both ways of reading a batch, as ``Record``s (``decode_batch``) and in columns (``batch_columns``, the bulk
read's), answer the same records from either format.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from app.stores.log.local.records import (
    ABSOLUTE_TIMESTAMPS,
    HEADER_SIZE,
    MAGIC,
    MAGIC_ROWS,
    CorruptRecordError,
    batch_columns,
    decode_batch,
    encode_batch,
    ensure_valid,
    is_full,
    iter_headers,
    read_header,
)
from app.stores.log.protocol import RecordIn, ValueRecords

ROWS = Path(__file__).parent / "fixtures" / "rows-fa8edb6"


def whole(batch) -> bytes:
    return batch.header + batch.body


def decode(data: bytes, **kwargs):
    header = ensure_valid(data)
    out = []
    decode_batch(data, 0, header, out, **kwargs)
    if "max_records" not in kwargs and "max_bytes" not in kwargs:
        start, end = kwargs.get("start_offset", 0), kwargs.get("end_offset", 1 << 62)
        assert batch_columns(data, 0, header, start, end).records() == out
    return out


def batches_of(data: bytes):
    for position, header in iter_headers(data):
        ensure_valid(data, position)
        yield position, header


class TestEncodeDecode:
    def test_round_trip_keeps_every_field(self):
        given = [
            RecordIn(value=b"v1", key=None, headers=None, timestamp_ms=1000),
            RecordIn(value=b"", key=b"", headers=b"", timestamp_ms=1001),
            RecordIn(value=b"v3", key=b"k3", headers=b'{"a":"b"}', timestamp_ms=999),
            RecordIn(value=b"v4" * 500, key=None, headers=b"h", timestamp_ms=1005),
        ]
        data = whole(encode_batch(given, 42))
        records = decode(data)
        assert [(r.offset, r.timestamp_ms, r.value, r.key, r.headers) for r in records] == [
            (42 + i, g.timestamp_ms, g.value, g.key, g.headers) for i, g in enumerate(given)
        ]

    def test_header_fields(self):
        batch = encode_batch(
            [RecordIn(value=b"a", timestamp_ms=5), RecordIn(value=b"b", timestamp_ms=9)], 7, txn_id=3
        )
        header = read_header(whole(batch))
        assert header.base_offset == 7 and header.record_count == 2 and header.last_offset == 8
        assert header.base_timestamp == 5 and header.max_timestamp == 9 and header.txn_id == 3
        assert header.size == batch.size == len(whole(batch))
        assert batch.max_timestamp == 9

    def test_record_framing_is_20_bytes(self):
        batch = encode_batch([RecordIn(value=b"x" * 200)], 0, now_ms=1)
        assert batch.size == HEADER_SIZE + 20 + 200

    def test_unset_timestamps_get_now(self):
        records = decode(
            whole(encode_batch([RecordIn(value=b"a"), RecordIn(value=b"b", timestamp_ms=3)], 0, now_ms=77))
        )
        assert [r.timestamp_ms for r in records] == [77, 3]

    def test_timestamps_far_apart_are_kept_whole(self):
        given = [RecordIn(value=b"a", timestamp_ms=1), RecordIn(value=b"b", timestamp_ms=1 << 40)]
        data = whole(encode_batch(given, 0))
        assert read_header(data).magic == MAGIC
        assert [r.timestamp_ms for r in decode(data)] == [1, 1 << 40]

    def test_values_alone_are_the_same_records_as_record_ins(self):
        values = [b'"a"', b"", b'{"n":1}' * 50]
        alone = whole(encode_batch(ValueRecords(values, 1234), 9))
        assert alone == whole(encode_batch([RecordIn(value=v, timestamp_ms=1234) for v in values], 9))
        assert [(r.offset, r.value, r.key, r.headers) for r in decode(alone)] == [
            (9 + i, v, None, None) for i, v in enumerate(values)
        ]

    @pytest.mark.parametrize(("start", "end"), [(0, 99), (3, 99), (0, 4), (2, 5), (6, 7), (7, 99), (3, 3)])
    def test_columns_of_any_range_are_the_records_of_that_range(self, start, end):
        given = [
            RecordIn(
                value=b"v%d" % i * i,
                key=None if i % 3 == 0 else b"k%d" % i,
                headers=None if i % 2 else b'{"h":%d}' % i,
                timestamp_ms=100 + i,
            )
            for i in range(7)
        ]
        data = whole(encode_batch(given, 0))
        columns = batch_columns(data, 0, read_header(data), start, end)
        assert columns.records() == decode(data, start_offset=start, end_offset=end)
        assert list(columns.offsets) == list(range(start, min(end, 7)))
        assert len(columns.values) == sum(len(g.value) for g in given[start:end])

    def test_decode_range_and_limits(self):
        data = whole(encode_batch([RecordIn(value=b"x" * 10) for _ in range(10)], 100, now_ms=1))
        assert [r.offset for r in decode(data, start_offset=103, end_offset=106)] == [103, 104, 105]
        header = read_header(data)
        out = []
        size = decode_batch(data, 0, header, out, max_records=4)
        assert len(out) == 4 and is_full(size)
        out = []
        size = decode_batch(data, 0, header, out, max_bytes=25)
        assert len(out) == 2 and is_full(size)
        out = []
        decode_batch(data, 0, header, out, max_bytes=1)
        assert len(out) == 1  # the first record always

    def test_empty_batch_is_refused(self):
        with pytest.raises(ValueError):
            encode_batch([], 0)


class TestValidation:
    def test_every_flipped_byte_after_the_length_is_detected(self):
        data = bytearray(whole(encode_batch([RecordIn(value=b"hello", key=b"k", timestamp_ms=1)], 0)))
        for i in range(12, len(data)):
            corrupt = bytearray(data)
            corrupt[i] ^= 0x40
            with pytest.raises(CorruptRecordError):
                ensure_valid(bytes(corrupt))

    def test_torn_batch_is_detected(self):
        data = whole(encode_batch([RecordIn(value=b"x" * 100, timestamp_ms=1)], 0))
        for cut in (5, HEADER_SIZE - 1, HEADER_SIZE + 3, len(data) - 1):
            with pytest.raises(CorruptRecordError):
                ensure_valid(data[:cut])

    def test_insane_length_is_detected(self):
        data = bytearray(whole(encode_batch([RecordIn(value=b"x", timestamp_ms=1)], 0)))
        struct.pack_into("<i", data, 8, -5)
        with pytest.raises(CorruptRecordError):
            ensure_valid(bytes(data))

    @pytest.mark.parametrize("count", [1, 2])
    @pytest.mark.parametrize(("column", "lengths"), [(1, (0, 2, -2)), (2, (0, 2, -2)), (3, (4, 6, -1))])
    def test_lengths_that_do_not_fill_their_batch_are_detected_past_the_crc(self, count, column, lengths):
        # A batch whose CRC holds (written so by a bug, not by a disk) but whose lengths say other bytes: the
        # last record's key (column 1), headers (2) or value (3) length made too short, too long, negative.
        given = [RecordIn(value=b"hello", key=b"k", headers=b"h", timestamp_ms=1)] * count
        for length in lengths:
            data = bytearray(whole(encode_batch(given, 0)))
            struct.pack_into(
                "<i", data, HEADER_SIZE + 8 * count + 4 * count * (column - 1) + 4 * (count - 1), length
            )
            struct.pack_into("<I", data, 12, crc32c(bytes(data[16:])))
            header = ensure_valid(bytes(data))
            with pytest.raises(CorruptRecordError):
                decode_batch(bytes(data), 0, header, [])
            with pytest.raises(CorruptRecordError):
                batch_columns(bytes(data), 0, header, 0, 2)

    def test_iter_headers_stops_at_an_incomplete_batch(self):
        a = whole(encode_batch([RecordIn(value=b"a", timestamp_ms=1)], 0))
        b = whole(encode_batch([RecordIn(value=b"b", timestamp_ms=1)] * 2, 1))
        found = list(iter_headers(a + b + b[:10]))
        assert [(pos, h.base_offset) for pos, h in found] == [(0, 0), (len(a), 1)]


class TestRows:
    """Batches in rows (magic 1), read from segment files written before columns."""

    def test_every_batch_of_the_fixture_is_in_rows_and_reads_as_written(self):
        data = (ROWS / "top_rows-0" / "00000000000000000000.log").read_bytes()
        found = [(h, decode(data[p : p + h.size])) for p, h in batches_of(data)]
        assert found and all(h.magic == MAGIC_ROWS for h, _ in found)
        records = [r for _, batch in found for r in batch]
        assert [r.offset for r in records] == list(range(len(records)))
        assert [r.value for r in records[:3]] == [b'{"n":0}', b'{"n":1}', b'{"n":2}']
        assert [r.key for r in records[:3]] == [None, b"k1", b"k2"]
        assert [r.headers for r in records[:3]] == [
            None,
            b'{"h":null,"i":"id0"}',
            b'{"h":{"x":"2"},"i":null}',
        ]
        assert records[4].timestamp_ms == 1_700_000_000_000 + 1001

    def test_a_row_batch_of_absolute_timestamps_reads_as_written(self):
        data = (ROWS / "top_rows-0" / "00000000000000000030.log").read_bytes()
        last_position, last = list(batches_of(data))[-1]
        assert last.magic == MAGIC_ROWS and last.attributes & ABSOLUTE_TIMESTAMPS
        batch = data[last_position : last_position + last.size]
        assert [(r.value, r.timestamp_ms) for r in decode(batch)] == [(b'"early"', 1), (b'"late"', 1 << 41)]

    @pytest.mark.parametrize(("start", "end"), [(0, 99), (5, 12), (13, 14)])
    def test_columns_of_rows_are_the_records(self, start, end):
        data = (ROWS / "top_rows-1" / "00000000000000000000.log").read_bytes()
        for position, header in batches_of(data):
            batch = data[position : position + header.size]
            assert batch_columns(batch, 0, header, start, end).records() == decode(
                batch, start_offset=start, end_offset=end
            )
