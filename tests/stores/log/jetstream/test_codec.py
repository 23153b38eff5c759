"""The record frame of the JetStream engine (``codec``): frames decoded in columns are the records
``decode`` makes of them, whether every frame is a bare value (the fast path: heads read as arrays) or
some carry keys or headers."""

from __future__ import annotations

import struct

import pytest

from app.stores.log.jetstream import codec
from app.stores.log.protocol import RecordColumns, RecordIn


def frames_of(records: list[RecordIn]) -> list[bytes]:
    return [codec.encode(record, 1_700_000_000_000) for record in records]


class TestDecodeColumns:
    @pytest.mark.parametrize(
        "records",
        [
            [RecordIn(b'"v%d"' % i * i, timestamp_ms=(1 << 40) + i) for i in range(300)],
            [RecordIn(b"", timestamp_ms=5)],
            [
                RecordIn(b"a", key=b"k", timestamp_ms=1),
                RecordIn(b"b", headers=b'{"h":null}'),
                RecordIn(b"c", key=b"", headers=b"", timestamp_ms=3),
                RecordIn(b"d"),
            ],
        ],
        ids=["bare values", "one empty value", "keys and headers"],
    )
    def test_columns_are_the_decoded_records(self, records: list[RecordIn]) -> None:
        frames = frames_of(records)
        offsets = list(range(40, 40 + len(frames)))
        decoded = [codec.decode(o, f) for o, f in zip(offsets, frames, strict=True)]
        columns = codec.decode_columns(offsets, frames)
        assert columns == RecordColumns.of(decoded)
        assert columns.records() == decoded

    def test_no_frames_are_empty_columns(self) -> None:
        assert codec.decode_columns([], []) == RecordColumns.of([])

    def test_a_frame_shorter_than_its_head_is_refused(self) -> None:
        with pytest.raises(struct.error):  # as ``decode`` raises
            codec.decode_columns([0, 1], [frames_of([RecordIn(b"x")])[0], b"\x00\x01"])
