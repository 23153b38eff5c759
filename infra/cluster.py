"""QueueCore in its scale-out shape on one machine: a 3-node NATS JetStream cluster, the machine's Postgres
(metadata) and Redis (limits, fan-out), three stateless ``queuecore-server`` API processes, and HAProxy
(Debian's) as the one address in front of them. ``make cluster`` runs it until Ctrl-C.

    python -m infra.cluster                      # NATS 4311-4313, API 8081-8083, front 8080
    python -m infra.cluster --fresh              # drop the database and the NATS store first
    python -m infra.cluster --front-port 23080 --api-port 23081 --nats-port 23311 --dir /tmp/c

The NATS servers take only authenticated, encrypted connections: the first start makes ``secrets/`` (a
CA of the deployment's own and its certificates, ``secrets/tls/``, and the NATS password,
``secrets/nats.password``, all private keys and the password 0600; ``infra/nats_cluster.py``,
``infra/pki.py``), later starts keep them. Clients need the user and password and TLS trusting that CA;
routes between the servers are mutual TLS under it. The API processes get them as ``QUEUECORE_NATS_USER``,
``QUEUECORE_NATS_PASSWORD`` and ``QUEUECORE_NATS_TLS_CA``. Redis and Postgres are the machine's: a
password goes in ``--redis-url``/``--postgres-url`` (``redis://user:password@``, ``rediss://`` for TLS;
docs/operations.md, "Authenticated and encrypted links"), and is masked wherever a URL is printed.
``--insecure-nats`` runs NATS open, as before (nothing else changes).

Everything lives under ``--dir`` (``.cluster``): ``nats/`` (each node's store, config and log), ``api-N/``
(each API process's data dir and ``server.log``), ``haproxy.cfg`` and ``haproxy.log``, and ``secret_key``,
the server secret every API process shares (API keys are hashed under it, so all must agree; kept so that
a rerun's keys stay valid). The metadata database (``queuecore_cluster``) is created when missing and
dropped when the NATS store is new, so the two never disagree about which topics exist.

From Python (tests, benchmarks)::

    cluster = Cluster(Path("/tmp/c"), front_port=23080, api_ports=(23081, 23082, 23083), nats_port=23311)
    cluster.start()
    cluster.url, cluster.api_urls, cluster.keys["production"], cluster.nats.url
    cluster.stop()
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from app.kit.urls import masked
from infra.nats_cluster import ZONES, NatsCluster, NatsSecurity

BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent
POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"


def haproxy_binary() -> str:
    """Debian's ``haproxy`` (``make cluster`` installs it with apt)."""
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if found is None:
        raise FileNotFoundError("haproxy not found: `apt-get install -y haproxy` (make cluster does it)")
    return found


