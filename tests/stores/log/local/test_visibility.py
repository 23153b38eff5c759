"""The local engine's visibility across partitions: a reader never sees one part of an append before another
(stronger than the protocol asks; the JetStream engine applies a committed append partition by partition)."""

from __future__ import annotations

import asyncio

from app.stores.log.protocol import RecordIn, TopicLogConfig
from tests.stores.log.conftest import open_local


def batch(prefix: str, n: int) -> list[RecordIn]:
    return [RecordIn(value=f"{prefix}-{i}".encode()) for i in range(n)]


class TestVisibility:
    async def test_readers_see_all_partitions_of_an_append_or_none(self, tmp_path, topic_id):
        engine = await open_local(tmp_path / "log")
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig())
        seen: list[tuple[int, int]] = []
        stop = False

        async def watch() -> None:
            while not stop:
                a = (await engine.partition_info(topic, 0)).latest_offset
                b = (await engine.partition_info(topic, 1)).latest_offset
                seen.append((a, b))
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        for i in range(30):
            await engine.append(topic, {0: batch(f"x{i}", 2), 1: batch(f"y{i}", 3)})
        stop = True
        await watcher
        await engine.close()
        # Both high-watermarks move together: 2 and 3 records per append.
        assert all(b * 2 == a * 3 for a, b in seen), [s for s in seen if s[1] * 2 != s[0] * 3][:3]
