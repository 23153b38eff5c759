"""Delayed messages against a real ``queuecore-server`` that restarts and is SIGKILLed before they fall due.

The due time travels with the record and a message read before it was due is a lease row due then: nothing
of a delay lives only in a process's memory. Pull and WebSocket push members both get every delayed message
once it is due, after a restart and after a SIGKILL, exactly once, and never before ``deliverAt``; the
committed offset never passes one still waiting. Run over the embedded SQLite, over Postgres and over
Postgres + JetStream.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import time
from datetime import datetime

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.conftest import BACKENDS
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env


@pytest.fixture(params=BACKENDS)
def running(request, tmp_path, postgres_database):
    extra: dict[str, str] = {}
    url = postgres_database if request.param == "postgres" else ""
    if request.param == "jetstream":
        url = request.getfixturevalue("postgres_database_jetstream")
        extra = {
            "QUEUECORE_LOG_ENGINE": "jetstream",
            "QUEUECORE_NATS_URL": request.getfixturevalue("nats_cluster").url,
            "QUEUECORE_REDIS_URL": "redis://127.0.0.1:6379/0",
            "QUEUECORE_RATE_LIMIT_PREFIX": f"qc:test:delays:{secrets.token_hex(4)}:",
        }
    env = server_env(tmp_path / "data", url, **extra)
    cli(env, "migrate")
    boot = bootstrap(env, f"delays-{secrets.token_hex(4)}", "--tier", "pro")
    server = ServerProcess(
        env=env, port=free_port(), data_dir=tmp_path / "data", log_path=tmp_path / "srv.log"
    )
    server.keys = boot["keys"]
    server.start()
    yield server
    server.stop()


def ms(instant: str) -> int:
    return int(datetime.fromisoformat(instant).timestamp() * 1000)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Api:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.headers = {"Authorization": f"Bearer {server.keys['production']}"}
        self.base = "/v1/topics/jobs/groups/workers"

    def ok(self, method: str, path: str, body: object = None) -> dict:
        r = httpx.request(method, self.server.url + path, json=body, headers=self.headers, timeout=30)
        assert r.status_code in (200, 201), r.text
        return r.json()

    def publish(self, *items: dict) -> list[dict]:
        return self.ok("POST", "/v1/topics/jobs/messages/batch", {"messages": list(items)})["messages"]

    def current(self) -> int:
        return self.ok("GET", f"{self.base}/offsets?partition=0")["current"]


@pytest.mark.slow
def test_pull_delays_survive_a_restart_and_a_sigkill(running):
    api = Api(running)
    api.ok("POST", "/v1/topics", {"name": "jobs", "partitions": 1, "delivery": "exactly-once"})
    member = api.ok("POST", f"{api.base}/members", {"startFrom": "earliest", "sessionTimeout": "1m"})
    ident = {"memberId": member["memberId"], "generationId": member["generationId"]}
    soon, plain, later = api.publish(
        {"data": "soon", "delay": "2s"}, {"data": "plain"}, {"data": "later", "delay": "15s"}
    )
    polled = api.ok("POST", f"{api.base}/poll", {**ident, "maxMessages": 100})["messages"]
    assert [m["id"] for m in polled] == [plain["id"]]  # the delayed ones are lease rows now
    assert api.ok("POST", f"{api.base}/ack", {**ident, "ids": [plain["id"]]})["failed"] == []
    # Published and never read by any delivery pass before the crash: the record alone says when.
    (unread,) = api.publish({"data": "unread", "delay": "3s"})
    running.stop(signal.SIGKILL)
    running.start()
    assert api.current() == soon["offset"]
    got: list[dict] = []

    def poll_until(wanted: set[str], wait: float) -> None:
        deadline = time.monotonic() + 30
        while not wanted <= {m["id"] for m in got} and time.monotonic() < deadline:
            batch = api.ok("POST", f"{api.base}/poll", {**ident, "maxMessages": 100, "waitSeconds": wait})[
                "messages"
            ]
            for m in batch:
                assert now_ms() >= ms(m["deliverAt"]) and m["attempt"] == 1  # never before it is due
            got.extend(batch)
            if batch:
                ids = [m["id"] for m in batch]
                assert api.ok("POST", f"{api.base}/ack", {**ident, "ids": ids})["failed"] == []

    poll_until({soon["id"], unread["id"]}, 5)
    if later["id"] not in {m["id"] for m in got}:  # a slow restart may have let it fall due already
        assert api.current() == later["offset"]  # not past the one still waiting
        running.stop()
        running.start()
        poll_until({later["id"]}, 15)
    assert sorted(m["id"] for m in got) == sorted([soon["id"], unread["id"], later["id"]])  # each once
    assert api.current() == unread["offset"] + 1
    assert api.ok("POST", f"{api.base}/poll", {**ident, "waitSeconds": 1})["messages"] == []


async def _receive(url: str, headers: dict, count: int, timeout: float) -> list[dict]:
    """Connect a push member, take ``count`` messages (acking each), then listen one more second."""
    got: list[dict] = []
    async with connect(url, additional_headers=headers) as ws:
        welcome = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert welcome["type"] == "welcome"
        deadline = time.monotonic() + timeout
        quiet_until = None
        while True:
            limit = (quiet_until or deadline) - time.monotonic()
            if limit <= 0:
                break
            try:
                frame = json.loads(await asyncio.wait_for(ws.recv(), limit))
            except TimeoutError:
                break
            batch = [frame] if frame["type"] == "message" else frame.get("messages", [])
            for m in batch:
                m["arrived"] = now_ms()
            got += batch
            if batch:
                await ws.send(json.dumps({"type": "ack", "ids": [m["id"] for m in batch]}))
            if len(got) >= count and quiet_until is None:
                quiet_until = time.monotonic() + 1
    return got


@pytest.mark.slow
def test_push_delays_survive_a_sigkill(running):
    api = Api(running)
    api.ok("POST", "/v1/topics", {"name": "jobs", "partitions": 2, "delivery": "exactly-once"})
    url = f"ws://127.0.0.1:{running.port}/v1/topics/jobs/consume?group=workers&startFrom=earliest"

    async def scenario() -> None:
        async with connect(url, additional_headers=api.headers) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "welcome"
            placed = api.publish(*({"data": i, "delay": "4s"} for i in range(10)))
            await asyncio.sleep(0.5)  # read and held back by the member's pass
            running.stop(signal.SIGKILL)
        running.start()
        got = await _receive(url, api.headers, 10, 40)
        assert sorted(m["id"] for m in got) == sorted(p["id"] for p in placed)  # each once
        assert all(m["arrived"] >= ms(m["deliverAt"]) for m in got)

    asyncio.run(scenario())
