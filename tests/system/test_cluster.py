"""``make cluster`` end to end: ``python -m infra.cluster`` (3 NATS nodes, Postgres, Redis, 3 API processes,
HAProxy in front) started as ``make cluster`` starts it, on free ports; clients use only the front address.

Publishes (single and batch) and consumes (pull, whose join/poll/ack land on different nodes, and a
WebSocket push member, upgraded through HAProxy) go through the one address; every API process must have
served publishes (its own ``/metrics``); Ctrl-C (SIGINT) stops every process and frees every port.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from infra.cluster import POSTGRES_ADMIN, drop_database

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None, reason="make test installs haproxy")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _block(start: int, stop: int, offsets: list[int]) -> int:
    """A base port in [start, stop) with base + every offset free (this suite's range is 23100-23999)."""
    for base in range(start, stop):
        if all(_free(base + offset) for offset in offsets):
            return base
    raise RuntimeError(f"no free ports in {start}-{stop}")


@dataclass
class Launched:
    process: subprocess.Popen[str]
    front: str
    api: list[str]
    nats_ports: list[int]
    keys: dict[str, str]
    banner: str
    root: Path


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    root = tmp_path_factory.mktemp("cluster")
    nats = _block(23500, 23600, [i + o for o in (0, 100, 200) for i in range(3)])
    front = _block(23800, 23900, [0, 1, 2, 3])
    database = f"qc_test_cluster_{os.getpid()}_{secrets.token_hex(3)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
    command = [sys.executable, "-m", "infra.cluster", "--dir", str(root), "--fresh", "--database", database]
    command += ["--front-port", str(front), "--api-port", str(front + 1), "--nats-port", str(nats)]
    command += ["--rate-limit-prefix", f"qc:test:{os.getpid()}:cluster:"]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    assert process.stdout is not None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("Ctrl-C stops everything"):
            break
    banner = "".join(lines)
    try:
        assert "Ctrl-C stops everything" in banner, banner
        keys = dict(re.findall(r"^\s+(development|staging|production)\s+(\S+)$", banner, re.MULTILINE))
        yield Launched(
            process,
            f"http://127.0.0.1:{front}",
            [f"http://127.0.0.1:{front + i}" for i in (1, 2, 3)],
            [nats + i for i in range(3)],
            keys,
            banner,
            root,
        )
    finally:
        if process.poll() is None:
            # A test that failed before its own SIGINT: the launcher still stops what it started (a
            # SIGKILL would leave its children running).
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        asyncio.run(drop_database(POSTGRES_ADMIN, database))


def _published_on(api_url: str) -> int:
    """Publish requests (single and batch) this API process answered, from its own /metrics."""
    text = httpx.get(f"{api_url}/metrics", timeout=10).text
    total = 0.0
    for labels, value in re.findall(r"^queuecore_http_requests_total\{(.*)\} (\S+)$", text, re.MULTILINE):
        if 'method="POST"' in labels and re.search(r'route="/v1/topics/\{name\}/messages(/batch)?"', labels):
            total += float(value)
    return int(total)


async def test_nats_takes_only_the_deployments_credentials_over_tls(launched: Launched) -> None:
    import ssl

    import nats
    import nats.errors

    secrets_dir = launched.root / "secrets"
    password = (secrets_dir / "nats.password").read_text().strip()
    ca = secrets_dir / "tls" / "ca.pem"
    seeds = [f"nats://127.0.0.1:{port}" for port in launched.nats_ports]
    once = {"allow_reconnect": False, "max_reconnect_attempts": 0, "connect_timeout": 3}
    # The banner says where the password is, never what it is; no process's log holds it either.
    assert "nats.password" in launched.banner and password not in launched.banner
    for log in [*launched.root.glob("api-*/server.log"), *launched.root.glob("nats/n*.log")]:
        assert password not in log.read_text(), log
    trusting = ssl.create_default_context(cafile=str(ca))
    with pytest.raises(nats.errors.Error, match="Authorization"):
        await nats.connect(seeds, tls=trusting, **once)
    with pytest.raises((ssl.SSLError, nats.errors.Error)):
        await nats.connect(seeds, user="queuecore", password=password, **once)
    nc = await nats.connect(seeds, user="queuecore", password=password, tls=trusting, **once)
    await nc.close()


async def test_cluster_serves_through_one_address_and_stops_on_ctrl_c(launched: Launched) -> None:
    from websockets.asyncio.client import connect

    # It prints the keys and the dashboard login, as `make run` does.
    assert set(launched.keys) == {"development", "staging", "production"}, launched.banner
    assert "Dashboard login:" in launched.banner and "demo@queuecore.local" in launched.banner
    key = launched.keys["production"]
    headers = {"Authorization": f"Bearer {key}"}
    before = [_published_on(url) for url in launched.api]

    async with httpx.AsyncClient(base_url=launched.front, headers=headers, timeout=30) as http:
        created = await http.post("/v1/topics", json={"name": "orders", "partitions": 3})
        assert created.status_code == 201, created.text
        assert created.json()["replicas"] == 3
        sent: dict[str, dict[str, int]] = {}
        for i in range(30):
            answer = await http.post("/v1/topics/orders/messages", json={"data": {"n": i}})
            assert answer.status_code == 201, answer.text
            assert answer.json()["durability"] == "replicated:3"
            sent[answer.json()["id"]] = {"n": i}
        batch = await http.post(
            "/v1/topics/orders/messages/batch",
            json={"messages": [{"data": {"n": 30 + i}} for i in range(100)]},
        )
        assert batch.status_code == 201, batch.text
        for i, placed in enumerate(batch.json()["messages"]):
            sent[placed["id"]] = {"n": 30 + i}
        assert len(sent) == 130

        # Pull through the front: join, polls and acks are spread over the nodes by round-robin.
        joined = (
            await http.post("/v1/topics/orders/groups/pull/members", json={"startFrom": "earliest"})
        ).json()
        member = {"memberId": joined["memberId"], "generationId": joined["generationId"]}
        pulled: dict[str, dict[str, int]] = {}
        while len(pulled) < len(sent):
            polled = await http.post(
                "/v1/topics/orders/groups/pull/poll", json={**member, "maxMessages": 50, "waitSeconds": 2}
            )
            assert polled.status_code == 200, polled.text
            messages = polled.json()["messages"]
            assert messages, f"pull stalled at {len(pulled)} of {len(sent)}"
            pulled.update({m["id"]: m["data"] for m in messages})
            acked = await http.post(
                "/v1/topics/orders/groups/pull/ack", json={**member, "ids": [m["id"] for m in messages]}
            )
            assert acked.status_code == 200, acked.text
        assert pulled == sent

    # A WebSocket push member through HAProxy's upgrade.
    ws_url = (
        launched.front.replace("http://", "ws://") + "/v1/topics/orders/consume?group=push&startFrom=earliest"
    )
    pushed: dict[str, dict[str, int]] = {}
    async with connect(ws_url, additional_headers=headers) as ws:
        assert json.loads(await ws.recv())["type"] == "welcome"
        while len(pushed) < len(sent):
            frame = json.loads(await asyncio.wait_for(ws.recv(), 15))
            if frame["type"] not in ("message", "messages"):
                continue
            batch_ = frame["messages"] if frame["type"] == "messages" else [frame]
            pushed.update({m["id"]: m["data"] for m in batch_})
            await ws.send(json.dumps({"type": "ack", "ids": [m["id"] for m in batch_]}))
    assert pushed == sent

    # Every API process served publishes: 31 requests round-robin over 3 (health checks aside).
    served = [_published_on(url) - b for url, b in zip(launched.api, before, strict=True)]
    assert all(n > 0 for n in served), served
    assert sum(served) == 31, served

    # Ctrl-C: everything stops, every port is free again.
    launched.process.send_signal(signal.SIGINT)
    assert launched.process.wait(timeout=60) == 0
    ports = [int(u.rsplit(":", 1)[1]) for u in [launched.front, *launched.api]] + launched.nats_ports
    assert all(_free(port) for port in ports), [p for p in ports if not _free(p)]
