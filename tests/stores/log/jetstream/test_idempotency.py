"""The JetStream idempotency records (a KV bucket every API node shares), on the session's real cluster."""

from __future__ import annotations

import asyncio
import contextlib
import secrets

import nats
import pytest

from app.stores.log.jetstream.client import JetStreamClient
from app.stores.log.jetstream.idempotency import IdempotencyEntry, JetStreamIdempotency


class TestAFreshBucket:
    async def test_concurrent_first_claims_all_win_while_the_new_bucket_elects_its_leader(self, nats_cluster):
        """The first keyed publishes on a new cluster come at once; the bucket they create has no leader for
        a moment, and a claim then has no responders (nothing written). Each is asked again, not 503'd:
        before, 9 of 12 such claims failed (the crash soak's first keyed publishes on JetStream)."""
        nc = await nats.connect(servers=nats_cluster.url.split(","))
        js = nc.jetstream()
        client = JetStreamClient(nc, 5)
        await client.start()
        buckets = [f"QC_TEST_{secrets.token_hex(4)}" for _ in range(3)]
        try:
            for bucket in buckets:
                records = JetStreamIdempotency(
                    lambda: js, lambda: client, window_seconds=60, replicas=3, timeout=5, bucket=bucket
                )
                claims = await asyncio.gather(*(records.claim("topic", f"k{i}", 1) for i in range(4)))
                assert [c.state for c in claims] == ["won"] * 4
                assert (await records.get("topic", "k0")) is not None
        finally:
            for bucket in buckets:
                with contextlib.suppress(nats.errors.Error):
                    await js.delete_key_value(bucket)
            await nc.close()


@pytest.fixture
async def records(nats_cluster):
    nc = await nats.connect(servers=nats_cluster.url.split(","))
    js = nc.jetstream()
    client = JetStreamClient(nc, 5)
    await client.start()
    bucket = f"QC_TEST_{secrets.token_hex(4)}"
    try:
        yield JetStreamIdempotency(
            lambda: js, lambda: client, window_seconds=60, replicas=3, timeout=5, bucket=bucket
        )
    finally:
        with contextlib.suppress(nats.errors.Error):
            await js.delete_key_value(bucket)
        await nc.close()


class TestGroupCommittedRecords:
    async def test_concurrent_claims_and_places_share_writes(self, records):
        await records.claim("t", "warm-up", 1)  # the bucket exists and allows atomic batches
        claims_before, puts_before = records._claims.writes, records._puts.writes
        claims = await asyncio.gather(*(records.claim("t", f"k{i}", 1) for i in range(100)))
        assert [c.state for c in claims] == ["won"] * 100
        assert len({c.revision for c in claims}) == 100
        assert records._claims.writes - claims_before <= 3
        await asyncio.gather(*(records.place("t", f"k{i}", i % 3, i, 7, 1) for i in range(100)))
        assert records._puts.writes - puts_before <= 3
        for i in (0, 42, 99):
            entry = await records.get("t", f"k{i}")
            assert entry is not None and (entry.state, entry.partition, entry.offset) == ("placed", i % 3, i)

    async def test_a_taken_key_in_a_batch_of_claims_loses_alone(self, records):
        first = await records.claim("t", "taken", 1)
        await records.place("t", "taken", 2, 40, 7, 1)
        assert first.state == "won"
        # Gathered with fresh keys: they share a batch, which the taken key makes JetStream refuse whole.
        claims = await asyncio.gather(
            *(records.claim("t", f"fresh{i}", 1) for i in range(5)),
            records.claim("t", "taken", 2),
            *(records.claim("t", f"fresh{i}", 1) for i in range(5, 10)),
        )
        states = [c.state for c in claims]
        assert states[5] == "placed" and (claims[5].partition, claims[5].offset) == (2, 40)
        assert states[:5] + states[6:] == ["won"] * 10

    async def test_the_same_key_claimed_twice_at_once_is_won_once(self, records):
        await records.claim("t", "warm-up", 1)
        claims = await asyncio.gather(*(records.claim("t", "twice", 1) for _ in range(6)))
        assert sorted(c.state for c in claims) == ["pending"] * 5 + ["won"]

    async def test_a_key_claimed_while_its_claim_is_in_flight_waits_for_it(self, records):
        # JetStream refuses a second expectation on a subject whose write is in flight, before anything is
        # there to read: such a claim looks again instead of answering 503 (the bench's duplicate keys did).
        await records.claim("t", "warm-up", 1)
        for round_ in range(5):
            keys = [f"r{round_}k{i}" for i in range(30)]
            claims = await asyncio.gather(*(records.claim("t", k, 1) for k in keys for _ in range(4)))
            for i in range(30):
                assert sorted(c.state for c in claims[4 * i : 4 * i + 4]) == ["pending"] * 3 + ["won"]


