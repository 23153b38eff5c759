"""SIGKILL the real server while clients publish; every acknowledged message must survive, in place.

The engine's own crash suite (tests/stores/log/local/test_crash.py) kills an appending process 20+
times; this is the end-to-end proof through HTTP: acknowledged single and batch publishes are read back
byte-identical at their acknowledged offsets, no batch is visible in part, and publishing goes on.
"""

from __future__ import annotations

import asyncio
import random
import signal
import uuid
from collections import defaultdict

import httpx
import pytest

from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env

KILLS = 5


async def _publish_until_killed(url: str, key: str, acked: list[dict], batches: list[list[dict]]) -> None:
    headers = {"Authorization": f"Bearer {key}"}

    async def single(http: httpx.AsyncClient) -> None:
        while True:
            data = {"n": uuid.uuid4().hex, "kind": "single", "pad": "x" * random.randint(0, 300)}
            r = await http.post(url + "/v1/topics/crash/messages", json={"data": data}, headers=headers)
            if r.status_code == 201:
                acked.append(r.json() | {"data": data})

    async def batch(http: httpx.AsyncClient) -> None:
        while True:
            size, batch_id = random.randint(2, 50), uuid.uuid4().hex
            items = [{"data": {"n": batch_id, "i": i, "of": size, "kind": "batch"}} for i in range(size)]
            r = await http.post(
                url + "/v1/topics/crash/messages/batch", json={"messages": items}, headers=headers
            )
            if r.status_code == 201:
                placed = [m | {"data": it["data"]} for m, it in zip(r.json()["messages"], items, strict=True)]
                acked.extend(placed)
                batches.append(placed)

    async with httpx.AsyncClient(timeout=10) as http:
        tasks = [asyncio.create_task(f(http)) for f in (single, single, batch, batch)]
        try:
            await asyncio.gather(*tasks)
        except (httpx.TransportError, httpx.RemoteProtocolError):
            pass
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _read_partition(url: str, key: str, partition: int) -> dict[int, dict]:
    headers = {"Authorization": f"Bearer {key}"}
    out: dict[int, dict] = {}
    offset = 0
    async with httpx.AsyncClient(timeout=10) as http:
        while True:
            page = (
                await http.get(
                    f"{url}/v1/topics/crash/partitions/{partition}/messages",
                    params={"fromOffset": offset, "limit": 1000},
                    headers=headers,
                )
            ).json()
            for m in page["data"]:
                out[m["offset"]] = m
            if not page["data"]:
                return out
            offset = page["nextOffset"]


@pytest.mark.slow
async def test_acknowledged_publishes_survive_sigkill(tmp_path):
    env = server_env(tmp_path / "data")
    cli(env, "migrate")
    boot = bootstrap(env, "crash", "--tier", "pro")
    key = boot["keys"]["production"]
    server = ServerProcess(
        env=env, port=free_port(), data_dir=tmp_path / "data", log_path=tmp_path / "srv.log"
    )
    server.start()
    async with httpx.AsyncClient() as http:
        created = await http.post(
            server.url + "/v1/topics",
            json={"name": "crash", "partitions": 3},
            headers={"Authorization": f"Bearer {key}"},
        )
        created.raise_for_status()
    acked: list[dict] = []
    batches: list[list[dict]] = []
    try:
        for _ in range(KILLS):
            publishing = asyncio.create_task(_publish_until_killed(server.url, key, acked, batches))
            await asyncio.sleep(random.uniform(0.3, 1.2))
            server.stop(signal.SIGKILL)
            await asyncio.wait_for(publishing, 15)
            server.start()
            stored = {p: await _read_partition(server.url, key, p) for p in range(3)}
            for m in acked:
                got = stored[m["partition"]].get(m["offset"])
                assert got is not None, f"acknowledged message lost: {m}"
                assert got["id"] == m["id"] and got["data"] == m["data"]
            # No batch is visible in part: an unacknowledged batch is all there or not at all.
            by_batch: dict[str, list] = defaultdict(list)
            for p in stored.values():
                for m in p.values():
                    if m["data"].get("kind") == "batch":
                        by_batch[m["data"]["n"]].append((m["data"]["i"], m["data"]["of"]))
            for n, items in by_batch.items():
                size = items[0][1]
                assert sorted(i for i, _ in items) == list(range(size)), (
                    f"batch {n} is partial: {sorted(items)}"
                )
        assert len(acked) > 100
    finally:
        server.stop()
