"""``queuecore-server`` on the JetStream engine signing in to NATS with a creds file
(``QUEUECORE_NATS_CREDS``, docs/operations.md, "Authenticated and encrypted links"): a 3-node cluster in
operator mode (``tests/fixtures/nats_accounts.py``) that lets in only users whose JWT chain reaches its
operator. The server migrates, bootstraps and serves through it (topics, publishes and reads go through
JetStream; health says the engine is ok), and no seed reaches its log. With a revoked user's creds it
starts, says ``logEngine: down`` (503) and logs the refusal once. The metadata store is the embedded
SQLite and the limits are in-process: the NATS link is what is under test here (every link secured at
once: tests/system/test_secured_links.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from infra.nats_cluster import NatsCluster
from tests.fixtures.nats import free_base_port
from tests.fixtures.nats_accounts import Operator, User
from tests.fixtures.server import (
    ServerProcess,
    assert_served_through_jetstream,
    bootstrapped_server,
    refused_link_log,
    server_env,
)


@dataclass(frozen=True)
class Deployment:
    server: ServerProcess
    engine: User
    revoked: Path


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("creds-link")
    operator = Operator.create("queuecore-test")
    app = operator.account("QUEUECORE", jetstream=True)
    engine, revoked = app.user("engine"), app.user("revoked")
    app.revoke(revoked)
    nats = NatsCluster(root / "nats", base_port=free_base_port(), operator_config=operator.server_config())
    nats.start(60)
    server: ServerProcess | None = None
    try:
        data_dir = root / "api"
        env = server_env(
            data_dir,
            QUEUECORE_LOG_LEVEL="DEBUG",
            QUEUECORE_LOG_ENGINE="jetstream",
            QUEUECORE_NATS_URL=nats.url,
            QUEUECORE_NATS_CREDS=str(engine.write_creds(root / "secrets" / "engine.creds")),
        )
        server = bootstrapped_server(env, data_dir, "creds")
        yield Deployment(server, engine, revoked.write_creds(root / "secrets" / "revoked.creds"))
    finally:
        if server is not None:
            server.stop()
        nats.stop()


class TestSignedInWithACredsFile:
    def test_health_says_the_engine_is_ok(self, deployment):
        health = httpx.get(deployment.server.url + "/v1/health", timeout=10).json()
        assert health["status"] == "ok", health
        assert health["checks"]["logEngine"] == "ok"

    def test_topics_publishes_and_reads_go_through_the_operator_mode_cluster(self, deployment):
        server = deployment.server
        assert_served_through_jetstream(server, "creds")

    def test_no_seed_in_the_servers_log(self, deployment):
        assert deployment.server.log_path is not None
        log = deployment.server.log_path.read_text()
        assert "queuecore started" in log  # the startup log is there, at DEBUG
        assert deployment.engine.seed.decode() not in log


class TestARevokedUsersCreds:
    def test_the_server_starts_says_down_logs_the_refusal_once_and_stops_on_sigterm(
        self, deployment, tmp_path: Path
    ):
        server = deployment.server
        log = refused_link_log({**server.env, "QUEUECORE_NATS_CREDS": str(deployment.revoked)}, tmp_path)
        assert log.count("refused this process's credentials") == 1, log[-3000:]
