"""A push group's URL delivery survives SIGKILL of an API node mid-delivery (two real ``queuecore-server``
processes over Postgres and the JetStream engine; a real HTTP receiver in this test process).

The killed node's worker held leases and had POSTs in flight. After ``sessionTimeout`` the other node's
worker owns its partitions: every message not acked is delivered, and on an exactly-once topic nothing the
killed node had acked (below its partitions' committed offsets at the kill) is delivered again.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import time
from collections import defaultdict

import httpx
import pytest

from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.push_receivers import Answer, PushReceiver
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env

pytestmark = pytest.mark.slow

COUNT = 240


@pytest.fixture
def two_nodes(tmp_path, nats_cluster):
    name = f"qc_test_push_crash_{secrets.token_hex(4)}"
    asyncio.run(create_database(name))
    env = server_env(
        tmp_path / "data",
        database_url(name),
        QUEUECORE_LOG_ENGINE="jetstream",
        QUEUECORE_NATS_URL=nats_cluster.url,
        QUEUECORE_REDIS_URL="redis://127.0.0.1:6379/0",
        QUEUECORE_RATE_LIMIT_PREFIX=f"qc:test:{secrets.token_hex(4)}:",
        QUEUECORE_PUSH_REFRESH_SECONDS="0.5",
    )
    cli(env, "migrate")
    boot = bootstrap(env, "push-crash", "--tier", "pro")
    nodes = []
    for i in range(2):
        node = ServerProcess(
            env=env,
            port=free_port(),
            data_dir=tmp_path / "data",
            keys=boot["keys"],
            log_path=tmp_path / f"api{i}.log",
        )
        node.start()
        nodes.append(node)
    try:
        yield nodes, boot["keys"]["production"]
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)
        asyncio.run(drop_database(name))


def wait_until(check, seconds: float = 60.0, what: str = ""):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


def test_sigkill_mid_delivery_loses_nothing_and_redelivers_nothing_acked(
    two_nodes, push_receiver: PushReceiver
):
    nodes, key = two_nodes
    survivor = httpx.Client(base_url=nodes[1].url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    base = "/v1/topics/jobs/groups/hooks"
    assert (
        survivor.post(
            "/v1/topics", json={"name": "jobs", "partitions": 4, "delivery": "exactly-once"}
        ).status_code
        == 201
    )
    push_receiver.default = Answer(200, delay=0.1)  # slow enough that the kill finds POSTs in flight
    r = survivor.put(
        base,
        json={
            "sessionTimeout": "2s",
            "ackTimeout": "10s",
            "push": {"url": push_receiver.url, "maxConcurrency": 4},
        },
    )
    assert r.status_code == 200, r.text
    wait_until(lambda: survivor.get(base).json()["consumers"] == 2, what="a worker on each node")
    ids = [
        m["id"]
        for m in survivor.post(
            "/v1/topics/jobs/messages/batch", json={"messages": [{"data": {"n": n}} for n in range(COUNT)]}
        ).json()["messages"]
    ]
    wait_until(lambda: len(push_receiver.deliveries()) >= COUNT // 5, what="deliveries under way")
    owners = {p["id"]: p["consumer"] for p in survivor.get(base).json()["partitions"]}

    nodes[0].stop(signal.SIGKILL)
    killed_at = time.monotonic()
    # Within sessionTimeout nobody else may touch the killed worker's partitions: these are exactly the
    # offsets its acks had committed.
    committed = {o["partition"]: o["current"] for o in survivor.get(f"{base}/offsets").json()["data"]}
    # Read while the killed worker still owned its partitions (nobody had taken them over): these offsets
    # are its own commits.
    still = {p["id"]: p["consumer"] for p in survivor.get(base).json()["partitions"]}
    assert still == owners, "the killed worker's partitions moved before its offsets were read"

    def all_acked() -> bool:
        return all(p["lag"] == 0 for p in survivor.get(base).json()["partitions"])

    wait_until(all_acked, seconds=90, what="every message acked by the surviving worker")
    survivors = {p["consumer"] for p in survivor.get(base).json()["partitions"]}
    assert len(survivors) == 1
    dead = {m for m in owners.values() if m not in survivors}
    assert len(dead) == 1, owners
    killed_partitions = {p for p, m in owners.items() if m in dead}

    seen: dict[str, list[float]] = defaultdict(list)
    violations = []
    after_kill_on_killed = 0
    for d in push_receiver.deliveries():
        seen[d.headers["ce-id"]].append(d.at)
        partition, offset = map(int, d.headers["ce-subject"].split("/"))
        if partition in killed_partitions and d.at > killed_at:
            after_kill_on_killed += 1
            if offset < committed[partition]:
                violations.append((partition, offset, committed[partition]))
    assert set(seen) == set(ids), f"{len(set(ids) - set(seen))} messages never delivered"
    assert violations == [], f"acked before the kill, delivered again: {violations[:10]}"
    # The kill cut something worth checking: the killed node had acked some and left some to take over.
    assert any(committed[p] > 0 for p in killed_partitions)
    assert after_kill_on_killed > 0
    assert all(json.loads(d.body)["n"] in range(COUNT) for d in push_receiver.deliveries())
