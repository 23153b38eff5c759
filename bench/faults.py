"""Fault runs, longer than tests/system/faults/test_short_faults.py: for each fault and deployment, ``--runs`` runs of
the recorded load (tests/system/faults/load.py: single and batch publishers, two WebSocket and two pull members on an
exactly-once topic) with the fault injected ``--repeat`` times, ``--between`` seconds of load apart; after
each run the consumers drain both groups, every partition is read in full and the history is checked
(tests/system/faults/history.py) for lost writes, duplicates, reordering, nonmonotonic polls, poll skips, partial
batches, acked-then-redelivered messages, two owners, unseen and never-redelivered messages.

Faults: ``sigkill`` (SIGKILL of the API process, restart), ``sigstop`` (SIGSTOP for longer than the groups'
sessionTimeout, then SIGCONT), ``mixed`` (the two by turns); on the JetStream deployment only (the
cluster's nodes on addresses and in cgroups of their own, tests/system/faults/nats_faults.py): ``nats-pause``
(SIGSTOP of the leading node past an election), ``nats-kill`` (SIGKILL, restart), ``nats-partition`` (the
leading node cut from the other two), ``nats-bridge`` (the two others cut from each other), ``api-nats-cut``
(the API process cut from every node), ``nats-disk`` (a follower's last message block truncated, or a bit
flipped, while it is stopped), ``nats-mixed`` (pause, partition, cut, kill, bridge by turns); on the
deployments with limits in Redis (each run starts a ``redis-server`` of its own, tests/system/faults/redis_faults.py):
``redis-pause`` (SIGSTOP of Redis for 8 s), ``redis-kill`` (SIGKILL, 8 s down, started again empty).

Deployments: ``embedded`` (SQLite metadata, local log engine), ``postgres`` (Postgres metadata, Redis
limits, local log engine), ``jetstream`` (Postgres metadata, Redis limits, the JetStream engine on a fresh
3-node NATS cluster).

    .venv/bin/python bench/faults.py [--faults sigkill,sigstop,mixed] [--deployments embedded,postgres,jetstream]
                                     [--runs 3] [--repeat 4] [--between 4] [--no-write]

Writes bench/results/faults.md and faults.json (one row per fault × deployment; a run replaces the rows of
its faults and deployments, the others are kept) unless ``--no-write``; the history of a run
with an anomaly is kept under bench/results/faults-histories/. Exits 1 on any anomaly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.redis import RedisServer
from tests.fixtures.server import free_port, server_env
from tests.system.faults import nats_faults, redis_faults
from tests.system.faults.history import KINDS, Recorder
from tests.system.faults.load import SIGKILL, SIGSTOP, Fault, Target, prepare_server, run
from tests.system.faults.network import Links

RESULTS = ROOT / "bench" / "results"
FAULTS = {
    "sigkill": [SIGKILL],
    "sigstop": [SIGSTOP],
    "mixed": [SIGKILL, SIGSTOP],
    # The JetStream deployment's cluster and links (tests/system/faults/nats_faults.py): only there.
    "nats-pause": [nats_faults.NATS_PAUSE],
    "nats-kill": [nats_faults.NATS_KILL],
    "nats-partition": [nats_faults.NATS_ISOLATE],
    "nats-bridge": [nats_faults.NATS_BRIDGE],
    "api-nats-cut": [nats_faults.API_CUT],
    "nats-disk": [nats_faults.NATS_TRUNCATE, nats_faults.NATS_BITFLIP],
    "nats-mixed": [
        nats_faults.NATS_PAUSE,
        nats_faults.NATS_ISOLATE,
        nats_faults.API_CUT,
        nats_faults.NATS_KILL,
        nats_faults.NATS_BRIDGE,
    ],
    # The limits store (a Redis of the run's own): postgres and jetstream deployments.
    "redis-pause": [redis_faults.REDIS_PAUSE],
    "redis-kill": [redis_faults.REDIS_KILL],
}
JETSTREAM_ONLY = {name for name in FAULTS if name.startswith(("nats-", "api-nats"))}
WITH_REDIS = {"redis-pause", "redis-kill"}  # not the embedded deployment: its limits are in the process
DEPLOYMENTS = ("embedded", "postgres", "jetstream")


@contextlib.contextmanager
def deployment(kind: str) -> Iterator[tuple[dict[str, str], Target]]:
    """The env of a fresh deployment of ``kind`` (its database and NATS cluster removed afterwards), and
    the fault target without its server (the JetStream one: its cluster on addresses and cgroups of its own,
    and the links between them)."""
    if kind == "embedded":
        yield {}, Target()
        return
    name = f"qc_faults_{secrets.token_hex(4)}"
    asyncio.run(create_database(name))
    root = Path(tempfile.mkdtemp(prefix="qc-faults-nats-"))
    redis = RedisServer(free_port(), root)  # its own: a Redis fault touches nothing else on the machine
    redis.start()
    env = {
        "QUEUECORE_DATABASE_URL": database_url(name),
        "QUEUECORE_REDIS_URL": redis.url,
        "QUEUECORE_RATE_LIMIT_PREFIX": f"qc:faults:{name}:",
    }
    links = Links() if kind == "jetstream" else None
    cluster = None
    target = Target(redis=redis)
    try:
        if links is not None:
            cluster, nodes, api = nats_faults.start_cluster(root, links)
            target = Target(redis=redis, cluster=cluster, links=links, api=api, nodes=nodes)
            env |= {"QUEUECORE_LOG_ENGINE": "jetstream", "QUEUECORE_NATS_URL": cluster.url}
        yield env, target
    finally:
        if cluster is not None:
            cluster.stop()
        if links is not None:
            links.close()
        redis.kill()
        shutil.rmtree(root, ignore_errors=True)
        asyncio.run(drop_database(name))


def one_run(fault: str, kind: str, repeat: int, between: float) -> dict[str, Any]:
    """One run: a fresh deployment, the load with the fault ``repeat`` times, the check."""
    steps: list[Fault] = [FAULTS[fault][i % len(FAULTS[fault])] for i in range(repeat)]
    # JetStream: recover_after (10 s) + a recovery interval (2 s) + margin before the final reads.
    settle = 14.0 if kind == "jetstream" else 0.0
    tmp = Path(tempfile.mkdtemp(prefix="qc-faults-"))
    try:
        with deployment(kind) as (extra, target):
            env = server_env(tmp / "data", **extra)
            server, key = prepare_server(env, tmp, target.api.cgroup if target.api is not None else None)
            target.server = server
            server.start()
            recorder = Recorder(tmp / "history.jsonl")
            try:
                outcome = asyncio.run(
                    run(
                        target, key, recorder, steps, between=between, drain_seconds=60, settle_seconds=settle
                    )
                )
            finally:
                server.stop()
        kept = None
        if not outcome.report.ok or any(lag != 0 for lag in outcome.lags.values()):
            kept = RESULTS / "faults-histories" / f"{fault}-{kind}-{secrets.token_hex(3)}.jsonl"
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(tmp / "history.jsonl", kept)
        return {
            "operations": outcome.report.operations,
            "counts": outcome.report.counts(),
            "undrained": {g: lag for g, lag in outcome.lags.items() if lag != 0},
            "summary": outcome.report.summary(5),
            # What each fault saw (elections, health during a Redis fault): printed with the run's line.
            "notes": outcome.notes,
            "kept": str(kept.relative_to(ROOT)) if kept else None,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """bench/results/faults.json and .md: this run's rows replace those of the same fault and deployment,
    the other committed rows are kept (each names the commit and command it came from)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    command = (
        f"bench/faults.py --faults {args.faults} --deployments {args.deployments} --runs {args.runs} "
        f"--repeat {args.repeat} --between {args.between:g}"
    )
    for row in rows:
        row |= {"commit": commit, "command": command}
    path = RESULTS / "faults.json"
    committed = json.loads(path.read_text()) if path.exists() else []
    ours = {(r["fault"], r["deployment"]) for r in rows}
    merged = [r for r in committed if (r["fault"], r["deployment"]) not in ours] + rows
    merged.sort(key=lambda r: (list(FAULTS).index(r["fault"]), DEPLOYMENTS.index(r["deployment"])))
    path.write_text(json.dumps(merged, indent=1) + "\n")
    lines = [
        "# Fault runs: histories checked for anomalies",
        "",
        "Written by `bench/faults.py` (`make faults`); what is recorded and checked: docs/reliability.md,",
        '"Histories and the checker". Each run: a fresh deployment, the recorded load with the fault injected',
        "`--repeat` times, `--between` seconds of load apart, then a drain and a full read of every partition.",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs.",
        "",
        "| fault | deployment | runs | operations | anomalies | by kind | not drained | commit, command |",
        "|---|---|---:|---:|---:|---|---|---|",
    ]
    for row in merged:
        kinds = ", ".join(f"{k} {n}" for k, n in row["counts"].items() if n) or "—"
        lines.append(
            f"| {row['fault']} | {row['deployment']} | {row['runs']} | {row['operations']} | "
            f"{sum(row['counts'].values())} | {kinds} | {row['undrained'] or '—'} | "
            f"{row['commit']}, `{row['command']}` |"
        )
    details = [f"- {row['fault']} × {row['deployment']}: {s}" for row in merged for s in row["findings"]]
    if details:
        lines += ["", "Findings (first anomalies of each run, and the kept history):", "", *details]
    (RESULTS / "faults.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default="sigkill,sigstop,mixed", help=f"of {', '.join(FAULTS)}")
    parser.add_argument(
        "--deployments", default="embedded,postgres,jetstream", help=f"of {', '.join(DEPLOYMENTS)}"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=4, help="faults per run")
    parser.add_argument("--between", type=float, default=4.0, help="seconds of load before each fault")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    rows = []
    for fault in args.faults.split(","):
        for kind in args.deployments.split(","):
            if (fault in JETSTREAM_ONLY and kind != "jetstream") or (
                fault in WITH_REDIS and kind == "embedded"
            ):
                continue
            row: dict[str, Any] = {
                "fault": fault, "deployment": kind, "runs": 0, "operations": 0, "undrained": {}, "findings": [],
                "counts": dict.fromkeys(KINDS, 0),
            }  # fmt: skip
            for n in range(args.runs):
                result = one_run(fault, kind, args.repeat, args.between)
                row["runs"] += 1
                row["operations"] += result["operations"]
                for k, c in result["counts"].items():
                    row["counts"][k] += c
                for g, lag in result["undrained"].items():
                    row["undrained"][g] = row["undrained"].get(g, 0) + lag
                if result["kept"]:
                    row["findings"].append(f"run {n + 1}: {result['summary']!r} (history {result['kept']})")
                print(
                    f"{fault} {kind} run {n + 1}: {result['operations']} ops, {result['summary']}", flush=True
                )
                for note in result["notes"]:
                    print(f"  {note}", flush=True)
            rows.append(row)
    if not args.no_write:
        write(rows, args)
    bad = any(sum(r["counts"].values()) or r["undrained"] for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
