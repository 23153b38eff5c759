"""Sparse offset and time indexes over in-memory files (``index``), like Kafka's ``OffsetIndexTest``."""

from __future__ import annotations

import io

import pytest

from app.stores.log.local.index import CorruptIndexError, OffsetIndex, TimeIndex


class TestOffsetIndex:
    def test_lookup_finds_the_floor_entry(self):
        index = OffsetIndex(io.BytesIO(), base_offset=100)
        for offset, position in [(105, 500), (110, 1000), (120, 2000)]:
            index.append(offset, position)
        assert index.lookup(100) == (100, 0)  # before the first entry: the segment start
        assert index.lookup(105) == (105, 500)
        assert index.lookup(119) == (110, 1000)
        assert index.lookup(10_000) == (120, 2000)

    def test_entries_must_increase(self):
        index = OffsetIndex(io.BytesIO(), base_offset=0)
        index.append(5, 10)
        with pytest.raises(ValueError):
            index.append(5, 20)

    def test_flush_and_reload(self):
        f = io.BytesIO()
        index = OffsetIndex(f, base_offset=1000)
        index.append(1001, 64)
        index.append(1010, 4096)
        index.flush()
        assert len(f.getvalue()) == 16
        again = OffsetIndex(io.BytesIO(f.getvalue()), base_offset=1000)
        again.load()
        assert again.entries() == [(1, 64), (10, 4096)]
        assert again.lookup(1009) == (1001, 64)

    def test_truncate_to(self):
        f = io.BytesIO()
        index = OffsetIndex(f, base_offset=0)
        for i in range(1, 6):
            index.append(i * 10, i * 100)
        index.flush()
        index.truncate_to(30)
        assert index.entries() == [(10, 100), (20, 200)]
        assert len(f.getvalue()) == 16

    def test_a_torn_file_fails_the_sanity_check(self):
        with pytest.raises(CorruptIndexError):
            OffsetIndex(io.BytesIO(b"\x00" * 12), base_offset=0).load()

    def test_unordered_entries_fail_the_sanity_check(self):
        f = io.BytesIO()
        index = OffsetIndex(f, base_offset=0)
        index.append(10, 100)
        index.append(20, 200)
        index.flush()
        data = f.getvalue()
        with pytest.raises(CorruptIndexError):
            OffsetIndex(io.BytesIO(data[8:] + data[:8]), base_offset=0).load()

    def test_entries_past_the_log_fail_the_check(self):
        index = OffsetIndex(io.BytesIO(), base_offset=0)
        index.append(10, 5000)
        with pytest.raises(CorruptIndexError):
            index.check_against(4000)


class TestTimeIndex:
    def test_only_growing_timestamps_are_kept(self):
        index = TimeIndex(io.BytesIO(), base_offset=0)
        assert index.maybe_append(100, 5)
        assert not index.maybe_append(100, 9)
        assert not index.maybe_append(90, 12)
        assert index.maybe_append(150, 20)
        assert index.entries() == [(100, 5), (150, 20)]
        assert index.max_timestamp() == 150

    def test_lookup_gives_a_safe_place_to_scan_from(self):
        index = TimeIndex(io.BytesIO(), base_offset=50)
        index.maybe_append(100, 55)
        index.maybe_append(200, 60)
        assert index.lookup(100) == 50  # nothing indexed below 100: scan from the start
        assert index.lookup(101) == 55
        assert index.lookup(250) == 60

    def test_flush_reload_and_check(self):
        f = io.BytesIO()
        index = TimeIndex(f, base_offset=0)
        index.maybe_append(10, 1)
        index.maybe_append(20, 2)
        index.flush()
        again = TimeIndex(io.BytesIO(f.getvalue()), base_offset=0)
        again.load()
        assert again.entries() == [(10, 1), (20, 2)]
        with pytest.raises(CorruptIndexError):
            TimeIndex(io.BytesIO(f.getvalue()[:-3]), base_offset=0).load()
