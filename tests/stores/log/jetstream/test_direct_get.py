"""Batch direct gets without headers (the read path) answer exactly what the same get with headers does:
the same sequences and payloads, also when the start was purged or a message in the middle is gone."""

from __future__ import annotations

import secrets

import nats

from app.stores.log.jetstream.client import JetStreamClient, NoStream, while_unsettled


async def test_bare_reads_match_reads_with_headers_across_gaps(nats_cluster):
    nc = await nats.connect(nats_cluster.url.split(","))
    client = JetStreamClient(nc, timeout=10)
    await client.start()
    stream = f"QCTEST{secrets.token_hex(4).upper()}"
    subject = f"qctest.{stream}"
    try:
        await client.api(
            f"STREAM.CREATE.{stream}",
            {"name": stream, "subjects": [subject], "num_replicas": 3, "allow_direct": True},
            timeout=30,
        )
        for i in range(10):
            # A stream just created may have no responder for a moment (its leader not yet elected): the
            # engine tries again then (appends.py), and so does this test.
            await while_unsettled(
                lambda i=i: client.append(subject, [f"m{i}".encode()], stream=stream), NoStream
            )

        async def both(seq: int, batch: int, max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
            bare = [(s, p) for s, p, _ in await client.direct_get(stream, seq, batch, max_bytes)]
            full = [
                (s, p) for s, p, _ in await client.direct_get(stream, seq, batch, max_bytes, headers=True)
            ]
            assert bare == full, (seq, batch, bare, full)
            return bare

        assert await both(1, 100) == [(s, f"m{s - 1}".encode()) for s in range(1, 11)]
        assert await both(3, 2) == [(3, b"m2"), (4, b"m3")]
        assert await both(1, 100, max_bytes=1) == [(1, b"m0")]  # at least one even past max_bytes
        assert await both(11, 5) == []

        await client.api(f"STREAM.MSG.DELETE.{stream}", {"seq": 6})  # a gap in the middle
        assert await both(5, 3) == [(5, b"m4"), (7, b"m6"), (8, b"m7")]
        await client.api(f"STREAM.PURGE.{stream}", {"seq": 4})  # the start is gone: 4.. remain
        assert await both(1, 2) == [(4, b"m3"), (5, b"m4")]
        assert [s for s, _ in await both(1, 100)] == [4, 5, 7, 8, 9, 10]
    finally:
        await client.api(f"STREAM.DELETE.{stream}")
        await nc.close()
