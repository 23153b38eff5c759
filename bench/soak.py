"""Crash soak: SIGKILL a real ``queuecore-server`` again and again under mixed load, and check after every
restart that nothing it promised was broken.

For each configuration (log engine x metadata store; ``--engines local,jetstream``, ``--stores
sqlite,postgres``): a fresh data dir (and, for Postgres, a fresh database on the machine's server; for
JetStream, a fresh 3-node NATS cluster of its own), one exactly-once topic of 3 partitions, and ``--kills``
rounds of: mixed load for a random 0.4-1.6 s, ``SIGKILL`` of the API server, restart, check. On JetStream
only the API server is killed: the cluster keeps running, as it would when an API node dies.

The load is in ``soak_load.py`` (single and batch publishes with and without idempotency keys; a push, a
pull, and a retrying pull consumer with a DLQ: ``maxRetries`` 3, ``retryDelay`` 100ms, "flaky" messages
nacked once with ``delay`` 500ms; ``ackTimeout`` 1s, 3s for ``retry``); the ledger and the checks in
``soak_ledger.py``. Checked (a failed check is a violation; the run's figure must be 0):
  * after every restart: every 2xx publish at its partition and offset, same id, same data; no batch
    visible in part; no idempotency key in the log twice; a keyed publish whose outcome was unknown, sent
    again, answers 2xx and, if the first one was written, its original id and offset; a few acknowledged
    keyed publishes sent again answer their original with ``Idempotent-Replayed: true``;
  * while consuming: no message whose ack was confirmed is delivered to that group again (exactly-once);
    no message whose nack was confirmed is delivered before its retry delay (-10 % jitter);
  * at the end, consuming without kills until every group is done: every message in the log delivered to
    every group at least once, every group's lag 0 as the server sees it; every poison message in the DLQ,
    none twice, none that was acked.

A further log engine is one more entry in ``ENGINES``: the env that selects it, and a context manager that
provides what it needs (as ``nats_cluster`` does for ``QUEUECORE_LOG_ENGINE=jetstream``).

    .venv/bin/python bench/soak.py [--kills 100] [--stores sqlite,postgres] [--engines local,jetstream]
                                   [--seed 1] [--no-write] [--serial]

Writes bench/results/soak.md and soak.json unless ``--no-write``: the configurations run replace their
rows, the others' committed rows are kept (each row names the commit and command it came from). Exits 1
on any violation.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import httpx
from soak_ledger import (  # noqa: F401 - the short soak's test checks them through this module
    ACK_TIMEOUT,
    GROUPS,
    PARTITIONS,
    RETRY,
    RETRY_ACK_TIMEOUT,
    TOPIC,
    Ledger,
    audit,
    delivered,
    done,
    final_checks,
    lags,
)
from soak_load import check_log, publisher, pull_consumer, push_consumer
from websockets.exceptions import WebSocketException

from infra.nats_cluster import NatsCluster
from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.nats import free_base_port
from tests.fixtures.server import ServerProcess, bootstrap, cli, server_env

PORTS = range(19150, 19200)  # this soak's port range (API servers; NATS clusters take free ports)


@contextlib.contextmanager
def nats_cluster() -> Iterator[dict[str, str]]:
    """A fresh 3-node JetStream cluster for one configuration (its own store, removed afterwards), and the
    env that points a server at it."""
    root = Path(tempfile.mkdtemp(prefix="qc-soak-nats-"))
    cluster = NatsCluster(root, base_port=free_base_port()).start()
    try:
        yield {"QUEUECORE_LOG_ENGINE": "jetstream", "QUEUECORE_NATS_URL": cluster.url}
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class Engine:
    """A log engine the soak can run on: the env that selects it and what it needs running."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    provide: Callable[[], contextlib.AbstractContextManager[dict[str, str]]] | None = None
    # How long a cross-partition batch the kill cut may be seen in part (0: never): JetStream applies one
    # partition by partition and recovery rolls it forward from its commit record after
    # QUEUECORE_JETSTREAM__RECOVER_AFTER_SECONDS (10) plus one recovery interval (2), checked at every
    # restart; 8 s of slack for a loaded machine.
    roll_forward_s: float = 0.0


