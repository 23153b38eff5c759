"""Pull consumers against a real ``queuecore-server`` that restarts (and crashes) between their calls.

Nothing about members, leases or offsets may live only in a process's memory: a member joins, the
server restarts, the member polls, the server restarts, the member acks, and all of it holds. On an
exactly-once topic, after SIGKILL no acked message is delivered again and every unacked one is.
Run over the embedded SQLite and over Postgres.
"""

from __future__ import annotations

import secrets
import signal
import time

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env


# The deployments of this run (tests/conftest.py: Postgres with the local log engine is make test-matrix's).
@pytest.fixture(params=[b for b in ("sqlite", "postgres") if b in BACKENDS])
def running(request, tmp_path, postgres_database):
    url = postgres_database if request.param == "postgres" else ""
    env = server_env(tmp_path / "data", url)
    cli(env, "migrate")
    project = f"pull-{secrets.token_hex(4)}"
    boot = bootstrap(env, project, "--tier", "pro")
    server = ServerProcess(
        env=env, port=free_port(), data_dir=tmp_path / "data", log_path=tmp_path / "srv.log"
    )
    server.keys = boot["keys"]
    server.start()
    yield server
    server.stop()


class Api:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.headers = {"Authorization": f"Bearer {server.keys['production']}"}
        self.base = "/v1/topics/jobs/groups/workers"

    def call(self, method: str, path: str, body: object = None) -> httpx.Response:
        return httpx.request(method, self.server.url + path, json=body, headers=self.headers, timeout=30)

    def ok(self, method: str, path: str, body: object = None) -> dict:
        r = self.call(method, path, body)
        assert r.status_code in (200, 201), r.text
        return r.json()


def setup_group(api: Api, count: int, ack_timeout: str) -> tuple[dict, list[str]]:
    api.ok("POST", "/v1/topics", {"name": "jobs", "partitions": 2, "delivery": "exactly-once"})
    api.ok("PUT", api.base, {"ackTimeout": ack_timeout})
    ids = [
        m["id"]
        for m in api.ok(
            "POST", "/v1/topics/jobs/messages/batch", {"messages": [{"data": i} for i in range(count)]}
        )["messages"]
    ]
    member = api.ok("POST", f"{api.base}/members", {"startFrom": "earliest", "sessionTimeout": "1m"})
    return {"memberId": member["memberId"], "generationId": member["generationId"]}, ids


@pytest.mark.slow
def test_join_restart_poll_restart_ack(running):
    api = Api(running)
    ident, ids = setup_group(api, 6, "30s")
    running.stop()
    running.start()
    polled = api.ok("POST", f"{api.base}/poll", {**ident, "maxMessages": 100})["messages"]
    assert sorted(m["id"] for m in polled) == sorted(ids) and {m["attempt"] for m in polled} == {1}
    running.stop()
    running.start()
    assert api.ok("POST", f"{api.base}/ack", {**ident, "ids": ids}) == {"ids": ids, "failed": []}
    beat = api.ok(
        "POST", f"{api.base}/members/{ident['memberId']}/heartbeat", {"generationId": ident["generationId"]}
    )
    assert beat["shouldRejoin"] is False and beat["assignments"] == [0, 1]
    assert api.ok("POST", f"{api.base}/poll", ident)["messages"] == []
    offsets = api.ok("GET", f"{api.base}/offsets")["data"]
    assert all(p["lag"] == 0 for p in offsets) and sum(p["current"] for p in offsets) == 6


@pytest.mark.slow
def test_exactly_once_after_sigkill(running):
    api = Api(running)
    # An ack timeout short enough to redeliver soon after the kill, long enough for the acks below to land
    # inside it on a loaded machine (1 s expired one under a fault run beside the suite).
    ident, ids = setup_group(api, 40, "3s")
    polled = api.ok("POST", f"{api.base}/poll", {**ident, "maxMessages": 100})["messages"]
    assert len(polled) == 40
    acked: set[str] = set()
    for chunk in (ids[0:7], ids[11:20], ids[25:26], ids[30:38]):
        answer = api.ok("POST", f"{api.base}/ack", {**ident, "ids": chunk})
        # On a loaded machine an ack may land after its deadline: refused, so that message comes again.
        assert {f["code"] for f in answer["failed"]} <= {"ACK_EXPIRED"}, answer
        acked.update(answer["ids"])
    running.stop(signal.SIGKILL)
    running.start()
    first_attempts: dict[str, int] = {}
    settled: set[str] = set()
    deadline = time.monotonic() + 30
    while settled != set(ids) - acked and time.monotonic() < deadline:
        polled = api.ok("POST", f"{api.base}/poll", {**ident, "maxMessages": 100, "waitSeconds": 2})[
            "messages"
        ]
        for m in polled:
            assert m["id"] not in acked | settled, f"acked message delivered again: {m}"
            first_attempts.setdefault(m["id"], m["attempt"])
        if polled:  # acked as they come
            answer = api.ok("POST", f"{api.base}/ack", {**ident, "ids": [m["id"] for m in polled]})
            assert {f["code"] for f in answer["failed"]} <= {"ACK_EXPIRED"}, answer
            settled.update(answer["ids"])
    assert settled == set(ids) - acked
    assert set(first_attempts.values()) == {2}  # each unacked message once more, its attempt kept
    running.stop(signal.SIGKILL)
    running.start()
    time.sleep(3.2)  # past the ack timeout: anything not acked would be due again
    assert api.ok("POST", f"{api.base}/poll", {**ident, "waitSeconds": 0})["messages"] == []
    assert all(p["lag"] == 0 for p in api.ok("GET", f"{api.base}/offsets")["data"])
