"""Open files of a real ``queuecore-server`` started with a low ``RLIMIT_NOFILE`` (issue #30: one tenant's
256-partition topic took open files from 25 to 795 under a 1,024 limit, a second answered 503 for every
tenant and ``/v1/health`` went down).

* With the budget derived from the limit (half of it), tenants create 256-partition topics and publish to
  every partition: the engine's segment files stay within the budget, every call succeeds, health is ok.
* With a budget set above what the limit allows, the process does run out: the log says why, and a
  publish that needs a file answers 503 with the envelope unless the engine's one more try, after closing
  idle segments, finds the descriptors; when refused, health is degraded (not down), other calls go on,
  and the same publish succeeds when tried again (idle segments were closed)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.test_errors import assert_envelope
from tests.fixtures.files import fds_under, open_fds
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env

pytestmark = pytest.mark.slow

FILE_LIMIT = 256
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")


def start_server(tmp_path: Path, tenants: int, **env: str) -> tuple[ServerProcess, list[str]]:
    data = tmp_path / "data"
    environment = server_env(data, **env)
    cli(environment, "migrate")
    keys = [
        bootstrap(environment, f"files-{i}", "--tier", "pro")["keys"]["production"] for i in range(tenants)
    ]
    server = ServerProcess(
        env=environment,
        port=free_port(),
        data_dir=data,
        log_path=tmp_path / "server.log",
        file_limit=FILE_LIMIT,
    )
    server.start()
    return server, keys


@pytest.fixture
def servers() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for server in started:
        server.stop()


def segment_files(server: ServerProcess) -> list[str]:
    assert server.process is not None
    return [f for f in fds_under(server.process.pid, server.data_dir / "log") if f.endswith(SEGMENT_SUFFIXES)]


def test_idle_partitions_never_exhaust_the_process(tmp_path, servers):
    server, keys = start_server(tmp_path, tenants=2)
    servers.append(server)
    assert server.process is not None
    budget = FILE_LIMIT // 2
    peak_segment_files = peak_fds = 0
    clients = [
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {k}"}, timeout=30) for k in keys
    ]
    try:
        for t, http in enumerate(clients):
            for n in range(2):
                created = http.post("/v1/topics", json={"name": f"wide.{n}", "partitions": 256})
                assert created.status_code == 201, created.text
                for p in range(256):
                    published = http.post(
                        f"/v1/topics/wide.{n}/messages", json={"data": [t, n, p], "partition": p}
                    )
                    assert published.status_code == 201, published.text
                    if p % 32 == 0:
                        peak_segment_files = max(peak_segment_files, len(segment_files(server)))
                        peak_fds = max(peak_fds, len(open_fds(server.process.pid)))
                batch = http.post(
                    f"/v1/topics/wide.{n}/messages/batch",
                    json={"messages": [{"data": p, "partition": p} for p in range(0, 256, 8)]},
                )
                assert batch.status_code == 201, batch.text
            health = http.get("/v1/health")
            assert health.status_code == 200 and health.json()["checks"]["logEngine"] == "ok", health.text
        # Everything is readable, idle partitions reopened on demand.
        for t, http in enumerate(clients):
            for p in (0, 97, 255):
                page = http.get(f"/v1/topics/wide.1/partitions/{p}/messages", params={"fromOffset": 0})
                assert page.status_code == 200, page.text
                assert page.json()["data"][0]["data"] == [t, 1, p]
        peak_segment_files = max(peak_segment_files, len(segment_files(server)))
    finally:
        for http in clients:
            http.close()
    # Within the budget (a segment or two in use at a time may go beyond it for a moment).
    assert 0 < peak_segment_files <= budget + 6, peak_segment_files
    assert peak_fds < FILE_LIMIT - 32, peak_fds
    log = Path(server.log_path or "").read_text()
    assert f"open-file budget {budget} " in log
    assert "could not open" not in log


def test_a_budget_beyond_the_limit_fails_the_calls_needing_a_file_and_heals(tmp_path, servers):
    server, (key,) = start_server(tmp_path, tenants=1, QUEUECORE_LOG__OPEN_FILES="100000")
    servers.append(server)
    assert server.process is not None
    refused: list[int] = []
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        created = http.post("/v1/topics", json={"name": "wide", "partitions": 256})
        assert created.status_code == 201, created.text
        for p in range(256):
            published = http.post("/v1/topics/wide/messages", json={"data": p, "partition": p})
            if published.status_code != 201:
                assert_envelope(published, 503, "SERVICE_UNAVAILABLE")
                assert "Traceback" not in published.text and str(server.data_dir) not in published.text
                refused.append(p)
                if len(refused) == 1:
                    # Degraded, not down: a balancer keeps the node; the rest of the API is served.
                    health = http.get("/v1/health")
                    assert health.status_code == 200, health.text
                    assert health.json()["checks"]["logEngine"] == "degraded", health.text
                    assert http.get("/v1/topics").status_code == 200
                    hot = http.post("/v1/topics/wide/messages", json={"data": "hot", "partition": p - 1})
                    assert hot.status_code == 201, hot.text
                # Nothing of it was written, and idle segments were closed: tried again, it succeeds.
                again = http.post("/v1/topics/wide/messages", json={"data": p, "partition": p})
                assert again.status_code == 201, again.text
                assert again.json()["offset"] == 0
        # Out of files, the engine closes idle segments and tries the open once more: when every such
        # retry finds its descriptors (beside other suites, a fresh clone's make test saw it so), no call
        # is refused. It still ran out: the log below says so, and the calls went on.
        # Healed: the engine's lowered cap leaves descriptors free. Checked once it is quiet (the app's
        # background loops open database files for moments, and may take a freed descriptor meanwhile).
        time.sleep(0.5)
        assert len(open_fds(server.process.pid)) < FILE_LIMIT
        described = http.get("/v1/topics/wide").json()
        assert all(d["messages"] >= 1 for d in described["partitionDetails"])
    log = Path(server.log_path or "").read_text()
    assert "could not open" in log and "EMFILE" in log and "QUEUECORE_LOG__OPEN_FILES" in log
    assert "INTERNAL_ERROR" not in log and "Traceback" not in log
    assert os.path.exists(server.data_dir / "log")
