"""Token buckets of group rates (``app/stores/limits/tokens.py``): both implementations take whole tokens
up to what is asked and what the bucket holds, start full, refill at the rate up to the burst, and say how
long until the next token. Refill is checked with rates so low (or a clock so controlled) that no amount of
machine load changes the counts."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from app.stores.limits.protocol import Taken, TokenBuckets
from app.stores.limits.tokens import MemoryTokenBuckets, RedisTokenBuckets
from tests.stores.limits.conftest import REDIS_URL


@pytest.fixture(params=["memory", "redis"])
async def buckets(request: pytest.FixtureRequest) -> AsyncIterator[TokenBuckets]:
    instance: TokenBuckets = (
        MemoryTokenBuckets()
        if request.param == "memory"
        else RedisTokenBuckets(REDIS_URL, key_prefix=f"qc:test:tb:{secrets.token_hex(4)}:")
    )
    try:
        yield instance
    finally:
        await instance.close()


def name() -> str:
    return f"group:{secrets.token_hex(6)}"


class TestTake:
    async def test_each_implements_the_protocol_and_answers_taken(self, buckets: TokenBuckets):
        assert isinstance(buckets, TokenBuckets)
        assert type(await buckets.take(name(), 1.0, 1, 1)) is Taken

    async def test_a_new_bucket_is_full_and_gives_at_most_its_burst(self, buckets: TokenBuckets):
        bucket = name()
        # 0.001 tokens per second: nothing refills during the test, whatever the load.
        first = await buckets.take(bucket, 0.001, 5, 3)
        assert (first.granted, first.wait_ms) == (3, 0)
        second = await buckets.take(bucket, 0.001, 5, 3)
        assert second.granted == 2 and 0 <= second.tokens < 0.01
        assert second.wait_ms > 900_000  # about 1000 s until the next token at that rate
        assert (await buckets.take(bucket, 0.001, 5, 1)).granted == 0

    async def test_asking_for_nothing_takes_nothing(self, buckets: TokenBuckets):
        bucket = name()
        assert (await buckets.take(bucket, 1, 2, 0)).granted == 0
        assert (await buckets.take(bucket, 1, 2, 5)).granted == 2

    async def test_buckets_are_independent(self, buckets: TokenBuckets):
        a, b = name(), name()
        assert (await buckets.take(a, 0.001, 1, 1)).granted == 1
        assert (await buckets.take(a, 0.001, 1, 1)).granted == 0
        assert (await buckets.take(b, 0.001, 1, 1)).granted == 1

    async def test_refused_arguments(self, buckets: TokenBuckets):
        for rate, burst, want in ((0, 1, 1), (1, 0.5, 1), (1, 1, -1)):
            with pytest.raises(ValueError):
                await buckets.take(name(), rate, burst, want)


class TestRefill:
    async def test_memory_refills_at_the_rate_up_to_the_burst(self):
        now = [0]
        buckets = MemoryTokenBuckets(clock=lambda: now[0])
        assert (await buckets.take("g", 2.0, 4, 10)).granted == 4
        now[0] += 1_250_000_000  # 1.25 s at 2/s: 2.5 tokens
        taken = await buckets.take("g", 2.0, 4, 10)
        assert taken.granted == 2 and taken.tokens == pytest.approx(0.5)
        assert taken.wait_ms == 250
        now[0] += 60_000_000_000  # a minute: full again, no more than the burst
        assert (await buckets.take("g", 2.0, 4, 10)).granted == 4

    async def test_redis_shares_one_bucket_between_instances_and_refills(self):
        prefix = f"qc:test:tb:{secrets.token_hex(4)}:"
        one, two = (
            RedisTokenBuckets(REDIS_URL, key_prefix=prefix),
            RedisTokenBuckets(REDIS_URL, key_prefix=prefix),
        )
        client = Redis.from_url(REDIS_URL)
        try:
            assert (await one.take("g", 0.001, 3, 2)).granted == 2
            assert (await two.take("g", 0.001, 3, 2)).granted == 1  # the same bucket, from another process
            stored = await client.hgetall(f"{prefix}g")
            assert float(stored[b"tokens"]) < 0.01 and int(stored[b"at"]) > 0
            assert await client.pttl(f"{prefix}g") > 0  # gone once it would be full again
            # Move the bucket's last take back by 10 s (at 1000/s: full again) instead of waiting.
            await client.hset(f"{prefix}g", "at", int(stored[b"at"]) - 10_000_000)
            assert (await one.take("g", 1000, 3, 5)).granted == 3
        finally:
            await one.close()
            await two.close()
            await client.aclose()

    async def test_redis_unreachable_falls_back_to_buckets_of_the_process(self):
        buckets = RedisTokenBuckets("redis://127.0.0.1:1/0", key_prefix="qc:test:tb:down:")
        try:
            assert (await buckets.take("g", 0.001, 2, 5)).granted == 2
            assert (await buckets.take("g", 0.001, 2, 5)).granted == 0
        finally:
            await buckets.close()
