"""A Postgres outage, healed without a restart: a private Postgres this test owns (``initdb`` + ``pg_ctl`` on
a temp dir, never the machine's shared one) is stopped under a running ``queuecore-server`` and started
again. Meanwhile the API answers 503 ``SERVICE_UNAVAILABLE`` (never a 500, never a 2xx it could not keep),
``/v1/health`` says which check is down, and once Postgres is back everything works again by itself."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
import websockets

from tests.fixtures.postgres import PrivatePostgres
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env

pytestmark = pytest.mark.slow


@pytest.fixture
def outage(tmp_path_factory) -> Iterator[tuple[PrivatePostgres, ServerProcess]]:
    postgres = PrivatePostgres()
    postgres.start()
    data = tmp_path_factory.mktemp("pg-outage-data")
    env = server_env(data, postgres.url)
    cli(env, "migrate")
    keys = bootstrap(env, "outage", "--tier", "enterprise")["keys"]
    server = ServerProcess(env=env, port=free_port(), data_dir=data, log_path=data / "server.log")
    server.keys = keys
    server.start()
    try:
        yield postgres, server
    finally:
        server.stop()
        postgres.remove()


def test_the_api_answers_503_while_postgres_is_down_and_heals_by_itself(outage):
    postgres, server = outage
    headers = {"Authorization": f"Bearer {server.keys['production']}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=15) as http:
        assert http.post("/v1/topics", json={"name": "outage.before"}).status_code == 201
        postgres.stop()

        created = http.post("/v1/topics", json={"name": "outage.during"})
        assert created.status_code == 503, created.text
        error = created.json()["error"]
        assert error["code"] == "SERVICE_UNAVAILABLE" and "Traceback" not in created.text
        health = http.get("/v1/health")
        assert health.status_code == 503 and health.json()["checks"]["database"] == "down"

        postgres.start()
        deadline = time.monotonic() + 20
        while True:  # no restart of the server: its pool reconnects by itself
            answer = http.post("/v1/topics", json={"name": "outage.after"})
            if answer.status_code == 201 or time.monotonic() > deadline:
                break
            assert answer.status_code == 503, answer.text  # never a 500 on the way back
            time.sleep(0.25)
        assert answer.status_code == 201, answer.text
        assert http.get("/v1/health").json()["checks"]["database"] == "ok"
        names = {t["name"] for t in http.get("/v1/topics").json()["data"]}
        assert {"outage.before", "outage.after"} <= names and "outage.during" not in names
    assert server.log_path is not None
    requests = [json.loads(x) for x in server.log_path.read_text().splitlines() if '"msg":"request"' in x]
    assert requests and not [r for r in requests if r["status"] >= 500 and r["status"] != 503]


def _cluster_pids(postgres: PrivatePostgres) -> list[int]:
    """The postmaster of the private cluster and every process it started (backends, checkpointer...)."""
    postmaster = int((postgres.dir / "postmaster.pid").read_text().split()[0])
    found = subprocess.run(["pgrep", "-P", str(postmaster)], check=False, capture_output=True, text=True)
    children = found.stdout
    return [postmaster, *map(int, children.split())]


def test_a_stalled_postgres_is_503_within_a_bound_and_heals(outage):
    """SIGSTOP of every process of the cluster: connections stay open and silent, the fault a paused VM or
    a hung disk gives. Calls that need the database answer 503 within a bound (never hang), health says
    it is down, other calls keep working, and after SIGCONT everything works again by itself."""

    postgres, server = outage
    headers = {"Authorization": f"Bearer {server.keys['production']}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        assert http.post("/v1/topics", json={"name": "stall.before"}).status_code == 201
        pids = _cluster_pids(postgres)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            created = http.post("/v1/topics", json={"name": "stall.during"})
            took = time.monotonic() - started
            assert created.status_code == 503, created.text
            assert took < 20, took  # bounded by the statement and pool timeouts, not by the client's patience
            started = time.monotonic()
            health = http.get("/v1/health")
            assert health.status_code == 503 and health.json()["checks"]["database"] == "down"
            assert time.monotonic() - started < 10
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while True:
            answer = http.post("/v1/topics", json={"name": "stall.after"})
            if answer.status_code == 201 or time.monotonic() > deadline:
                break
            assert answer.status_code == 503, answer.text
            time.sleep(0.25)
        assert answer.status_code == 201, answer.text
    requests = [json.loads(x) for x in server.log_path.read_text().splitlines() if '"msg":"request"' in x]
    assert not [r for r in requests if r["status"] >= 500 and r["status"] != 503]


async def test_a_push_member_rides_out_a_postgres_restart(outage):
    """A restart of Postgres (a second or two: `pg_ctl restart -m fast`) under an open WebSocket member of an
    exactly-once topic: the connection stays open, messages published meanwhile and after are delivered
    on it once each, acks made meanwhile wait for Postgres instead of failing, and the member is still the
    group's. Ending it instead would give its in-flight
    messages to the group again, as first attempts (the rolling restart found that)."""
    postgres, server = outage
    headers = {"Authorization": f"Bearer {server.keys['production']}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=15) as http:
        created = await http.post("/v1/topics", json={"name": "ride.out", "partitions": 1})
        assert created.status_code == 201, created.text
        url = server.url.replace("http", "ws", 1) + "/v1/topics/ride.out/consume?group=g&startFrom=earliest"
        async with websockets.connect(url, additional_headers=headers) as ws:
            welcome = json.loads(await ws.recv())
            assert welcome["type"] == "welcome", welcome
            seen: list[int] = []
            errors: list[dict[str, object]] = []

            async def take(count: int) -> None:
                while len(seen) < count:
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    if frame["type"] == "error":  # an ack refused for the outage, say
                        errors.append(frame)
                    items = [frame] if frame["type"] == "message" else frame.get("messages", [])
                    for item in items:
                        seen.append(item["data"]["n"])
                        await ws.send(json.dumps({"type": "ack", "ids": [item["id"]]}))

            async def publish(n: int) -> None:
                for _ in range(100):  # 503 while Postgres is down is allowed; the client tries again
                    answer = await http.post("/v1/topics/ride.out/messages", json={"data": {"n": n}})
                    if answer.status_code == 201:
                        return
                    assert answer.status_code == 503, answer.text
                    await asyncio.sleep(0.2)
                raise AssertionError("never published")

            for n in range(5):
                await publish(n)
            await take(5)
            restarting = asyncio.create_task(asyncio.to_thread(postgres.restart))
            for n in range(5, 10):
                await publish(n)
            await restarting
            for n in range(10, 15):
                await publish(n)
            await take(15)
            await asyncio.sleep(1)  # a second copy of anything would come now
            with contextlib.suppress(TimeoutError):
                extra = await asyncio.wait_for(ws.recv(), 1)
                assert json.loads(extra)["type"] != "message", extra
            assert sorted(seen) == list(range(15)), seen
            assert errors == []  # acks made while Postgres restarted waited for it, and were answered
            group = (await http.get("/v1/topics/ride.out/groups/g")).json()
            assert group["partitions"][0]["consumer"] == welcome["memberId"], group
