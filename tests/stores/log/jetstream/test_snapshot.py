"""``stores/log/jetstream/snapshot.py``: a topic's streams exported (records with keys, headers and
timestamps; a multi-partition append; a head cut by retention) and imported into streams created anew
keep every record at its offset, and the partitions' first offsets."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.stores.log.jetstream import JetStreamLogEngine, codec, snapshot
from app.stores.log.protocol import BackupUnsupported, PartitionExtent, RecordIn, TopicLogConfig


async def _all(engine: JetStreamLogEngine, topic: str, partition: int) -> list[tuple]:
    out: list[tuple] = []
    offset = 0
    while batch := await engine.read(topic, partition, offset, max_records=100):
        out += [tuple(r) for r in batch]
        offset = batch[-1].offset + 1
    return out


class TestExportImport:
    async def test_records_come_back_at_their_offsets(
        self, js_engine: JetStreamLogEngine, topic_id, tmp_path: Path
    ):
        topic = topic_id()
        await js_engine.create_topic(topic, 2, TopicLogConfig(replicas=1))
        for i in range(12):
            await js_engine.append(topic, {0: [RecordIn(b"v%d" % i, b"k%d" % i, b'{"h":"1"}')]})
        await js_engine.append(topic, {0: [RecordIn(b"both-0")], 1: [RecordIn(b"both-1"), RecordIn(b"x")]})
        name0 = codec.stream_name(topic, 0)
        await js_engine.client.api(f"STREAM.PURGE.{name0}", {"keep": 6}, stream=name0)  # the head cut
        before = [await _all(js_engine, topic, p) for p in range(2)]
        assert before[0][0][0] == 7 and len(before[0]) == 6 and len(before[1]) == 2

        names = [codec.stream_name(topic, p) for p in range(2)]
        extents = await snapshot.export_streams(js_engine.client, names, tmp_path / "copy")
        assert extents == [PartitionExtent(topic, 0, 7, 13), PartitionExtent(topic, 1, 0, 2)]
        with pytest.raises(FileExistsError):
            await snapshot.import_streams(js_engine.client, tmp_path / "copy")

        await js_engine.delete_topic(topic)
        assert await snapshot.import_streams(js_engine.client, tmp_path / "copy") == extents
        after = [await _all(js_engine, topic, p) for p in range(2)]
        assert after == before
        info = await js_engine.partition_info(topic, 0)
        assert (info.earliest_offset, info.latest_offset) == (7, 13)
        assert await js_engine.append(topic, {0: [RecordIn(b"next")]}) == {0: 13}

    async def test_refuses_a_stream_with_a_gap_inside(
        self, js_engine: JetStreamLogEngine, topic_id, tmp_path: Path
    ):
        topic = topic_id()
        await js_engine.create_topic(topic, 1, TopicLogConfig(replicas=1))
        await js_engine.append(topic, {0: [RecordIn(b"a"), RecordIn(b"b"), RecordIn(b"c")]})
        name = codec.stream_name(topic, 0)
        await js_engine.client.api(f"STREAM.MSG.DELETE.{name}", {"seq": 2}, stream=name)
        with pytest.raises(BackupUnsupported, match="deleted messages"):
            await snapshot.export_streams(js_engine.client, [name], tmp_path / "copy")
