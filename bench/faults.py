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
``redis-pause`` (SIGSTOP of Redis for 8 s), ``redis-kill`` (SIGKILL, 8 s down, started again empty),
``redis-slow`` (the API process reaches Redis through a latency proxy, tests/system/faults/latency_proxy.py:
3 s at 0.2 s a round trip, 3 s at 2 s, then fast again; the run's line gives the p99 and maximum time to
answer the publishes, acks and nacks sent meanwhile); on every deployment: ``power-loss`` (every data
directory on a lazy file system, tests/system/faults/lazyfs.py - the API process's, and on JetStream each NATS
node's store; Postgres and Redis stay outside it - then every such process SIGKILLed at once, every write
not fsync'd dropped, all restarted: tests/system/faults/power_faults.py; the run's line says what was dropped),
``power-loss-torn`` (the same loss torn: part of the unsynced writes kept sector by sector, files at one of
the sizes they had, renames and unlinks not yet durable undone past a random point; the line gives the seed);
on JetStream only: ``power-loss-node`` (one NATS node, the one leading the most streams, loses power - SIGKILL
and its unsynced writes dropped - while the rest run on; it restarts and catches up).

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
from tests.system.faults import nats_faults, power_faults, redis_faults
from tests.system.faults.history import KINDS, Recorder
from tests.system.faults.latency_proxy import ProxyThread
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
    "redis-slow": [redis_faults.REDIS_SLOW],
    # Every deployment: its data directories (not Postgres's, not Redis's) on lazy file systems.
    "power-loss": [power_faults.POWER_LOSS],
    # The same, torn: part of the unsynced writes kept sector by sector, renames and unlinks undone.
    "power-loss-torn": [power_faults.POWER_LOSS_TORN],
    # JetStream only: one NATS node (the busiest leader) loses power while the rest run on.
    "power-loss-node": [power_faults.POWER_LOSS_NODE],
}
JETSTREAM_ONLY = {name for name in FAULTS if name.startswith(("nats-", "api-nats"))} | {"power-loss-node"}
WITH_REDIS = {
    "redis-pause",
    "redis-kill",
    "redis-slow",
}  # not the embedded deployment: its limits are in the process
DEPLOYMENTS = ("embedded", "postgres", "jetstream")


@contextlib.contextmanager
def deployment(
    kind: str,
    slow_redis: bool = False,
    lazy_nodes: bool = False,
    nats_sync: str = "always",
    lazy_postgres: bool = False,
) -> Iterator[tuple[dict[str, str], Target]]:
    """The env of a fresh deployment of ``kind`` (its database and NATS cluster removed afterwards), and
    the fault target without its server (the JetStream one: its cluster on addresses and cgroups of its own,
    and the links between them; with ``slow_redis``, Redis reached through a latency proxy; with
    ``lazy_nodes``, each NATS node's store on a lazy file system, in ``target.disks``; with ``lazy_postgres``,
    the metadata in a Postgres of its own on a lazy file system, in ``target.postgres`` and its disk first in
    ``target.disks``)."""
    if kind == "embedded":
        yield {}, Target()
        return
    disks = contextlib.ExitStack()
    name = f"qc_faults_{secrets.token_hex(4)}"
    postgres, pg_disks = None, []
    if lazy_postgres:
        postgres, pg_disk = disks.enter_context(power_faults.lazy_postgres())
        pg_disks = [pg_disk]
        metadata_url = postgres.url
    else:
        asyncio.run(create_database(name))
        metadata_url = database_url(name)
    root = Path(tempfile.mkdtemp(prefix="qc-faults-nats-"))
    redis = RedisServer(free_port(), root)  # its own: a Redis fault touches nothing else on the machine
    redis.start()
    proxy = ProxyThread("127.0.0.1", redis.port) if slow_redis else None
    env = {
        "QUEUECORE_DATABASE_URL": metadata_url,
        "QUEUECORE_REDIS_URL": proxy.url if proxy is not None else redis.url,
        "QUEUECORE_RATE_LIMIT_PREFIX": f"qc:faults:{name}:",
    }
    links = Links() if kind == "jetstream" else None
    cluster = None
    target = Target(redis=redis, redis_proxy=proxy, postgres=postgres, disks=pg_disks)
    try:
        if links is not None:
            stores = [root / f"n{i}" for i in range(3)] if lazy_nodes else []  # NatsCluster's store dirs
            target.disks = pg_disks + disks.enter_context(power_faults.lazy_disks(*stores))
            cluster, nodes, api = nats_faults.start_cluster(root, links, sync_interval=nats_sync)
            target = Target(
                redis=redis,
                redis_proxy=proxy,
                cluster=cluster,
                links=links,
                api=api,
                nodes=nodes,
                disks=target.disks,
                postgres=postgres,
            )
            env |= {"QUEUECORE_LOG_ENGINE": "jetstream", "QUEUECORE_NATS_URL": cluster.url}
        yield env, target
    finally:
        if cluster is not None:
            cluster.stop()
        disks.close()
        if links is not None:
            links.close()
        if proxy is not None:
            proxy.close()
        redis.kill()
        shutil.rmtree(root, ignore_errors=True)
        if postgres is None:
            asyncio.run(drop_database(name))


