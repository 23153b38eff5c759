"""Two ``queuecore-server`` processes share Postgres and Redis: one key's limit holds across both,
counted from the servers' own usage events (stamped with the Redis time of acceptance)."""

from __future__ import annotations

import asyncio
import secrets
import time

import httpx
import pytest

from app.broker.usage import read_usage
from app.stores.log.local import LocalLogConfig, LocalLogEngine
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env, set_tier

LIMIT = 20


@pytest.fixture
def pair(tmp_path, postgres_database):
    prefix = f"qc:test:{secrets.token_hex(4)}:"
    # Every node of one deployment shares the secret that keys the API-key hashes.
    secret = secrets.token_urlsafe(32)
    servers = []
    for i in range(2):
        data_dir = tmp_path / f"node{i}"
        env = server_env(
            data_dir,
            postgres_database,
            QUEUECORE_REDIS_URL="redis://127.0.0.1:6379/0",
            QUEUECORE_RATE_LIMIT_PREFIX=prefix,
            QUEUECORE_SECRET_KEY=secret,
        )
        servers.append(
            ServerProcess(env=env, port=free_port(), data_dir=data_dir, log_path=tmp_path / f"node{i}.log")
        )
    env = servers[0].env
    cli(env, "migrate")
    name = f"mp-{secrets.token_hex(3)}"
    boot = bootstrap(env, name, "--tier", "enterprise")
    set_tier(env, name, "enterprise", f"publish=1000,consume=1000,admin={LIMIT}")
    for s in servers:
        s.keys, s.project_id = boot["keys"], boot["projectId"]
        s.start()
    yield servers, name
    for s in servers:
        s.stop()


async def _hammer(urls: list[str], key: str, seconds: float, most: int = 5000) -> list[int]:
    """Four workers per server, for at least ``seconds`` and until more than two windows' worth were
    accepted and one was refused, however slow the machine (at most ``most`` requests)."""
    headers = {"Authorization": f"Bearer {key}"}
    statuses: list[int] = []
    accepted = refused = 0
    deadline = time.monotonic() + seconds

    def done() -> bool:
        enough = accepted >= LIMIT * 2 and refused > 0
        return (enough and time.monotonic() >= deadline) or len(statuses) >= most

    async with httpx.AsyncClient(timeout=5) as http:

        async def worker(url: str) -> None:
            nonlocal accepted, refused
            while not done():
                status = (await http.get(url + "/v1/topics", headers=headers)).status_code
                statuses.append(status)
                accepted += status == 200
                refused += status == 429

        await asyncio.gather(*(worker(u) for u in urls for _ in range(4)))
    return statuses


async def _accepted_times(server: ServerProcess, key_id_prefix: str = "key_") -> list[int]:
    engine = LocalLogEngine(server.data_dir / "log", LocalLogConfig())
    await engine.start()
    try:
        return [
            e["acceptedAtUs"]
            async for e in read_usage(engine)
            if e["status"] == 200 and e["route"] == "/v1/topics" and e["keyId"].startswith(key_id_prefix)
        ]
    finally:
        await engine.close()


class TestSharedLimits:
    async def test_no_window_accepts_more_than_the_limit(self, pair):
        servers, _ = pair
        key = servers[0].keys["production"]
        statuses = await _hammer([s.url for s in servers], key, 3.0)
        assert statuses.count(429) > 0 and statuses.count(200) >= LIMIT * 2
        for s in servers:
            s.stop()  # flushes usage events
        times = sorted([t for s in servers for t in await _accepted_times(s)])
        assert len(times) == statuses.count(200)
        # In no one-second window (of the Redis clock) are more than LIMIT accepted.
        j = 0
        for i, t in enumerate(times):
            while times[j] <= t - 1_000_000:
                j += 1
            assert i - j + 1 <= LIMIT, f"{i - j + 1} accepted within one second"
        # Both processes accepted some: the limit is shared, not per process.
        per_node = [await _accepted_times(s) for s in servers]
        assert all(per_node), [len(t) for t in per_node]

    async def test_retry_after_then_succeeds_and_tier_change_reaches_both(self, pair):
        servers, name = pair
        headers = {"Authorization": f"Bearer {servers[0].keys['staging']}"}
        async with httpx.AsyncClient(timeout=5) as http:
            refused = None
            for i in range(LIMIT * 3):
                r = await http.get(servers[i % 2].url + "/v1/topics", headers=headers)
                if r.status_code == 429:
                    refused = r
                    break
            assert refused is not None
            await asyncio.sleep(int(refused.headers["Retry-After"]))
            assert (await http.get(servers[1].url + "/v1/topics", headers=headers)).status_code == 200
            set_tier(servers[0].env, name, "enterprise", "publish=1000,consume=1000,admin=77")
            # Each process holds a key's limits for at most its key cache TTL (0.5 s): the new limit
            # reaches both without a restart. How soon is the benchmarks' business, not a test's.
            for s in servers:
                assert await _limit_seen(http, s.url, headers, "77"), f"{s.url} still has the old limit"


async def _limit_seen(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], limit: str, tries: int = 100
) -> bool:
    """Whether a server answers with ``RateLimit-Limit: limit`` within ``tries`` looks, 50 ms apart."""
    for _ in range(tries):
        if (await http.get(url + "/v1/topics", headers=headers)).headers["RateLimit-Limit"] == limit:
            return True
        await asyncio.sleep(0.05)
    return False