class TestTheClaimsOfABatch:
    """``claim_many``, ``place_many`` and ``abandon_many``: a batch's keys as one write each (a keyed batch
    of 1,000 messages was 2,000 calls, each with its own task and future, and its own publish)."""

    async def test_new_keys_are_claimed_in_one_write_and_placed_in_one(self, records):
        await records.claim("t", "warm-up", 1)
        claims_before, puts_before = records._claims.writes, records._puts.writes
        keys = [f"batch-{i}" for i in range(300)]
        claims = await records.claim_many("t", keys, 5)
        assert [c.state for c in claims] == ["won"] * 300
        revisions = [c.revision for c in claims]
        assert revisions == list(range(revisions[0], revisions[0] + 300))  # in order, contiguous
        assert records._claims.writes - claims_before == 1
        pending = await records.get("t", "batch-7")
        assert pending is not None and (pending.state, pending.revision) == ("pending", revisions[7])

        await records.place_many("t", [(k, _at(i % 4, i, 9, 2)) for i, k in enumerate(keys)])
        assert records._puts.writes - puts_before == 1
        for i in (0, 150, 299):
            entry = await records.get("t", keys[i])
            assert entry is not None
            assert (entry.state, entry.partition, entry.offset, entry.timestamp_ms) == ("placed", i % 4, i, 9)

    async def test_keys_that_exist_are_read_and_the_others_won(self, records):
        await records.claim("t", "placed", 1)
        await records.place("t", "placed", 2, 40, 7, 1)
        await records.claim("t", "pending", 1)
        keys = ["new-0", "placed", "new-1", "pending", "new-2"]
        claims = await records.claim_many("t", keys, 5)
        assert [c.state for c in claims] == ["won", "placed", "won", "pending", "won"]
        assert (claims[1].partition, claims[1].offset) == (2, 40)
        for key in ("new-0", "new-1", "new-2"):
            entry = await records.get("t", key)
            assert entry is not None and entry.state == "pending"

    async def test_a_batch_claimed_again_wins_nothing(self, records):
        # A retried request: every key has its entry, nothing is claimed twice.
        keys = [f"again-{i}" for i in range(50)]
        first = await records.claim_many("t", keys, 5)
        again = await records.claim_many("t", keys, 6)
        assert [c.state for c in first] == ["won"] * 50
        assert [c.state for c in again] == ["pending"] * 50
        assert [c.revision for c in again] == [c.revision for c in first]

    async def test_two_batches_sharing_keys_at_once_win_each_key_once(self, records):
        await records.claim("t", "warm-up", 1)
        shared = [f"shared-{i}" for i in range(40)]
        one, two = await asyncio.gather(
            records.claim_many("t", [*shared, "only-one"], 5),
            records.claim_many("t", ["only-two", *shared], 5),
        )
        assert one[-1].state == "won" and two[0].state == "won"
        for a, b in zip(one[:-1], two[1:], strict=True):
            assert sorted([a.state, b.state]) == ["pending", "won"]

    async def test_abandoned_keys_are_unknown(self, records):
        keys = ["gone-0", "gone-1", "gone-2"]
        await records.claim_many("t", keys, 5)
        await records.abandon_many("t", keys, 8)
        for key in keys:
            entry = await records.get("t", key)
            assert entry is not None and (entry.state, entry.at_ms) == ("unknown", 8)


def _at(partition: int, offset: int, timestamp_ms: int, latency_ms: int) -> IdempotencyEntry:
    """Where a message landed (any ``Placement``: an entry as read is one)."""
    return IdempotencyEntry(
        "placed", 0, partition=partition, offset=offset, timestamp_ms=timestamp_ms, latency_ms=latency_ms
    )
