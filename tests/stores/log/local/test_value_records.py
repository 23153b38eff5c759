"""Values alone (``ValueRecords``): the same sequence of ``RecordIn`` as a list, and the same bytes on disk."""

from __future__ import annotations

import pytest

from app.stores.log.local.records import decode_batch, encode_batch, ensure_valid
from app.stores.log.protocol import RecordIn, ValueRecords

VALUES = [b"null", b'{"a":1}', b"", b'"' + b"x" * 70_000 + b'"', b"[1,2,3]"]


class TestValueRecords:
    def test_is_the_sequence_of_its_records(self):
        records = ValueRecords(VALUES, 1_764_000_000_000)
        expected = [RecordIn(v, None, None, 1_764_000_000_000) for v in VALUES]
        assert len(records) == len(expected) and list(records) == expected
        assert records[1] == expected[1] and records[-1] == expected[-1]
        assert list(records[1:4]) == expected[1:4] and list(records[::2]) == expected[::2]
        with pytest.raises(IndexError):
            records[len(VALUES)]

    @pytest.mark.parametrize("timestamp", [1_764_000_000_000, 0])
    def test_encodes_as_the_same_records_in_a_list(self, timestamp):
        ours = encode_batch(ValueRecords(VALUES, timestamp), 42, txn_id=7, now_ms=1_700_000_000_000)
        theirs = encode_batch(
            [RecordIn(v, None, None, timestamp) for v in VALUES], 42, txn_id=7, now_ms=1_700_000_000_000
        )
        assert ours == theirs
        data = ours.header + ours.body
        out: list = []
        decode_batch(data, 0, ensure_valid(data), out)
        assert [(r.offset, r.value, r.key, r.headers) for r in out] == [
            (42 + i, v, None, None) for i, v in enumerate(VALUES)
        ]
        assert {r.timestamp_ms for r in out} == {timestamp or 1_700_000_000_000}
