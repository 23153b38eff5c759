"""A segment over in-memory files (``io.BytesIO``): append, index, read, recover, truncate, roll."""

from __future__ import annotations

import io

from app.stores.log.local.records import decode_batch, encode_batch, iter_headers
from app.stores.log.local.segment import Segment, SegmentState
from app.stores.log.protocol import RecordIn


def make(base: int = 0, interval: int = 100, log: bytes = b"", state: SegmentState | None = None) -> Segment:
    return Segment(
        base, io.BytesIO(log), io.BytesIO(), io.BytesIO(), index_interval_bytes=interval, state=state
    )


def fill(segment: Segment, batches: int, per_batch: int = 3, ts: int = 1000) -> None:
    for _i in range(batches):
        offset = segment.next_offset
        batch = encode_batch(
            [
                RecordIn(value=f"{offset + j}".encode() * 10, timestamp_ms=ts + offset + j)
                for j in range(per_batch)
            ],
            offset,
        )
        segment.append([(offset, batch)])


def all_offsets(segment: Segment) -> list[int]:
    data = segment.read(0, segment.size)
    out = []
    for pos, header in iter_headers(data):
        decode_batch(data, pos, header, out)
    return [r.offset for r in out]


def log_bytes(segment: Segment) -> bytes:
    return segment.read(0, 1 << 30)


class TestAppend:
    def test_appends_are_contiguous_and_indexed_sparsely(self):
        segment = make(base=10, interval=100)
        fill(segment, 20)
        assert segment.next_offset == 70
        assert all_offsets(segment) == list(range(10, 70))
        entries = segment.offset_index.entries()
        assert 0 < len(entries) < 20
        # Each entry points at the start of the batch holding its offset.
        data = log_bytes(segment)
        starts = {pos: h.base_offset for pos, h in iter_headers(data)}
        assert all(starts[position] == 10 + rel for rel, position in entries)

    def test_position_for_finds_an_earlier_batch_start(self):
        segment = make(interval=50)
        fill(segment, 30)
        starts = {h.base_offset: pos for pos, h in iter_headers(log_bytes(segment))}
        for offset in range(0, 90, 7):
            found_offset, position = segment.position_for(offset)
            assert found_offset <= offset and starts[found_offset] == position

    def test_state_tracks_size_and_timestamps(self):
        segment = make()
        fill(segment, 4, ts=5000)
        assert segment.size == len(log_bytes(segment))
        assert segment.state.max_timestamp == 5000 + 11
        assert segment.state.rolling_timestamp == 5000 + 2
        assert segment.state.last_batch_offset == 9

    def test_a_batch_out_of_sequence_is_refused(self):
        segment = make()
        fill(segment, 1)
        try:
            segment.append([(10, encode_batch([RecordIn(value=b"x")], 10))])
        except ValueError:
            pass
        else:
            raise AssertionError("expected ValueError")
        assert segment.next_offset == 3


class TestShouldRoll:
    def test_by_size_and_by_age(self):
        segment = make()
        assert not segment.should_roll(10_000, 0, 0, segment_bytes=100, segment_ms=10)  # empty: never
        fill(segment, 1, ts=1000)
        assert segment.should_roll(10_000, 0, 1000, segment_bytes=1000, segment_ms=10_000)
        assert not segment.should_roll(10, 0, 1005, segment_bytes=1 << 20, segment_ms=10_000)
        assert segment.should_roll(10, 0, 1002 + 10_000, segment_bytes=1 << 20, segment_ms=10_000)


class TestRecover:
    def test_clean_log_is_kept_and_indexes_rebuilt(self):
        segment = make(interval=100)
        fill(segment, 10)
        data = log_bytes(segment)
        entries = segment.offset_index.entries()
        again = make(log=data, interval=100)
        result = again.recover()
        assert result.truncated_bytes == 0 and result.next_offset == 30 and result.batches == 10
        assert again.offset_index.entries() == entries
        assert again.state.size == len(data) and again.state.max_timestamp == segment.state.max_timestamp

    def test_torn_tail_is_cut_at_the_last_whole_batch(self):
        segment = make()
        fill(segment, 5)
        data = log_bytes(segment)
        whole = segment.size
        fill(segment, 1)
        torn = log_bytes(segment)[: whole + 17]
        again = make(log=torn)
        result = again.recover()
        assert (result.valid_bytes, result.truncated_bytes, result.next_offset) == (whole, 17, 15)
        assert log_bytes(again) == data
        assert "incomplete" in result.reason

    def test_corrupt_batch_cuts_it_and_everything_after(self):
        segment = make()
        fill(segment, 6)
        starts = [pos for pos, _ in iter_headers(log_bytes(segment))]
        data = bytearray(log_bytes(segment))
        data[starts[3] + 60] ^= 0xFF
        again = make(log=bytes(data))
        result = again.recover()
        assert result.valid_bytes == starts[3] and result.next_offset == 9
        assert "CRC" in result.reason
        assert all_offsets(again) == list(range(9))

    def test_garbage_after_the_log_is_cut(self):
        segment = make()
        fill(segment, 2)
        again = make(log=log_bytes(segment) + b"\x00" * 100)
        result = again.recover()
        assert result.truncated_bytes == 100 and result.next_offset == 6

    def test_keep_predicate_cuts_at_the_first_rejected_batch(self):
        segment = make()
        fill(segment, 2)
        offset = segment.next_offset
        segment.append([(offset, encode_batch([RecordIn(value=b"t")], offset, txn_id=9))])
        fill(segment, 1)
        again = make(log=log_bytes(segment))
        result = again.recover(lambda h: h.txn_id != 9)
        assert result.next_offset == 6 and result.first_txn_cut == 9

    def test_offset_gap_is_corruption(self):
        a = make()
        fill(a, 2)
        b = encode_batch([RecordIn(value=b"x")], 100)
        again = make(log=log_bytes(a) + b.header + b.body)
        result = again.recover()
        assert result.next_offset == 6 and "expected" in result.reason


class TestTruncateAndLoad:
    def test_truncate_to_a_batch_start(self):
        segment = make(interval=50)
        fill(segment, 10)
        removed = segment.truncate_to(12)
        assert removed > 0 and segment.next_offset == 12
        assert all_offsets(segment) == list(range(12))
        assert all(rel < 12 for rel, _ in segment.offset_index.entries())
        fill(segment, 1)
        assert all_offsets(segment)[-3:] == [12, 13, 14]

    def test_load_derives_the_state_from_files(self):
        log, index, time_index = io.BytesIO(), io.BytesIO(), io.BytesIO()
        segment = Segment(5, log, index, time_index, index_interval_bytes=100)
        fill(segment, 12, ts=2000)
        segment.on_become_inactive()
        again = Segment(
            5,
            io.BytesIO(log.getvalue()),
            io.BytesIO(index.getvalue()),
            io.BytesIO(time_index.getvalue()),
            index_interval_bytes=100,
        )
        again.load()
        assert again.state == segment.state

    def test_load_rebuilds_a_corrupt_index(self, caplog):
        log, index, time_index = io.BytesIO(), io.BytesIO(), io.BytesIO()
        segment = Segment(0, log, index, time_index, index_interval_bytes=100)
        fill(segment, 12)
        segment.sync_indexes()
        again = Segment(
            0,
            io.BytesIO(log.getvalue()),
            io.BytesIO(index.getvalue()[:-3]),
            io.BytesIO(),
            index_interval_bytes=100,
        )
        again.load()
        assert again.offset_index.entries() == segment.offset_index.entries()
        assert again.next_offset == 36
        assert "rebuilding the indexes" in caplog.text
