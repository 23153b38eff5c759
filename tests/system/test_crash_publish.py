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


async def _publish_keyed(http: httpx.AsyncClient, url: str, headers: dict, items: list[dict]) -> list[dict]:
    """Publish keyed ``items`` (one as a single message with ``Idempotency-Key``, more as a batch with
    per-item keys); what the answer placed, with its ``Idempotent-Replayed`` header."""
    if len(items) == 1:
        r = await http.post(
            url + "/v1/topics/crash/messages",
            json={"data": items[0]},
            headers=headers | {"Idempotency-Key": items[0]["k"]},
        )
        assert r.status_code == 201, r.text
        return [r.json() | {"header": r.headers.get("Idempotent-Replayed")}]
    body = {"messages": [{"data": it, "idempotencyKey": it["k"]} for it in items]}
    r = await http.post(url + "/v1/topics/crash/messages/batch", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return [m | {"header": r.headers.get("Idempotent-Replayed")} for m in r.json()["messages"]]


@pytest.mark.slow
async def test_idempotency_keys_hold_across_sigkill(tmp_path):
    """Keyed publishes answered before a SIGKILL are answered again after the restart - same id, partition
    and offset, ``Idempotent-Replayed: true`` - and appended nothing; keyed publishes the kill cut (outcome
    unknown) sent again land once. Every key is in the log exactly once."""
    env = server_env(tmp_path / "data")
    cli(env, "migrate")
    key = bootstrap(env, "crash", "--tier", "pro")["keys"]["production"]
    headers = {"Authorization": f"Bearer {key}"}
    server = ServerProcess(
        env=env, port=free_port(), data_dir=tmp_path / "data", log_path=tmp_path / "srv.log"
    )
    server.start()
    confirmed: dict[str, dict] = {}  # key -> what the first answer placed
    sent: list[list[dict]] = []  # every keyed publish, answered or not
    cut = 0
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            created = await http.post(
                server.url + "/v1/topics", json={"name": "crash", "partitions": 3}, headers=headers
            )
            created.raise_for_status()

            async def publish_until_killed(task: int) -> None:
                nonlocal cut
                n = 0
                while True:
                    size = 1 if n % 2 == 0 else random.randint(2, 20)
                    items = [{"k": f"t{task}-{n}-{i}", "i": i, "of": size} for i in range(size)]
                    sent.append(items)
                    n += 1
                    try:
                        placed = await _publish_keyed(http, server.url, headers, items)
                    except httpx.TransportError:
                        cut += 1  # written or not, nobody knows: sent again after the restart
                        return
                    for item, where in zip(items, placed, strict=True):
                        assert where["header"] is None and "replayed" not in where, where
                        confirmed[item["k"]] = where

            publishing = [asyncio.create_task(publish_until_killed(t)) for t in range(4)]
            # Killed with keyed publishes in flight (the tasks publish back to back), once at least 100
            # keys were answered; each task ends at the request the kill cut.
            for _ in range(200):
                if len(confirmed) >= 100:
                    break
                await asyncio.sleep(0.05)
            server.stop(signal.SIGKILL)
            await asyncio.wait_for(asyncio.gather(*publishing), 15)
        assert len(confirmed) >= 100 and cut == 4
        server.start()

        async with httpx.AsyncClient(timeout=10) as http:
            for items in sent:
                again = await _publish_keyed(http, server.url, headers, items)
                for item, where in zip(items, again, strict=True):
                    first = confirmed.get(item["k"])
                    if first is None:
                        continue  # the kill cut its answer: placed once now, whether or not it was before
                    assert where["header"] == "true" and where.get("replayed", True) is True, where
                    assert (where["id"], where["partition"], where["offset"]) == (
                        first["id"],
                        first["partition"],
                        first["offset"],
                    )
        stored = {p: await _read_partition(server.url, key, p) for p in range(3)}
        counts: dict[str, int] = defaultdict(int)
        for partition in stored.values():
            for m in partition.values():
                counts[m["data"]["k"]] += 1
        keys = {item["k"] for items in sent for item in items}
        assert set(counts) == keys
        assert [k for k, c in counts.items() if c != 1] == [], "keys in the log more than once"
        for k, first in confirmed.items():
            assert stored[first["partition"]][first["offset"]]["id"] == first["id"], k
    finally:
        server.stop()
