"""Rolling restarts under load (issue #36): `make cluster`'s shape (3 NATS nodes, 3 API processes behind
HAProxy, Postgres, Redis) on free ports, the Python SDK publishing and consuming an exactly-once topic
(tests/system/faults/rollout.py), while every API process is restarted in turn (SIGTERM: drain, exit, start) and
then every NATS server (lame-duck mode, then a restart on its store).

    .venv/bin/python bench/rolling_restart.py [--no-nats] [--no-write]

Writes bench/results/rolling_restart.md: errors surfaced to SDK callers, acknowledged publishes lost,
messages delivered twice, and per step the publish latency (p50, p99, max) and the longest gap between two
deliveries. Exits 1 when an error reached a caller, something was lost or something came twice.
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
from tests.fixtures.server import free_port
from tests.system.faults.rollout import Outcome, run

RESULTS = ROOT / "bench" / "results"


async def rollout(nats: bool) -> Outcome:
    root = Path(tempfile.mkdtemp(prefix="qc-rollout-"))
    cluster = Cluster(
        root / "cluster",
        front_port=free_port(),
        api_ports=(free_port(), free_port(), free_port()),
        nats_port=free_base_port(),
        database=f"qc_bench_rollout_{os.getpid()}_{secrets.token_hex(3)}",
        rate_limit_prefix=f"qc:bench:{secrets.token_hex(4)}:",
        demo_user=False,
        log_level="WARNING",
    )
    try:
        await asyncio.to_thread(cluster.start, True)
        await asyncio.to_thread(cluster.set_limits, "publish=100000,consume=100000,admin=10000")
        return await run(cluster, cluster.keys["production"], nats=nats)
    finally:
        await asyncio.to_thread(cluster.stop)
        await drop_database(cluster.database)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-nats", action="store_true", help="restart the API processes only")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    outcome = asyncio.run(rollout(nats=not args.no_nats))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    lines = [
        "# Rolling restarts under load",
        "",
        "Written by `bench/rolling_restart.py` (`make rolling-restart`): what it runs is in its docstring and",
        "tests/system/faults/rollout.py. The Python SDK as shipped (retries, reconnects), 2 publishers, 2 push members.",
        f"Commit {commit}; machine: {platform.platform()}, {os.cpu_count()} CPUs (shared: read the",
        "latencies as this machine's, the counts as the result).",
        "",
        f"- acknowledged publishes: {outcome.published}; delivered: {outcome.delivered}",
        f"- errors surfaced to SDK publish callers: **{len(outcome.publish_errors)}**"
        + (f" (first: {outcome.publish_errors[0]})" if outcome.publish_errors else ""),
        f'- errors reported to the consumers\' `on("error")`: **{len(outcome.consumer_errors)}**'
        + (f" (first: {outcome.consumer_errors[0]})" if outcome.consumer_errors else ""),
        f"- acknowledged publishes never delivered: **{len(outcome.lost)}**",
        f"- messages delivered more than once (exactly-once topic): **{len(outcome.duplicates)}**"
        + (f" {outcome.duplicate_deliveries}" if outcome.duplicates else ""),
        "",
        "| step | seconds | publishes | p50 ms | p99 ms | max ms | deliveries | longest delivery gap ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in outcome.phases:
        lines.append(
            f"| {p['phase']} | {p['seconds']} | {p['publishes']} | {p['p50_ms']} | {p['p99_ms']} | "
            f"{p['max_ms']} | {p['deliveries']} | {p['longest_gap_ms']} |"
        )
    print("\n".join(lines))
    if not args.no_write:
        (RESULTS / "rolling_restart.md").write_text("\n".join(lines) + "\n")
    return 0 if outcome.ok and not outcome.consumer_errors else 1


if __name__ == "__main__":
    sys.exit(main())
