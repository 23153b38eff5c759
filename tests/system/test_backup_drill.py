"""The backup drill (#36): ``queuecore-server backup`` taken from a real server while it serves and
publishes go on, ``restore`` into a fresh deployment, and a server started on it holds every message
acknowledged before the backup (same id, partition, offset, key, data), the groups' committed offsets and
dead letters as at the backup, and API keys that still authenticate. On the embedded SQLite metadata and
on Postgres, both over the local engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from infra.nats_cluster import NatsCluster
from tests.conftest import BACKENDS
from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.nats import free_base_port
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env

pytestmark = pytest.mark.slow

TOPIC = "/v1/topics/orders"
WORKERS = TOPIC + "/groups/workers"
STRICT = TOPIC + "/groups/strict"


@dataclass
class Deployment:
    """Where a deployment keeps its metadata ("" is the embedded SQLite) and its logs (settings)."""

    database_url: str = ""
    engine: str = "local"
    settings: dict[str, str] = field(default_factory=dict)


# The deployments of this run (tests/conftest.py: Postgres with the local log engine is make test-matrix's).
@pytest.fixture(params=[b for b in ("sqlite", "postgres", "jetstream") if b in BACKENDS])
def deployments(request, tmp_path: Path) -> Iterator[tuple[Deployment, Deployment]]:
    """The source deployment and the fresh one the backup is restored into: SQLite + local engine,
    Postgres + local engine, or Postgres + JetStream (a 3-node cluster of each one's own)."""
    if request.param == "sqlite":
        yield Deployment(), Deployment()
        return
    names = [f"qc_backup_{os.getpid()}_{secrets.token_hex(4)}" for _ in range(2)]
    clusters: list[NatsCluster] = []
    for name in names:
        asyncio.run(create_database(name))
    try:
        if request.param == "postgres":
            yield Deployment(database_url(names[0])), Deployment(database_url(names[1]))
            return
        pair = []
        for i, name in enumerate(names):
            cluster = NatsCluster(tmp_path / f"nats{i}", base_port=free_base_port()).start()
            clusters.append(cluster)
            settings = {
                "QUEUECORE_LOG_ENGINE": "jetstream",
                "QUEUECORE_NATS_URL": cluster.url,
                "QUEUECORE_REDIS_URL": "redis://127.0.0.1:6379/0",
                "QUEUECORE_RATE_LIMIT_PREFIX": f"qc:test:{os.getpid()}:backup{i}:{secrets.token_hex(3)}:",
            }
            pair.append(Deployment(database_url(name), "jetstream", settings))
        yield pair[0], pair[1]
    finally:
        for cluster in clusters:
            cluster.stop()
        for name in names:
            asyncio.run(drop_database(name))


class Api:
    def __init__(self, server: ServerProcess, key: str) -> None:
        self.url = server.url
        self.headers = {"Authorization": f"Bearer {key}"}

    def call(self, method: str, path: str, body: object = None) -> httpx.Response:
        # As a client should: a 429 (the pro tier's 50 admin calls a second, which this drill's setup can
        # pass on a fast machine) is tried again after its Retry-After.
        for _ in range(10):
            r = httpx.request(method, self.url + path, json=body, headers=self.headers, timeout=30)
            if r.status_code != 429:
                return r
            time.sleep(float(r.headers.get("Retry-After", "1")))
        return r

    def ok(self, method: str, path: str, body: object = None) -> dict:
        r = self.call(method, path, body)
        assert r.status_code in (200, 201), r.text
        return r.json()


def _member(api: Api, group: str) -> dict:
    m = api.ok("POST", f"{group}/members", {"startFrom": "earliest", "sessionTimeout": "1m"})
    return {"memberId": m["memberId"], "generationId": m["generationId"]}


def _poll_all(api: Api, group: str, ident: dict, count: int) -> list[dict]:
    got: list[dict] = []
    deadline = time.monotonic() + 20
    while len(got) < count and time.monotonic() < deadline:
        got += api.ok("POST", f"{group}/poll", {**ident, "maxMessages": 100, "waitSeconds": 1})["messages"]
    assert len(got) >= count
    return got


class Publisher(threading.Thread):
    """Publishes one message at a time until stopped; keeps each acknowledged one with when its answer came."""

    def __init__(self, api: Api) -> None:
        super().__init__(daemon=True)
        self.api = api
        self.acked: list[tuple[float, dict, dict]] = []  # (answered at, message sent, answer)
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            body = {"key": f"k{i % 7}", "data": {"live": i}}
            r = self.api.call("POST", TOPIC + "/messages", body)
            if r.status_code == 201:
                self.acked.append((time.monotonic(), body, r.json()))
            i += 1


def _state(api: Api) -> dict:
    """What the restore must bring back as it was: groups' committed offsets, dead letters, topics."""
    offsets = {
        group: sorted(
            (p["partition"], p.get("committed", p.get("current")))
            for p in api.ok("GET", f"{group}/offsets")["data"]
        )
        for group in (WORKERS, STRICT)
    }
    dead = [(d["messageId"], d["reason"]) for d in api.ok("GET", f"{STRICT}/dlq")["data"]]
    topics = sorted(t["name"] for t in api.ok("GET", "/v1/topics")["data"])
    return {"offsets": offsets, "dead": dead, "topics": topics}


def test_backup_while_serving_restores_into_a_fresh_deployment(
    tmp_path: Path, deployments: tuple[Deployment, Deployment]
):
    source, target = deployments
    env = server_env(tmp_path / "a", source.database_url, **source.settings)
    cli(env, "migrate")
    boot = bootstrap(env, "drill", "--tier", "pro")
    server = ServerProcess(env=env, port=free_port(), data_dir=tmp_path / "a", log_path=tmp_path / "a.log")
    server.start()
    api = Api(server, boot["keys"]["production"])
    staging = Api(server, boot["keys"]["staging"])
    try:
        api.ok("POST", "/v1/topics", {"name": "orders", "partitions": 3})
        staging.ok("POST", "/v1/topics", {"name": "other", "partitions": 1})
        api.ok("PUT", STRICT, {"deadLetter": {"maxRetries": 0}})
        sent = [{"key": f"k{i % 5}", "data": {"n": i, "pad": "x" * (i % 50)}} for i in range(60)]
        published = api.ok("POST", TOPIC + "/messages/batch", {"messages": sent})["messages"]
        acked = [(body, answer) for body, answer in zip(sent, published, strict=True)]

        workers = _member(api, WORKERS)
        polled = _poll_all(api, WORKERS, workers, 60)
        by_partition: dict[int, list[dict]] = {}
        for m in polled:
            by_partition.setdefault(m["partition"], []).append(m)
        done = [m["id"] for ms in by_partition.values() for m in sorted(ms, key=lambda m: m["offset"])[:5]]
        assert api.ok("POST", f"{WORKERS}/ack", {**workers, "ids": done})["ids"] == done
        strict = _member(api, STRICT)
        poison = _poll_all(api, STRICT, strict, 60)[0]["id"]
        nacked = api.ok("POST", f"{STRICT}/nack", {**strict, "id": poison, "reason": "poison"})
        assert nacked["ids"] == [poison]
        before = _state(api)
        assert before["dead"] == [(poison, "poison")]

        publisher = Publisher(api)
        publisher.start()
        time.sleep(0.5)
        started = time.monotonic()
        backup = cli(env, "backup", str(tmp_path / "backup"), "--json")
        publisher.stop.set()
        publisher.join(timeout=30)
        live_before = [(body, answer) for at, body, answer in publisher.acked if at < started]
        assert live_before and len(publisher.acked) > len(live_before)  # publishes went on during it
        assert "sk_" not in backup.stdout and boot["keys"]["production"] not in backup.stdout

        # A second backup into the same directory is refused.
        again = cli(env, "backup", str(tmp_path / "backup"), check=False)
        assert again.returncode == 1 and "not empty" in again.stderr
    finally:
        server.stop()

    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    assert manifest["version"] == 1 and manifest["engine"] == source.engine
    assert manifest["database"] == ("postgresql" if source.database_url else "sqlite")
    assert manifest["files"] and all(len(d) == 64 for d in manifest["files"].values())

    # The fresh deployment: an empty data dir (with the same server secret) and an empty database.
    env_b = server_env(tmp_path / "b", target.database_url, **target.settings)
    (tmp_path / "b").mkdir()
    if (tmp_path / "a" / "secret_key").exists():
        shutil.copy(tmp_path / "a" / "secret_key", tmp_path / "b" / "secret_key")
    restored = cli(env_b, "restore", str(tmp_path / "backup"))
    assert "restored" in restored.stdout
    cli(env_b, "migrate")
    # Restoring over a deployment that now has data is refused.
    over = cli(env_b, "restore", str(tmp_path / "backup"), check=False)
    assert over.returncode == 1 and "not empty" in over.stderr

    server_b = ServerProcess(
        env=env_b, port=free_port(), data_dir=tmp_path / "b", log_path=tmp_path / "b.log"
    )
    server_b.start()
    try:
        api_b = Api(server_b, boot["keys"]["production"])
        assert Api(server_b, boot["keys"]["staging"]).call("GET", "/v1/topics/other").status_code == 200
        assert Api(server_b, "sk_live_" + "x" * 40).call("GET", "/v1/topics").status_code == 401
        after = _state(api_b)
        assert after == before

        for body, answer in acked + live_before:
            got = api_b.ok("GET", f"{TOPIC}/messages/{answer['id']}")
            assert (got["partition"], got["offset"]) == (answer["partition"], answer["offset"])
            assert (got["key"], got["data"]) == (body["key"], body["data"])
        # Every partition reads densely from 0 to its restored end, which no committed offset passes.
        details = api_b.ok("GET", TOPIC)["partitionDetails"]
        ends = {p["id"]: p["latestOffset"] for p in details}
        assert sum(ends.values()) >= len(acked) + len(live_before)
        for partition, committed in after["offsets"][WORKERS]:
            assert committed is not None and committed <= ends[partition]
        # The restored member polls on where the backup had it: what it acked never comes again (what it
        # polled without acking comes again once its ack timeout passes, as without a restore).
        later = _poll_all(api_b, WORKERS, workers, 1)
        assert not {m["id"] for m in later} & set(done)
    finally:
        server_b.stop()
