"""``make cluster``'s options: every service's address can move, and ``infra/services.sh`` starts only
the services it is asked for (make cluster never asks for a NATS: it runs its own)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from infra.cluster import REDIS_URL, cluster_from_args
from infra.nats_cluster import NatsCluster

ROOT = Path(__file__).resolve().parents[2]


class TestClusterArguments:
    def test_defaults_are_the_documented_ports(self):
        cluster, fresh = cluster_from_args([])
        assert (cluster.front_port, cluster.api_ports, cluster.nats_port) == (8080, (8081, 8082, 8083), 4311)
        assert cluster.redis_url == REDIS_URL and not fresh

    def test_every_service_can_move(self):
        cluster, fresh = cluster_from_args(
            [
                "--redis-url", "redis://127.0.0.1:6380/2",
                "--postgres-url", "postgresql://postgres@127.0.0.1:5433/postgres",
                "--database", "qc_elsewhere",
                "--front-port", "9080", "--api-port", "9081", "--api-processes", "2",
                "--nats-port", "5311",
                "--fresh",
            ]
        )  # fmt: skip
        assert cluster.redis_url == "redis://127.0.0.1:6380/2"
        assert cluster.database_url == "postgresql+asyncpg://postgres@127.0.0.1:5433/qc_elsewhere"
        assert (cluster.front_port, cluster.api_ports, cluster.nats_port) == (9080, (9081, 9082), 5311)
        assert fresh


class TestSecuredByDefault:
    def test_nats_is_secured_unless_asked_not_to_be(self):
        assert cluster_from_args([])[0].secure_nats
        assert not cluster_from_args(["--insecure-nats"])[0].secure_nats

    def test_the_api_processes_get_the_credentials_and_the_banner_shows_no_password(self, tmp_path):
        cluster, _ = cluster_from_args(
            ["--dir", str(tmp_path), "--redis-url", "redis://:r3dis-pw@127.0.0.1:6379/0"]
        )
        security = cluster.ensure_nats_security()
        assert security is not None
        cluster.nats = NatsCluster(tmp_path / "nats", security=security)  # not started
        env = cluster.env(0)
        assert env["QUEUECORE_NATS_USER"] == "queuecore"
        assert env["QUEUECORE_NATS_PASSWORD"] == (tmp_path / "secrets" / "nats.password").read_text().strip()
        assert env["QUEUECORE_NATS_TLS_CA"] == str(tmp_path / "secrets" / "tls" / "ca.pem")
        banner = cluster.banner()
        assert security.password not in banner and "r3dis-pw" not in banner
        assert "redis://:***@127.0.0.1:6379/0" in banner and "nats.password" in banner
        # A second start keeps the credentials (clients keep working).
        assert cluster.ensure_nats_security() == security


def _services(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "infra/services.sh", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


class TestServicesScript:
    def test_starts_only_what_it_is_asked_for(self):
        done = _services("up", "redis")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "services: redis up"

    def test_refuses_an_unknown_service(self):
        done = _services("up", "kafka")
        assert done.returncode == 2 and "usage" in done.stderr
