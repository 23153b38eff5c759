"""Large reads over the engine's bulk read links (app/stores/log/jetstream/bulk_link.py) answer exactly what
reads through nats-py answer, in every shape, and go back to nats-py for any answer but the plain run."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest

from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine, codec
from app.stores.log.jetstream.bulk_link import BulkLink
from app.stores.log.jetstream.config import NatsLink
from app.stores.log.protocol import RecordIn, TopicLogConfig


@pytest.fixture
async def engines(nats_cluster) -> AsyncIterator[tuple[JetStreamLogEngine, JetStreamLogEngine]]:
    """The same cluster through the bulk links (from 100 records asked on) and through nats-py alone."""
    servers = tuple(nats_cluster.url.split(","))
    bulk = JetStreamLogEngine(JetStreamConfig(servers=servers, bulk_read_min_records=100))
    plain = JetStreamLogEngine(JetStreamConfig(servers=servers, bulk_read_min_records=0))
    await bulk.start()
    await plain.start()
    yield bulk, plain
    await bulk.close()
    await plain.close()


async def _topic(engine: JetStreamLogEngine, partitions: int = 1) -> str:
    topic = f"top_{secrets.token_hex(6)}"
    await engine.create_topic(topic, partitions, TopicLogConfig(replicas=3))
    return topic


async def _both(engines, topic, offset, max_records, max_bytes=1 << 20):
    bulk, plain = engines
    got = await bulk.read(topic, 0, offset, max_records=max_records, max_bytes=max_bytes)
    want = await plain.read(topic, 0, offset, max_records=max_records, max_bytes=max_bytes)
    return got, want


class TestTheSameRecords:
    async def test_every_shape_of_read_answers_what_the_client_answers(self, engines):
        bulk, _ = engines
        topic = await _topic(bulk)
        records = [
            RecordIn(
                value=b"v%d" % i, key=b"k%d" % i if i % 3 else None, headers=b'{"h":1}' if i % 5 else None
            )
            for i in range(1500)
        ]
        for start in range(0, len(records), 500):
            await bulk.append(topic, {0: records[start : start + 500]})
        for offset, count, size in [
            (0, 1500, 8 << 20),  # all of it
            (250, 1000, 8 << 20),  # from the middle
            (1400, 1000, 8 << 20),  # runs off the end
            (1500, 1000, 8 << 20),  # at the end: nothing
            (5000, 1000, 8 << 20),  # past the end
            (0, 1000, 4096),  # cut by bytes, at least one record
        ]:
            got, want = await _both(engines, topic, offset, count, size)
            assert [(r.offset, r.timestamp_ms, r.key, r.headers, r.value) for r in got] == [
                (r.offset, r.timestamp_ms, r.key, r.headers, r.value) for r in want
            ], (offset, count, size)
            if offset < 1500:
                assert got and got[0].offset == offset
        assert len((await _both(engines, topic, 0, 1500, 8 << 20))[0]) == 1500
        assert bulk.bulk_link is not None and bulk.bulk_link._idle  # the reads went over a bulk link

    async def test_answers_longer_than_a_socket_read_and_reads_in_columns(self, engines):
        # 3 MB of records: an answer arrives over several reads of the link's socket (1 MiB each), records
        # cut anywhere between them, its MSG lines found by their prefix; read_columns answers the same.
        bulk, plain = engines
        topic = await _topic(bulk)
        records = [RecordIn(value=b'"%s"' % (b"%05d" % i * 2000)) for i in range(300)]
        for start in range(0, 300, 100):
            await bulk.append(topic, {0: records[start : start + 100]})
        got, want = await _both(engines, topic, 0, 300, 8 << 20)
        assert [r.value for r in got] == [r.value for r in want] == [r.value for r in records]
        columns = await bulk.read_columns(topic, 0, 0, 300, 8 << 20)
        assert columns == await plain.read_columns(topic, 0, 0, 300, 8 << 20)
        assert columns.records() == got
        assert bulk.bulk_link is not None and bulk.bulk_link._idle

    async def test_a_gap_below_the_start_goes_back_to_the_client(self, engines, nats_cluster):
        # Records removed at the start (retention, a purge): the first record answered is not the one
        # asked for, so the run is not seq..last and the read is asked again with headers.
        bulk, _ = engines
        topic = await _topic(bulk)
        await bulk.append(topic, {0: [RecordIn(value=b"%d" % i) for i in range(300)]})
        name = codec.stream_name(topic, 0)
        await bulk.client.api(f"STREAM.PURGE.{name}", {"keep": 100}, stream=name)
        got, want = await _both(engines, topic, 0, 500)
        assert [r.offset for r in got] == [r.offset for r in want] == list(range(200, 300))
        assert bulk.bulk_link is not None
        assert await bulk.bulk_link.read(name, 1, 500, 1 << 20) is None  # what sent it back to the client

    async def test_an_unknown_stream_is_none_for_the_client_to_tell(self, engines):
        bulk, _ = engines
        assert bulk.bulk_link is not None
        assert await bulk.bulk_link.read("QC_no_such_stream", 1, 500, 1 << 20) is None


class TestTheLink:
    async def test_no_server_to_reach_gives_none_and_one_warning(self, caplog):
        # Signing in for real (a password over TLS, a creds file): tests/system/test_secured_links.py and
        # test_creds_link.py read in bulk through such links.
        link = BulkLink(["nats://127.0.0.1:1"], NatsLink(), 5.0)
        assert await link.read("QC_any", 1, 500, 1 << 20) is None
        assert await link.read("QC_any", 1, 500, 1 << 20) is None
        assert caplog.text.count("bulk read links unavailable") == 1
        await link.close()

    async def test_readers_at_once_share_a_bounded_set_of_links(self, engines):
        # Push members of many partitions read at once: past the cap, reads go through nats-py instead of
        # opening (and closing) a link each; every read still answers the same records.
        from app.stores.log.jetstream.bulk_link import _MAX_LINKS

        bulk, plain = engines
        topic = await _topic(bulk)
        await bulk.append(topic, {0: [RecordIn(value=b"%d" % i) for i in range(300)]})
        answers = await asyncio.gather(*(bulk.read(topic, 0, 0, max_records=500) for _ in range(30)))
        want = [r.value for r in await plain.read(topic, 0, 0, max_records=500)]
        assert all([r.value for r in answer] == want for answer in answers)
        assert bulk.bulk_link is not None
        assert 0 < bulk.bulk_link._open_links <= _MAX_LINKS
        assert len(bulk.bulk_link._idle) == bulk.bulk_link._open_links  # every link back, none leaked
