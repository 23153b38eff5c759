"""The in-memory tail of a partition: reads served from it answer exactly what the files answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.stores.log.local import partition_log
from app.stores.log.protocol import RecordIn, TopicLogConfig
from tests.stores.log.conftest import open_local

TOPIC = "top_tail"


class TestTail:
    async def test_reads_from_the_tail_equal_reads_from_the_files(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(partition_log, "_TAIL_BYTES", 2048)  # a tail of a few batches
        engine = await open_local(tmp_path)
        await engine.create_topic(TOPIC, 1, TopicLogConfig())
        for n in range(40):  # batches of 1-3 records, one of them larger than the whole tail
            size = 3000 if n == 20 else 30 + n
            records = [
                RecordIn(value=bytes([n]) * size, key=b"k" if n % 2 else None) for _ in range(1 + n % 3)
            ]
            await engine.append(TOPIC, {0: records})
        latest = (await engine.partition_info(TOPIC, 0)).latest_offset
        log = engine.manager.log(TOPIC, 0)
        assert log._tail and log._tail[0][0].base_offset > 0  # the tail holds the end only
        shapes = [(o, n, b) for o in range(latest + 1) for n, b in ((1, 1 << 20), (5, 1 << 20), (100, 200))]
        from_tail = [await engine.read(TOPIC, 0, o, max_records=n, max_bytes=b) for o, n, b in shapes]
        await engine.close()
        engine = await open_local(tmp_path)  # a fresh start: no tail, every read from the files
        try:
            assert not engine.manager.log(TOPIC, 0)._tail
            from_files = [await engine.read(TOPIC, 0, o, max_records=n, max_bytes=b) for o, n, b in shapes]
        finally:
            await engine.close()
        assert from_tail == from_files
        assert from_tail[0][0].offset == 0 and from_tail[-1] == []
