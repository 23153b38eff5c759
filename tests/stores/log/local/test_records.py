"""Batch encoding: round trips, timestamps, CRC and framing checks (``records``)."""

from __future__ import annotations

import struct

import pytest

from app.stores.log.local.records import (
    ABSOLUTE_TIMESTAMPS,
    HEADER_SIZE,
    CorruptRecordError,
    decode_batch,
    encode_batch,
    ensure_valid,
    is_full,
    iter_headers,
    read_header,
)
from app.stores.log.protocol import RecordIn


def whole(batch) -> bytes:
    return batch.header + batch.body


def decode(data: bytes, **kwargs):
    header = ensure_valid(data)
    out = []
    decode_batch(data, 0, header, out, **kwargs)
    return out


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

    def test_timestamps_far_apart_use_absolute_encoding(self):
        given = [RecordIn(value=b"a", timestamp_ms=1), RecordIn(value=b"b", timestamp_ms=1 << 40)]
        data = whole(encode_batch(given, 0))
        assert read_header(data).attributes & ABSOLUTE_TIMESTAMPS
        assert [r.timestamp_ms for r in decode(data)] == [1, 1 << 40]

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

    def test_iter_headers_stops_at_an_incomplete_batch(self):
        a = whole(encode_batch([RecordIn(value=b"a", timestamp_ms=1)], 0))
        b = whole(encode_batch([RecordIn(value=b"b", timestamp_ms=1)] * 2, 1))
        found = list(iter_headers(a + b + b[:10]))
        assert [(pos, h.base_offset) for pos, h in found] == [(0, 0), (len(a), 1)]