def one_run(fault: str, kind: str, repeat: int, between: float, nats_sync: str = "always") -> dict[str, Any]:
    """One run: a fresh deployment, the load with the fault ``repeat`` times, the check."""
    steps: list[Fault] = [FAULTS[fault][i % len(FAULTS[fault])] for i in range(repeat)]
    # JetStream: recover_after (10 s) + a recovery interval (2 s) + margin before the final reads.
    settle = 14.0 if kind == "jetstream" else 0.0
    tmp = Path(tempfile.mkdtemp(prefix="qc-faults-"))
    power = fault.startswith("power-loss")
    lazy_api = fault in ("power-loss", "power-loss-torn")  # a node's loss leaves the API process's disk
    try:
        with (
            deployment(
                kind,
                fault == "redis-slow",
                lazy_nodes=power,
                nats_sync=nats_sync,
                lazy_postgres=lazy_api,
            ) as (extra, target),
            power_faults.lazy_disks(*([tmp / "data"] if lazy_api else [])) as api_disks,
        ):
            target.disks = api_disks + target.disks
            if fault == "power-loss-torn":  # small segments: rolls (new files, sealed indexes) under the load
                extra = {**extra, "QUEUECORE_LOG__SEGMENT_BYTES": str(64 * 1024)}
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
        if fault == "redis-slow":
            took = redis_faults.latencies_during(outcome.history, redis_faults.REDIS_SLOW.name)
            outcome.notes.append(
                f"while slow: {len(took)} publishes/acks/nacks, p99 {redis_faults.p99(took):.3f} s, "
                f"max {max(took, default=0):.3f} s"
            )
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


def injected(row: dict[str, Any]) -> int:
    """How many faults a row's runs injected (rows from before the count was kept: runs × their command's
    ``--repeat``)."""
    if "faults" in row:
        return int(row["faults"])
    repeat = row["command"].split("--repeat ", 1)[1].split()[0]
    return int(row["runs"]) * int(repeat)


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
        row |= {"commit": commit, "command": command, "faults": row["runs"] * args.repeat}
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
        "| fault | deployment | runs | faults | operations | anomalies | by kind | not drained | commit, command |",
        "|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for row in merged:
        kinds = ", ".join(f"{k} {n}" for k, n in row["counts"].items() if n) or "—"
        lines.append(
            f"| {row['fault']} | {row['deployment']} | {row['runs']} | {injected(row)} | {row['operations']} | "
            f"{sum(row['counts'].values())} | {kinds} | {row['undrained'] or '—'} | "
            f"{row['commit']}, `{row['command']}` |"
        )
    totals = {kind: sum(injected(r) for r in merged if r["deployment"] == kind) for kind in DEPLOYMENTS}
    lines += [
        "",
        "Faults injected in all, per deployment: "
        + ", ".join(f"{kind} {n}" for kind, n in totals.items())
        + " (each run injects its `--repeat` faults; a `mixed` run's are of several kinds).",
    ]
    details = [f"- {row['fault']} × {row['deployment']}: {s}" for row in merged for s in row["findings"]]
    if details:
        lines += ["", "Findings (first anomalies of each run, and the kept history):", "", *details]
    notes = [f"- {row['fault']} × {row['deployment']}, {s}" for row in merged for s in row.get("notes", [])]
    if notes:
        lines += [
            "",
            "What the faults saw (health and time to answer while Redis was slow; what a power loss dropped):",
            "",
            *notes,
        ]
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
    parser.add_argument(
        "--nats-sync-interval",
        default="always",
        help="the NATS nodes' sync_interval; anything but 'always' (the product's) is a control run, never "
        "written to the results: e.g. 2m (NATS's default) under power-loss",
    )
    args = parser.parse_args()
    if args.nats_sync_interval != "always":
        args.no_write = True
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
                result = one_run(fault, kind, args.repeat, args.between, args.nats_sync_interval)
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
                if fault in (
                    "redis-slow",
                    "power-loss",
                    "power-loss-torn",
                    "power-loss-node",
                ):  # what the fault saw: kept with the row
                    row.setdefault("notes", []).append(f"run {n + 1}: " + " | ".join(result["notes"]))
            rows.append(row)
    if not args.no_write:
        write(rows, args)
    bad = any(sum(r["counts"].values()) or r["undrained"] for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