ENGINES: dict[str, Engine] = {
    "local": Engine("local"),
    "jetstream": Engine("jetstream", provide=nats_cluster, roll_forward_s=20.0),
}


@contextlib.contextmanager
def metadata_store(kind: str) -> Iterator[str]:
    """The database URL of a fresh metadata store of ``kind`` ('' = the embedded SQLite file)."""
    if kind == "sqlite":
        yield ""
        return
    name = f"qc_soak_{secrets.token_hex(4)}"
    asyncio.run(create_database(name))
    try:
        yield database_url(name)
    finally:
        asyncio.run(drop_database(name))


_TAKEN: set[int] = set()  # ports handed out here (configurations may run side by side)
_TAKEN_LOCK = threading.Lock()


def free_port() -> int:
    with _TAKEN_LOCK:
        return _free_port()


def _free_port() -> int:
    for port in random.sample(PORTS, len(PORTS)):
        if port in _TAKEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _TAKEN.add(port)
            return port
    raise RuntimeError(f"no free port in {PORTS}")


# -- the run ------------------------------------------------------------------------------------------


_CUT = (httpx.TransportError, OSError, WebSocketException, asyncio.CancelledError)


@contextlib.asynccontextmanager
async def running(
    tasks: list[asyncio.Task[None]], ledger: Ledger, killed: bool = True
) -> AsyncIterator[None]:
    try:
        yield
    finally:
        if killed:
            # The server is gone: let every task see its connection cut (what was in flight is recorded
            # as unknown), then stop what is left.
            await asyncio.wait(tasks, timeout=3)
        for task in tasks:
            task.cancel()
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            # Connections cut by the kill end a task; anything else is a finding.
            if isinstance(result, Exception) and not isinstance(result, _CUT):
                ledger.violation(f"a load task failed: {result!r}")


def restart(server: ServerProcess, ledger: Ledger) -> None:
    """Start the killed server again. ``ServerProcess.start`` waits 30 s for a healthy answer; on a loaded
    machine (health checks time out under load) it may take longer: a live process gets 120 s more."""
    started = time.monotonic()
    try:
        server.start()
    except AssertionError:
        if server.process is None or server.process.poll() is not None:
            raise
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(server.url + "/v1/health", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    took = time.monotonic() - started
    ledger.counts["slowest restart (ms)"] = max(ledger.counts["slowest restart (ms)"], round(took * 1000))


async def soak(
    server: ServerProcess, ledger: Ledger, kills: int, log: Callable[[str], None], roll_forward_s: float = 0.0
) -> None:
    key = server.keys["production"]
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=15, limits=limits) as http:
        created = await http.post(
            "/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS, "delivery": "exactly-once"}
        )
        created.raise_for_status()
        for group, config in (("push", {}), ("pull", {}), ("retry", {"deadLetter": RETRY})):
            answer = await http.put(
                f"/v1/topics/{TOPIC}/groups/{group}",
                json={"ackTimeout": RETRY_ACK_TIMEOUT if group == "retry" else ACK_TIMEOUT, **config},
            )
            answer.raise_for_status()
    started = time.monotonic()
    for round_ in range(1, kills + 1):
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=15, limits=limits) as http:
            tasks = [
                asyncio.create_task(publisher(http, ledger, kind))
                for kind in ("single", "single-keyed", "batch", "batch-keyed")
            ]
            tasks += [
                asyncio.create_task(push_consumer(server.url, key, ledger)),
                asyncio.create_task(pull_consumer(http, ledger, "pull")),
                asyncio.create_task(pull_consumer(http, ledger, "retry")),
            ]
            async with running(tasks, ledger):
                await asyncio.sleep(ledger.rng.uniform(0.4, 1.6))
                server.stop(signal.SIGKILL)
                ledger.counts["kills"] += 1
        await asyncio.to_thread(restart, server, ledger)
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30, limits=limits) as http:
            await check_log(http, ledger, roll_forward_s)
        if round_ % 10 == 0 or round_ == kills:
            log(
                f"  kill {round_}/{kills} at {time.monotonic() - started:.0f}s: {len(ledger.stored)} messages in the log,"
                f" {ledger.counts['violations']} violations"
            )
    # Drain: consume without kills until every group is done.
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30, limits=limits) as http:
        tasks = [
            asyncio.create_task(push_consumer(server.url, key, ledger)),
            asyncio.create_task(pull_consumer(http, ledger, "pull")),
            asyncio.create_task(pull_consumer(http, ledger, "retry")),
        ]
        drained = time.monotonic()
        deadline = drained + 180
        async with running(tasks, ledger, killed=False):
            while time.monotonic() < deadline:
                await asyncio.sleep(1)
                # Done by the log as last read, past the roll-forward time (what recovery applies late is
                # in the log by then): read it again, and done by that too, with no batch in part.
                if done(ledger, await lags(http)) and time.monotonic() - drained >= roll_forward_s:
                    await check_log(http, ledger, roll_forward_s)
                    if done(ledger, await lags(http)) and not ledger.partial:
                        break
        await check_log(http, ledger, roll_forward_s)
        await final_checks(http, ledger)


