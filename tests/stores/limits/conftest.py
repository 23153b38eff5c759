"""Limiter fixtures: every implementation behind one indirect ``limiter`` fixture, and unique buckets."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from app.stores.limits.memory import MemoryRateLimiter
from app.stores.limits.protocol import RateLimiter
from app.stores.limits.redis import RedisRateLimiter

# The suite always talks to a real Redis; `make test` makes sure one is up.
REDIS_URL = "redis://127.0.0.1:6379/0"
IMPLEMENTATIONS = ["memory", "redis"]


def make_limiter(kind: str) -> RateLimiter:
    if kind == "memory":
        return MemoryRateLimiter()
    if kind == "redis":
        # A prefix per limiter keeps concurrent test runs on the shared Redis apart.
        return RedisRateLimiter(REDIS_URL, key_prefix=f"qc:test:rl:{secrets.token_hex(4)}:")
    raise ValueError(kind)


@pytest.fixture
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[RateLimiter]:
    """A fresh limiter of the implementation named by the test's indirect parameter."""
    instance = make_limiter(request.param)
    try:
        yield instance
    finally:
        await instance.close()


@pytest.fixture
def bucket() -> Callable[[], str]:
    """Makes bucket names no other test uses."""
    return lambda: f"bucket-{secrets.token_hex(6)}"


@pytest.fixture
async def redis_client() -> AsyncIterator[Redis]:
    """A plain client on the suite's Redis, to look at what the limiter wrote."""
    client = Redis.from_url(REDIS_URL)
    try:
        yield client
    finally:
        await client.aclose()
