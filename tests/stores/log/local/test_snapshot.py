"""``LocalLogEngine.export_logs`` / ``import_logs`` (``stores/log/local/snapshot.py``): a copy taken from
the files of a root another engine is appending to - single and multi-partition appends, segments
rolling - holds every append acknowledged before the copy began, at its offsets, and no part of a
multi-partition append without the rest."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.stores.log.local import LocalLogConfig, LocalLogEngine
from app.stores.log.protocol import PartitionExtent, RecordIn, TopicLogConfig

PARTITIONS = 3


async def _read_all(engine: LocalLogEngine, topic: str, partition: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    offset = 0
    while batch := await engine.read(topic, partition, offset, max_records=500):
        out += [(r.offset, r.value) for r in batch]
        offset = batch[-1].offset + 1
    return out


class TestExportWhileAppending:
    async def test_the_copy_holds_every_acknowledged_append_and_whole_transactions(self, tmp_path: Path):
        config = LocalLogConfig(segment_bytes=8 * 1024)  # rolls while the copy runs
        live = LocalLogEngine(tmp_path / "live", config)
        await live.start()
        await live.create_topic("top_a", PARTITIONS, TopicLogConfig())
        acked: list[tuple[int, dict[int, int]]] = []  # (append number, base offset per partition)
        stop = asyncio.Event()

        async def writer(lane: int) -> None:
            n = lane
            while not stop.is_set():
                parts = range(PARTITIONS) if n % 3 else [n % PARTITIONS]
                value = json.dumps({"n": n, "parts": list(parts)}).encode() + b"x" * 200
                bases = await live.append("top_a", {p: [RecordIn(value)] for p in parts})
                acked.append((n, bases))
                n += 4

        writers = [asyncio.create_task(writer(lane)) for lane in range(4)]
        await asyncio.sleep(0.3)
        before = list(acked)
        extents = await LocalLogEngine(tmp_path / "live", config).export_logs(tmp_path / "copy")
        stop.set()
        await asyncio.gather(*writers)
        await live.close()
        assert before and len(acked) > len(before)

        restored = LocalLogEngine(tmp_path / "restored", config)
        assert await restored.import_logs(tmp_path / "copy") == extents
        await restored.start()
        try:
            held: dict[int, dict[int, int]] = {}  # append number -> partition -> offset
            for partition in range(PARTITIONS):
                records = await _read_all(restored, "top_a", partition)
                assert [o for o, _ in records] == list(range(len(records)))  # dense from 0
                assert extents[partition] == PartitionExtent("top_a", partition, 0, len(records))
                for offset, value in records:
                    held.setdefault(json.loads(value[: value.index(b"}") + 1])["n"], {})[partition] = offset
            for n, bases in before:
                assert held.get(n) == bases, f"append {n} acknowledged before the copy"
            for n, parts in held.items():
                expected = PARTITIONS if n % 3 else 1
                assert len(parts) == expected, f"append {n} is partly in the copy: {parts}"
        finally:
            await restored.close()


class TestImport:
    async def test_refuses_a_root_that_holds_logs(self, tmp_path: Path):
        engine = LocalLogEngine(tmp_path / "live")
        await engine.start()
        await engine.create_topic("top_a", 1, TopicLogConfig())
        await engine.append("top_a", {0: [RecordIn(b"1")]})
        await engine.close()
        await LocalLogEngine(tmp_path / "live").export_logs(tmp_path / "copy")
        with pytest.raises(FileExistsError):
            await LocalLogEngine(tmp_path / "live").import_logs(tmp_path / "copy")
