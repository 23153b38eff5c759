"""A Postgres outage, healed without a restart: a private Postgres this test owns (``initdb`` + ``pg_ctl`` on
a temp dir, never the machine's shared one) is stopped under a running ``queuecore-server`` and started
again. Meanwhile the API answers 503 ``SERVICE_UNAVAILABLE`` (never a 500, never a 2xx it could not keep),
``/v1/health`` says which check is down, and once Postgres is back everything works again by itself."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env

pytestmark = pytest.mark.slow


def _bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


class PrivatePostgres:
    """A throwaway cluster: trust auth on 127.0.0.1 at its own port, run as the postgres user when root."""

    def __init__(self) -> None:
        # Not under pytest's tmp dir: the postgres user cannot enter root's private directories.
        self.root = Path(tempfile.mkdtemp(prefix="queuecore-pg-"))
        self.dir = self.root / "pg"
        self.port = free_port()
        self.run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.run_as:
            shutil.chown(self.root, "postgres")
        subprocess.run(
            [*self.run_as, _bin("initdb"), "-D", str(self.dir), "-U", "postgres", "--auth=trust"],
            check=True,
            capture_output=True,
        )

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = f"-p {self.port} -k /tmp -c listen_addresses=127.0.0.1"
        subprocess.run(
            [
                *self.run_as,
                _bin("pg_ctl"),
                "-D",
                str(self.dir),
                "-o",
                options,
                "-l",
                str(self.dir / "log"),
                "-w",
                "start",
            ],
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        subprocess.run(
            [*self.run_as, _bin("pg_ctl"), "-D", str(self.dir), "-m", "immediate", "-w", "stop"],
            check=False,
            capture_output=True,
        )

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


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
    import signal

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
