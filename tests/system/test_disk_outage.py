"""A full log disk, healed without a restart: a real ``queuecore-server`` whose log directory is a small
tmpfs (``tests/fixtures/disks.py``; the metadata store stays on the ordinary disk) is filled to ENOSPC and
emptied again. Meanwhile publishes answer 503 ``SERVICE_UNAVAILABLE`` (never a 2xx that was not fsync'd,
never a 500), ``/v1/health`` says the log engine is down, a pull consumer keeps polling (and gets nothing
new); once space is freed the same process publishes again within seconds, the consumer gets the new
messages, every acknowledged message is readable at its offset, and no refused one ever appears."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.fixtures.disks import SmallDisk, small_disk
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env

pytestmark = pytest.mark.slow

TOPIC = "/v1/topics/disk"
GROUP = f"{TOPIC}/groups/workers"


@pytest.fixture
def full_disk_server(tmp_path) -> Iterator[tuple[SmallDisk, ServerProcess]]:
    data = tmp_path / "data"
    with small_disk(data / "log", 8) as disk:
        env = server_env(data)
        cli(env, "migrate")
        keys = bootstrap(env, "disk-outage", "--tier", "enterprise")["keys"]
        server = ServerProcess(env=env, port=free_port(), data_dir=data, log_path=tmp_path / "server.log")
        server.keys = keys
        server.start()
        try:
            yield disk, server
        finally:
            server.stop()


def _ok(answer: httpx.Response) -> dict:
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


def test_a_full_log_disk_answers_503_and_heals_by_itself(full_disk_server):
    disk, server = full_disk_server
    headers = {"Authorization": f"Bearer {server.keys['production']}"}
    acked: list[dict] = []
    refused: list[str] = []
    with httpx.Client(base_url=server.url, headers=headers, timeout=15) as http:
        _ok(http.post("/v1/topics", json={"name": "disk", "partitions": 2, "delivery": "exactly-once"}))
        member = _ok(http.post(f"{GROUP}/members", json={"startFrom": "earliest", "sessionTimeout": "1m"}))
        ident = {"memberId": member["memberId"], "generationId": member["generationId"]}

        def publish(tag: str) -> httpx.Response:
            answer = http.post(f"{TOPIC}/messages", json={"data": {"tag": tag, "pad": "x" * 2000}})
            if answer.status_code == 201:
                acked.append(answer.json() | {"tag": tag})
            return answer

        def publish_batch(tag: str) -> httpx.Response:
            items = [{"data": {"tag": f"{tag}.{i}", "pad": "y" * 2000}} for i in range(20)]
            answer = http.post(f"{TOPIC}/messages/batch", json={"messages": items})
            if answer.status_code == 201:
                acked.extend(m | {"tag": f"{tag}.{i}"} for i, m in enumerate(answer.json()["messages"]))
            return answer

        def poll(wait: int = 0) -> list[dict]:
            body = {**ident, "maxMessages": 1000, "waitSeconds": wait}
            return _ok(http.post(f"{GROUP}/poll", json=body))["messages"]

        for i in range(5):
            assert publish(f"before{i}").status_code == 201
        assert publish_batch("before-batch").status_code == 201
        first = poll()
        assert len(first) == 25
        _ok(http.post(f"{GROUP}/ack", json={**ident, "ids": [m["id"] for m in first]}))

        disk.fill()
        for i in range(4):
            answer = publish(f"during{i}") if i % 2 else publish_batch(f"during{i}")
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "SERVICE_UNAVAILABLE" and "Traceback" not in answer.text
            refused.append(f"during{i}")
        health = http.get("/v1/health")
        assert health.status_code == 503
        assert health.json()["status"] == "down" and health.json()["checks"]["logEngine"] == "down"
        assert poll(wait=1) == []  # the consumer pauses: nothing new, no error
        time.sleep(1.5)  # recovery attempts fail meanwhile: the disk is still full
        assert publish("still-full").status_code == 503
        refused.append("still-full")

        disk.free()
        deadline = time.monotonic() + 20
        while True:  # no restart: the engine recovers by itself once the disk takes writes
            answer = publish("after0")
            if answer.status_code == 201 or time.monotonic() > deadline:
                break
            assert answer.status_code == 503, answer.text  # never a 500 on the way back
            time.sleep(0.2)
        assert answer.status_code == 201, answer.text
        assert publish_batch("after-batch").status_code == 201
        health = http.get("/v1/health").json()
        assert health["status"] == "ok" and health["checks"]["logEngine"] == "ok"

        # The consumer resumes: exactly the messages published after the outage, each once.
        got: list[dict] = []
        deadline = time.monotonic() + 10
        while len(got) < 21 and time.monotonic() < deadline:
            got += poll(wait=1)
        assert sorted(m["data"]["tag"] for m in got) == sorted(
            ["after0", *(f"after-batch.{i}" for i in range(20))]
        )
        _ok(http.post(f"{GROUP}/ack", json={**ident, "ids": [m["id"] for m in got]}))

        # Every acknowledged publish is at its offset, byte for byte; nothing refused is anywhere.
        stored: dict[tuple[int, int], dict] = {}
        for p in (0, 1):
            page = _ok(http.get(f"{TOPIC}/partitions/{p}/messages", params={"fromOffset": 0, "limit": 1000}))
            stored.update({(p, m["offset"]): m for m in page["data"]})
        for m in acked:
            got_m = stored.get((m["partition"], m["offset"]))
            assert got_m is not None and got_m["id"] == m["id"] and got_m["data"]["tag"] == m["tag"]
        assert len(stored) == len(acked)
        tags = {m["data"]["tag"].split(".")[0] for m in stored.values()}
        assert not tags & set(refused)
    assert server.log_path is not None
    lines = [json.loads(x) for x in server.log_path.read_text().splitlines() if x.startswith("{")]
    requests = [r for r in lines if r.get("msg") == "request"]
    assert requests and not [r for r in requests if r["status"] >= 500 and r["status"] != 503]
    assert any("recovered" in r.get("msg", "") for r in lines)