def run_config(
    engine: Engine, store: str, kills: int, seed: int, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """One engine x store configuration: a fresh server, ``kills`` rounds, the final checks."""
    ledger = Ledger(rng=random.Random(seed))
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(metadata_store(store))
        extra = dict(engine.env)
        if engine.provide is not None:
            extra.update(stack.enter_context(engine.provide()))
        data = Path(tempfile.mkdtemp(prefix=f"qc-soak-{engine.name}-{store}-"))
        env = server_env(data, url, **extra, QUEUECORE_LOG_LEVEL="WARNING")
        cli(env, "migrate")
        project = f"soak-{secrets.token_hex(3)}"
        keys = bootstrap(env, project, "--tier", "enterprise")["keys"]
        cli(
            env,
            "projects",
            "set-tier",
            "--project",
            project,
            "--tier",
            "enterprise",
            "--limits",
            "publish=100000,consume=100000,admin=10000",
        )
        server = ServerProcess(env=env, port=free_port(), data_dir=data, log_path=data / "server.log")
        server.keys = keys
        server.start()
        try:
            asyncio.run(soak(server, ledger, kills, log, engine.roll_forward_s))
        except BaseException:
            log(f"the soak stopped; the data dir and server log are kept in {data}")
            raise
        finally:
            server.stop()
            errors = [line for line in server.log_path.read_text().splitlines() if '"level":"error"' in line]
            ledger.counts["server ERROR log lines"] = len(errors)
        if ledger.violations:
            log(f"violations: the data dir and server log are kept in {data}")
        else:
            shutil.rmtree(data, ignore_errors=True)
    return {
        "engine": engine.name,
        "store": store,
        "seed": seed,
        "seconds": round(time.monotonic() - started),
        "counts": dict(ledger.counts),
        "messages in the log": len(ledger.stored),
        "violations": ledger.violations,
    }


def provenance(args: argparse.Namespace) -> dict[str, str]:
    """Where a run's rows come from: the commit, the command, the machine (kept with each row)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True, cwd=ROOT
    ).stdout.strip() or os.environ.get("SOAK_COMMIT", "?")  # run from an exported snapshot: no git there
    command = f"bench/soak.py --kills {args.kills} --stores {args.stores} --engines {args.engines} --seed {args.seed}"
    return {"commit": commit, "command": command, "machine": f"{platform.platform()}, {os.cpu_count()} CPUs"}


def merged(results: list[dict[str, Any]], committed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The committed rows with this run's configurations replaced, in ``ENGINES`` then store order."""
    rows = {(r["engine"], r["store"]): r for r in committed}
    rows.update({(r["engine"], r["store"]): r for r in results})
    engines, stores = list(ENGINES), ["sqlite", "postgres"]

    def order(key: tuple[str, str]) -> tuple[int, int, str]:
        engine, store = key
        return (
            engines.index(engine) if engine in engines else len(engines),
            stores.index(store) if store in stores else len(stores),
            store,
        )

    return [rows[key] for key in sorted(rows, key=order)]


def write_results(results: list[dict[str, Any]]) -> None:
    """Merge this run's rows into bench/results/soak.json and write soak.md from all of them."""
    out = ROOT / "bench" / "results"
    path = out / "soak.json"
    rows = merged(results, json.loads(path.read_text()) if path.exists() else [])
    path.write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "# Crash soak",
        "",
        "Generated by `bench/soak.py` (each row names its commit and command below; a run replaces the rows of",
        "the configurations it ran and keeps the others). Every round: mixed load for 0.4-1.6 s, SIGKILL of the",
        "API server, restart, checks (see the script's docstring and docs/reliability.md).",
        "",
        (
            "| engine | metadata | kills | 2xx publishes | messages in the log | message checks | batch checks |"
            " deliveries push / pull / retry | confirmed acks push / pull / retry | nacks | DLQ entries (poison)"
            " | violations |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---|---|---:|---|---:|",
    ]
    for r in rows:
        c = Counter(r["counts"])
        lines.append(
            f"| {r['engine']} | {r['store']} | {c['kills']} | {c['published (2xx)']:,} | {r['messages in the log']:,} |"
            f" {c['message checks']:,} | {c['batch checks']:,} |"
            f" {c['deliveries push']:,} / {c['deliveries pull']:,} / {c['deliveries retry']:,} |"
            f" {c['acks push']:,} / {c['acks pull']:,} / {c['acks retry']:,} | {c['nacks retry']:,} |"
            f" {c['dead_letters entries']:,} ({c['poison messages']:,}) | {c['violations']} |"
        )
    lines += ["", "Where each row comes from, and its other counts:", ""]
    for r in rows:
        rest = {k: v for k, v in sorted(r["counts"].items())}
        lines.append(
            f"- {r['engine']} / {r['store']}: `{r.get('command', '?')}` at commit {r.get('commit', '?')},"
            f" {r.get('machine', '?')}; {r['seconds']} s. " + ", ".join(f"{k} {v:,}" for k, v in rest.items())
        )
    (out / "soak.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=100, help="SIGKILLs per configuration")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--engines", default="local,jetstream", help=f"of {', '.join(ENGINES)}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    parser.add_argument("--serial", dest="parallel", action="store_false", help="one configuration at a time")
    args = parser.parse_args()
    configs = [(e, store) for e in args.engines.split(",") for store in args.stores.split(",")]

    def one(config: tuple[str, str]) -> dict[str, Any]:
        engine_name, store = config
        say = lambda line: print(f"[{engine_name}/{store}] {line.strip()}", flush=True)
        say(f"{args.kills} kills")
        result = run_config(ENGINES[engine_name], store, args.kills, args.seed, say)
        say(f"done in {result['seconds']} s: counts {result['counts']}")
        for v in result["violations"][:20]:
            say(f"VIOLATION {v}")
        return result

    # Configurations side by side (each has its own server, data dir and database).
    with ThreadPoolExecutor(len(configs) if args.parallel else 1) as pool:
        results = list(pool.map(one, configs))
    if not args.no_write:
        where = provenance(args)
        write_results([{**r, **where} for r in results])
    return 1 if any(r["counts"].get("violations") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
