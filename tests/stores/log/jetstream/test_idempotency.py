"""The JetStream idempotency records (a KV bucket every API node shares), on the session's real cluster."""

from __future__ import annotations

import asyncio
import contextlib
import secrets

import nats

from app.stores.log.jetstream.idempotency import JetStreamIdempotency


class TestAFreshBucket:
    async def test_concurrent_first_claims_all_win_while_the_new_bucket_elects_its_leader(self, nats_cluster):
        """The first keyed publishes on a new cluster come at once; the bucket they create has no leader for
        a moment, and a claim then has no responders (nothing written). Each is asked again, not 503'd:
        before, 9 of 12 such claims failed (the crash soak's first keyed publishes on JetStream)."""
        nc = await nats.connect(servers=nats_cluster.url.split(","))
        js = nc.jetstream()
        buckets = [f"QC_TEST_{secrets.token_hex(4)}" for _ in range(3)]
        try:
            for bucket in buckets:
                records = JetStreamIdempotency(
                    lambda: js, window_seconds=60, replicas=3, timeout=5, bucket=bucket
                )
                claims = await asyncio.gather(*(records.claim("topic", f"k{i}", 1) for i in range(4)))
                assert [c.state for c in claims] == ["won"] * 4
                assert (await records.get("topic", "k0")) is not None
        finally:
            for bucket in buckets:
                with contextlib.suppress(nats.errors.Error):
                    await js.delete_key_value(bucket)
            await nc.close()
