"""``queuecore-server`` in its scale-out shape with every link authenticated (docs/operations.md,
"Authenticated and encrypted links"): a secured 3-node NATS cluster (user and password, TLS under a CA
of its own, mutual TLS on routes), a Redis with ``requirepass``, and Postgres as a role with a password.
The server migrates, bootstraps and serves with them (topics, publishes and reads go through JetStream;
health says every store is ok, Redis not degraded), logging at DEBUG, and no password reaches its log or
the CLI's output. What Postgres here cannot show (its pg_hba trusts 127.0.0.1, ssl is off) is said in
tests/stores/metadata/test_postgres_auth.py."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from infra.nats_cluster import NatsCluster, NatsSecurity
from tests.fixtures.database import ADMIN_DSN
from tests.fixtures.nats import free_base_port
from tests.fixtures.redis import RedisServer
from tests.fixtures.server import (
    ServerProcess,
    assert_served_through_jetstream,
    bootstrapped_server,
    cli,
    free_port,
    refused_link_log,
    server_env,
)

REDIS_PASSWORD = secrets.token_urlsafe(24)
PG_PASSWORD = secrets.token_urlsafe(24)


async def _admin(*statements: str) -> None:
    conn = await asyncpg.connect(ADMIN_DSN)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, NatsSecurity]]:
    root = tmp_path_factory.mktemp("secured-links")
    security = NatsSecurity.ensure(root / "secrets")
    nats = NatsCluster(root / "nats", base_port=free_base_port(), security=security).start(60)
    redis = RedisServer(free_port(), root, "--requirepass", REDIS_PASSWORD)
    role = f"qc_links_{os.getpid()}_{secrets.token_hex(3)}"
    asyncio.run(
        _admin(f"CREATE ROLE {role} LOGIN PASSWORD '{PG_PASSWORD}'", f'CREATE DATABASE "{role}" OWNER {role}')
    )
    server: ServerProcess | None = None
    try:
        redis.start()
        data_dir = root / "api"
        env = server_env(
            data_dir,
            f"postgresql+asyncpg://{role}:{PG_PASSWORD}@127.0.0.1:5432/{role}",
            QUEUECORE_LOG_LEVEL="DEBUG",
            QUEUECORE_DATABASE_SSLMODE="prefer",
            QUEUECORE_LOG_ENGINE="jetstream",
            QUEUECORE_NATS_URL=nats.url,
            QUEUECORE_NATS_USER=security.user,
            QUEUECORE_NATS_PASSWORD=security.password,
            QUEUECORE_NATS_TLS_CA=str(security.pki.ca),
            QUEUECORE_REDIS_URL=f"redis://:{REDIS_PASSWORD}@127.0.0.1:{redis.port}/0",
        )
        server = bootstrapped_server(env, data_dir, "links")
        yield server, security
    finally:
        if server is not None:
            server.stop()
        redis.kill()
        nats.stop()
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{role}" WITH (FORCE)', f"DROP ROLE IF EXISTS {role}"))


class TestEveryLinkAuthenticated:
    def test_health_sees_every_store_and_redis_is_not_degraded(self, deployment):
        server, _ = deployment
        health = httpx.get(server.url + "/v1/health", timeout=10).json()
        assert health["status"] == "ok", health
        assert health["checks"] == {"database": "ok", "redis": "ok", "logEngine": "ok"}

    def test_topics_publishes_and_reads_go_through_the_secured_cluster(self, deployment):
        server, _ = deployment
        assert_served_through_jetstream(server, "links")

    def test_no_password_in_the_servers_log_or_the_clis_output(self, deployment):
        server, security = deployment
        assert server.log_path is not None
        log = server.log_path.read_text()
        assert "queuecore started" in log  # the startup log is there, at DEBUG
        shown = cli(server.env, "keys", "list", "--project", "links", check=False)
        for password in (security.password, REDIS_PASSWORD, PG_PASSWORD):
            assert password not in log
            assert password not in shown.stdout + shown.stderr


class TestAWrongNatsPassword:
    def test_the_server_starts_says_down_logs_the_refusal_once_and_stops_on_sigterm(
        self, deployment, tmp_path: Path
    ):
        server, _ = deployment
        wrong = "wrong-" + secrets.token_hex(8)
        log = refused_link_log({**server.env, "QUEUECORE_NATS_PASSWORD": wrong}, tmp_path)
        assert log.count("refused this process's credentials") == 1, log[-3000:]
        assert wrong not in log
