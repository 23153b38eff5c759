"""Rolling restarts under load (issue #36): `make cluster`'s shape (3 NATS nodes, 3 API processes behind
HAProxy, Postgres, Redis) on free ports, the Python, Node.js and Go SDKs side by side, each publishing and
consuming an exactly-once topic of its own (tests/system/faults/rollout.py; the Node and Go clients are
bench/rolling/), while every API process is restarted in turn (SIGTERM: drain, exit, start), then the run's
own Postgres (``pg_ctl restart -m fast``) and Redis (stopped, started empty), then every NATS server
(lame-duck mode, then a restart on its store).

    .venv/bin/python bench/rolling_restart.py [--sdks python,node,go] [--no-nats] [--no-stores] [--no-write]

The Node client needs the built SDK (make install-js), the Go client the module proxy (make go-deps);
`make rolling-restart` makes both. QC_BENCH_LOG_LEVEL=INFO logs more from the API processes (their logs, and
the clients' output, stay under the run's temp dir).

Writes bench/results/rolling_restart.md: per SDK, errors surfaced to its callers, acknowledged publishes
lost, messages delivered twice, and per step the publish latency (p50, p99, max) and the longest gap between
two deliveries. Exits 1 when an error reached a caller, something was lost or something came twice, in any
SDK.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from infra.cluster import Cluster
from tests.fixtures.database import drop_database
from tests.fixtures.nats import free_base_port
from tests.fixtures.postgres import PrivatePostgres
from tests.fixtures.redis import RedisServer
from tests.fixtures.server import free_port
from tests.system.faults.rollout import SDKS, Outcome, run

RESULTS = ROOT / "bench" / "results"


NAMES = {"python": "Python", "node": "Node.js", "go": "Go"}


async def rollout(nats: bool, stores: bool, sdks: list[str]) -> dict[str, Outcome]:
    root = Path(tempfile.mkdtemp(prefix="qc-rollout-"))
    # Restarting Postgres and Redis needs ones this run owns (never the machine's shared servers).
    postgres = PrivatePostgres() if stores else None
    redis = RedisServer(free_port(), root) if stores else None
    if postgres is not None and redis is not None:
        postgres.start()
        redis.start()
    cluster = Cluster(
        root / "cluster",
        front_port=free_port(),
        api_ports=(free_port(), free_port(), free_port()),
        nats_port=free_base_port(),
        database=f"qc_bench_rollout_{os.getpid()}_{secrets.token_hex(3)}",
        rate_limit_prefix=f"qc:bench:{secrets.token_hex(4)}:",
        demo_user=False,
        log_level=os.environ.get("QC_BENCH_LOG_LEVEL", "WARNING"),
        **({"postgres_admin": postgres.admin_dsn, "redis_url": redis.url} if postgres and redis else {}),
    )
    steps = (
        [("postgres restart", postgres.restart), ("redis restart", redis.restart)]
        if postgres and redis
        else []
    )
    try:
        await asyncio.to_thread(cluster.start, True)
        await asyncio.to_thread(cluster.set_limits, "publish=100000,consume=100000,admin=10000")
        return await run(cluster, cluster.keys["production"], nats=nats, stores=steps, sdks=sdks)
    finally:
        await asyncio.to_thread(cluster.stop)
        if postgres is not None and redis is not None:
            redis.kill()
            postgres.remove()
        else:
            await drop_database(cluster.database)


def report(outcomes: dict[str, Outcome], commit: str) -> list[str]:
    """The results page: a row per SDK, the first errors, then each SDK's figures per step."""
    lines = [
        "# Rolling restarts under load",
        "",
        "Written by `bench/rolling_restart.py` (`make rolling-restart`): what it runs is in its docstring and",
        "tests/system/faults/rollout.py. "
        + ", ".join(NAMES[sdk] for sdk in outcomes)
        + " SDKs side by side in one run, each as shipped (retries, idempotency keys, reconnects; 8 retries),",
        "with 2 publishers and 2 push members of one group on an exactly-once topic of its own, all through",
        "HAProxy (the Node.js and Go clients: bench/rolling/).",
        f"Commit {commit}; machine: {platform.platform()}, {os.cpu_count()} CPUs (shared: read the",
        "latencies as this machine's, the counts as the result).",
        "",
        "| SDK | acknowledged publishes | deliveries | errors to publish callers | consumer errors reported "
        + "| acknowledged, never delivered | delivered twice |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for sdk, o in outcomes.items():
        lines.append(
            f"| {NAMES[sdk]} | {o.published} | {o.delivered} | **{len(o.publish_errors)}** | "
            f"{len(o.consumer_errors)} | **{len(o.lost)}** | **{len(o.duplicates)}** |"
        )
    notes = []
    for sdk, o in outcomes.items():
        for what, errors in (
            ("client program failed", o.client_errors),
            ("first publish error", o.publish_errors),
            ("first consumer error", o.consumer_errors),
        ):
            if errors:
                notes.append(f"- {NAMES[sdk]}, {what}: {errors[0][:300]}")
        if o.duplicates:
            notes.append(f"- {NAMES[sdk]}, delivered twice: {o.duplicate_deliveries}")
        if o.lost:
            notes.append(f"- {NAMES[sdk]}, lost: {o.lost[:20]}")
    if notes:
        lines += ["", *notes]
    for sdk, o in outcomes.items():
        lines += [
            "",
            f"## {NAMES[sdk]} SDK, per step",
            "",
            "| step | seconds | publishes | p50 ms | p99 ms | max ms | deliveries | longest delivery gap ms |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in o.phases:
            lines.append(
                f"| {p['phase']} | {p['seconds']} | {p['publishes']} | {p['p50_ms']} | {p['p99_ms']} | "
                f"{p['max_ms']} | {p['deliveries']} | {p['longest_gap_ms']} |"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdks", default=",".join(SDKS), help="which SDKs load the deployment")
    parser.add_argument("--no-nats", action="store_true", help="restart the API processes only")
    parser.add_argument(
        "--no-stores", action="store_true", help="use the machine's Postgres and Redis and restart neither"
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    sdks = [s for s in args.sdks.split(",") if s]
    if not sdks or set(sdks) - set(SDKS):
        parser.error(f"--sdks: a comma-separated choice of {', '.join(SDKS)}")
    outcomes = asyncio.run(rollout(nats=not args.no_nats, stores=not args.no_stores, sdks=sdks))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    lines = report(outcomes, commit)
    print("\n".join(lines))
    if not args.no_write:
        (RESULTS / "rolling_restart.md").write_text("\n".join(lines) + "\n")
    return 0 if all(o.ok and not o.consumer_errors for o in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