@dataclass
class Cluster:
    """The whole deployment; ``start()`` brings it up in dependency order, ``stop()`` tears it down."""

    root: Path = Path(".cluster")
    front_port: int = 8080
    api_ports: tuple[int, ...] = (8081, 8082, 8083)
    nats_port: int = 4311
    database: str = "queuecore_cluster"
    postgres_admin: str = POSTGRES_ADMIN
    redis_url: str = REDIS_URL
    # Keys of the Redis limiter start with this: deployments sharing one Redis do not share limits.
    rate_limit_prefix: str = "qc:cluster:"
    project: str = "demo"
    tier: str = "pro"
    demo_user: bool = True
    log_level: str = "INFO"
    # Further QUEUECORE_* for the API processes (e.g. QUEUECORE_USAGE_METERING=false for a benchmark).
    extra_env: dict[str, str] = field(default_factory=dict)
    # NATS with a user and password and TLS (client and route connections) under the deployment's CA.
    secure_nats: bool = True
    nats: NatsCluster | None = None
    api: list[subprocess.Popen[bytes]] = field(default_factory=list)
    haproxy: subprocess.Popen[bytes] | None = None
    boot: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()

    # --- addresses and credentials -------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The one address clients use (HAProxy)."""
        return f"http://127.0.0.1:{self.front_port}"

    @property
    def api_urls(self) -> list[str]:
        """Each API process directly (for per-node metrics, or to pin a client to one node)."""
        return [f"http://127.0.0.1:{port}" for port in self.api_ports]

    @property
    def database_url(self) -> str:
        base = self.postgres_admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
        return f"{base}/{self.database}"

    @property
    def keys(self) -> dict[str, str]:
        """The demo project's API keys by environment (issued by this start's bootstrap)."""
        return dict(self.boot.get("keys", {}))

    def env(self, index: int | None = None) -> dict[str, str]:
        """The environment of an API process (``index``) or of the operator CLI (None)."""
        assert self.nats is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
        data_dir = self.root / ("cli" if index is None else f"api-{index + 1}")
        env.update(
            QUEUECORE_DATA_DIR=str(data_dir),
            QUEUECORE_LOG_LEVEL=self.log_level,
            QUEUECORE_LOG_ENGINE="jetstream",
            QUEUECORE_NATS_URL=self.nats.url,
            QUEUECORE_DATABASE_URL=self.database_url,
            QUEUECORE_REDIS_URL=self.redis_url,
            QUEUECORE_RATE_LIMIT_PREFIX=self.rate_limit_prefix,
            QUEUECORE_SECRET_KEY=self._secret(),
        )
        security = self.nats.security
        if security is not None:
            env.update(
                QUEUECORE_NATS_USER=security.user,
                QUEUECORE_NATS_PASSWORD=security.password,
                QUEUECORE_NATS_TLS_CA=str(security.pki.ca),
            )
        env.update(self.extra_env)
        return env

    def ensure_nats_security(self) -> NatsSecurity | None:
        """The NATS credentials and PKI of this deployment (made at its first start, kept after), when
        secured."""
        return NatsSecurity.ensure(self.root / "secrets") if self.secure_nats else None

    def cli(self, *args: str) -> str:
        """``queuecore-server <args>`` against this deployment; its stdout."""
        done = subprocess.run(
            [str(BIN / "queuecore-server"), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"queuecore-server {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self, fresh: bool = False, timeout: float = 60.0) -> Cluster:
        """NATS, then the database (created/migrated), the demo project, the API processes, HAProxy."""
        haproxy = haproxy_binary()  # fail before starting anything
        nats_dir = self.root / "nats"
        if fresh and self.root.exists():
            shutil.rmtree(self.root)
        new_store = not nats_dir.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.nats = NatsCluster(
                nats_dir, base_port=self.nats_port, security=self.ensure_nats_security()
            ).start(timeout)
            asyncio.run(_ensure_database(self.postgres_admin, self.database, drop_first=fresh or new_store))
            self.cli("migrate")
            boot_args = ["bootstrap", "--project", self.project, "--tier", self.tier, "--json"]
            self.boot = json.loads(self.cli(*boot_args, *(["--demo-user"] if self.demo_user else [])))
            self._start_api(timeout)
            self._start_haproxy(haproxy, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def set_limits(self, limits: str) -> None:
        """Raise the demo project to enterprise with custom limits (benchmarks: ``publish=N,consume=N,...``)."""
        self.cli(
            "projects", "set-tier", "--project", self.project, "--tier", "enterprise", "--limits", limits
        )

    def _start_api(self, timeout: float) -> None:
        self.api = [self._spawn_api(index) for index in range(len(self.api_ports))]
        for index in range(len(self.api)):
            self._wait_api(index, timeout)

    def _spawn_api(self, index: int) -> subprocess.Popen[bytes]:
        data_dir = self.root / f"api-{index + 1}"
        data_dir.mkdir(parents=True, exist_ok=True)
        with (data_dir / "server.log").open("ab") as log:
            return subprocess.Popen(
                [str(BIN / "queuecore-server"), "serve", "--port", str(self.api_ports[index])],
                env=self.env(index),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_api(self, index: int, timeout: float) -> None:
        process, url = self.api[index], self.api_urls[index]
        deadline = time.monotonic() + timeout
        while not _healthy(url):
            if process.poll() is not None:
                tail = (self.root / f"api-{index + 1}" / "server.log").read_text()[-3000:]
                raise RuntimeError(f"API process {index + 1} exited:\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"API process {index + 1} not healthy after {timeout}s")
            time.sleep(0.1)

    def restart_api(self, index: int, timeout: float = 60.0) -> None:
        """A deploy's step for one API process: SIGTERM (it drains: health 503, members told, partitions
        handed over, requests in flight finished), wait for it to exit, start it again, wait until healthy."""
        self.api[index].terminate()
        self.api[index].wait(timeout=timeout)
        self.api[index] = self._spawn_api(index)
        self._wait_api(index, timeout)

    def restart_nats(self, index: int, timeout: float = 60.0) -> None:
        """A deploy's step for one NATS server: lame-duck mode (it moves its leaderships and clients away,
        then exits), started again on its store, waited for until current."""
        assert self.nats is not None
        self.nats.lame_duck(index, timeout)
        self.nats.restart(index)

    def write_haproxy_config(self, api_ports: tuple[int, ...] | None = None) -> Path:
        """Render ``infra/haproxy.cfg.template`` for these API ports into ``<root>/haproxy.cfg``."""
        servers = "\n".join(
            f"    server api{i + 1} 127.0.0.1:{port} check"
            for i, port in enumerate(self.api_ports if api_ports is None else api_ports)
        )
        text = Template((HERE / "haproxy.cfg.template").read_text()).substitute(
            front_port=self.front_port, servers=servers
        )
        path = self.root / "haproxy.cfg"
        path.write_text(text)
        return path

    def _start_haproxy(self, binary: str, timeout: float, api_ports: tuple[int, ...] | None = None) -> None:
        config = self.write_haproxy_config(api_ports)
        check = subprocess.run([binary, "-c", "-f", str(config)], capture_output=True, text=True, check=False)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused {config}: {check.stdout}{check.stderr}")
        with (self.root / "haproxy.log").open("ab") as log:
            # -db: stay in the foreground, so this process owns it and Ctrl-C/stop() ends it.
            self.haproxy = subprocess.Popen(
                [binary, "-db", "-f", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not _healthy(self.url):
            if self.haproxy.poll() is not None:
                raise RuntimeError(f"haproxy exited: see {self.root / 'haproxy.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing healthy behind {self.url} after {timeout}s")
            time.sleep(0.1)

    def balance(self, count: int, timeout: float = 30.0) -> None:
        """Restart HAProxy with only the first ``count`` API processes behind it (the others keep running,
        idle): the scale-out curve of ``bench/scaleout_bench.py``."""
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.terminate()
            self.haproxy.wait(timeout=15)
        self.haproxy = None
        self._start_haproxy(haproxy_binary(), timeout, self.api_ports[:count])

    def stop(self) -> None:
        """HAProxy, then the API processes (SIGTERM, SIGKILL after 15 s), then NATS."""
        processes = [p for p in [self.haproxy, *self.api] if p is not None]
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.haproxy = None
        self.api = []
        if self.nats is not None:
            self.nats.stop()

    def exited(self) -> str | None:
        """What has died on its own, if anything (the foreground loop watches this)."""
        named: list[tuple[str, subprocess.Popen[bytes] | None]] = [("haproxy", self.haproxy)]
        named += [(f"API process {i + 1}", p) for i, p in enumerate(self.api)]
        if self.nats is not None:
            named += [(f"nats node n{n.index}", n.process) for n in self.nats.nodes]
        for name, process in named:
            if process is not None and process.poll() is not None:
                return f"{name} exited ({process.returncode})"
        return None

    def _secret(self) -> str:
        path = self.root / "secret_key"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(secrets.token_urlsafe(48))
            tmp.chmod(0o600)
            tmp.replace(path)
        return path.read_text().strip()

    def _nats_access(self) -> str:
        security = self.nats.security if self.nats is not None else None
        if security is None:
            return "  NATS: open (no credentials, no TLS: --insecure-nats)"
        # The password itself stays in its file.
        return (
            f"  NATS: user {security.user}, password in {security.pki.root.parent / 'nats.password'}, "
            f"TLS (clients and routes) under the CA {security.pki.ca}"
        )

    def banner(self) -> str:
        """What ``make cluster`` prints: the addresses, the demo keys and login (as ``make run`` does)."""
        lines = [
            f"QueueCore cluster: {self.url} (HAProxy, round-robin) in front of " + ", ".join(self.api_urls),
            f"  NATS JetStream (3 nodes, zones {'/'.join(ZONES)}, R=3 topics by default, a replica per zone): "
            + (self.nats.url if self.nats else ""),
            f"  metadata: Postgres {self.database}; limits and fan-out: Redis {masked(self.redis_url)}",
            f"  logs: {self.root}/api-N/server.log, {self.root}/nats/nN.log, {self.root}/haproxy.log",
            self._nats_access(),
            f"Project {self.project} ({self.boot.get('projectId', '')}), tier {self.tier}",
            "API keys (shown once):",
        ]
        lines += [f"  {env:<12} {key}" for env, key in self.keys.items()]
        login = self.boot.get("login")
        if login:
            password = login["password"] or "unchanged (printed when the login was created)"
            lines += ["Dashboard login:", f"  email     {login['email']}", f"  password  {password}"]
            lines.append(f"  dashboard {self.url}/dashboard")
        lines.append("Ctrl-C stops everything.")
        return "\n".join(lines)


async def _connect(admin_dsn: str) -> Any:
    import asyncpg  # type: ignore[import-untyped]

    return await asyncpg.connect(admin_dsn)


async def _ensure_database(admin_dsn: str, name: str, drop_first: bool) -> None:
    conn = await _connect(admin_dsn)
    try:
        if drop_first:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def drop_database(admin_dsn: str, name: str) -> None:
    """Drop a deployment's metadata database (tests clean up with it)."""
    conn = await _connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def cluster_from_args(argv: list[str] | None = None) -> tuple[Cluster, bool]:
    """The deployment the command line describes, and whether to start it fresh."""
    parser = argparse.ArgumentParser(description="Run QueueCore's scale-out shape on loopback until Ctrl-C.")
    parser.add_argument("--dir", type=Path, default=Path(".cluster"), help="state directory")
    parser.add_argument("--front-port", type=int, default=8080, help="HAProxy's port (the one address)")
    parser.add_argument("--api-port", type=int, default=8081, help="first API process's port (N, N+1, N+2)")
    parser.add_argument("--api-processes", type=int, default=3)
    parser.add_argument(
        "--nats-port", type=int, default=4311, help="first NATS client port (+100 routes, +200 monitoring)"
    )
    parser.add_argument(
        "--postgres-url",
        default=POSTGRES_ADMIN,
        help="an admin connection to the Postgres server (host, port, user); the database is --database",
    )
    parser.add_argument("--database", default="queuecore_cluster", help="Postgres database for metadata")
    parser.add_argument(
        "--redis-url", default=REDIS_URL, help="Redis for limits and fan-out: host, port and database number"
    )
    parser.add_argument("--project", default="demo")
    parser.add_argument("--rate-limit-prefix", default="qc:cluster:", help="Redis key prefix of the limiter")
    parser.add_argument("--fresh", action="store_true", help="delete the state directory and database first")
    parser.add_argument(
        "--insecure-nats",
        action="store_true",
        help="NATS without credentials or TLS (as before #36); by default both, under a CA made in <dir>/secrets",
    )
    args = parser.parse_args(argv)
    cluster = Cluster(
        args.dir,
        front_port=args.front_port,
        api_ports=tuple(args.api_port + i for i in range(args.api_processes)),
        nats_port=args.nats_port,
        database=args.database,
        postgres_admin=args.postgres_url,
        redis_url=args.redis_url,
        project=args.project,
        rate_limit_prefix=args.rate_limit_prefix,
        secure_nats=not args.insecure_nats,
    )
    return cluster, args.fresh


def main() -> None:
    cluster, fresh = cluster_from_args()
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        cluster.start(fresh=fresh)
        print(cluster.banner(), flush=True)
        while not stop:
            gone = cluster.exited()
            if gone:
                print(f"cluster: {gone}; stopping everything", file=sys.stderr, flush=True)
                break
            time.sleep(0.5)
    finally:
        print("cluster: stopping", file=sys.stderr, flush=True)
        cluster.stop()


if __name__ == "__main__":
    main()
