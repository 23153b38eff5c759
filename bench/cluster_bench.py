"""The cluster against one machine (#28): single publishes on the JetStream deployment beside the embedded
engine, in one run on one box, with the CPU each process spent per publish; idempotent publishes; a
256-partition topic created and deleted; cross-node publish→deliver latency at a quarter of the measured
capacity beside JetStream's own publish→pull.

* **single**: wrk, ``--connections`` connections of single 200-byte publishes for ``--seconds``, straight
  at one API process, to a 1-partition and a 3-partition topic. *Embedded* is ``make run``'s shape (local
  engine, fsync, SQLite, in-process limits); *cluster* is ``make cluster``'s with one API process (3
  nats-server nodes with ``sync_interval: always``, R=3 topics, Postgres, Redis). CPU per publish is read
  from ``/proc`` (utime + stime) of the API process and of the three nats-servers, summed, over each run.
* **idempotent**: the same on the cluster's 1-partition topic with a fresh ``Idempotency-Key`` per
  request (wrk's Lua counter), beside the plain figure of the same round.
* **create**: ``POST /v1/topics`` of 256 partitions × 3 replicas and its ``DELETE``, wall time.
* **latency**: publishes on API process 1 at 25 % of the round's measured single-publish capacity, one
  WebSocket consumer on API process 2 (every delivery crosses nodes through NATS); ``js.publish`` and a
  JetStream pull consumer on an R=3 stream of the same cluster beside it, at the same rate.

``--baseline DIR`` runs every shape a second time in each round with the API processes running the code
of another checkout (``PYTHONPATH=DIR``), e.g. ``git worktree add /tmp/base <commit>``: before and after,
side by side, on the same servers.

    .venv/bin/python bench/cluster_bench.py [--rounds 3] [--seconds 8] [--baseline /tmp/base]

Writes bench/results/cluster.md and cluster.json. Ports 24111-24313 (NATS), 24400-24403 (front, API).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from bench_server import BenchServer
from scaleout_bench import js_latency
from support import machine, p50_p99_ms, payload, push_latency, write_results, wrk

from infra.cluster import Cluster, drop_database

NATS_PORT, FRONT_PORT = 24111, 24400
LIMITS = "publish=10000000,consume=10000000,admin=100000"
TICK = os.sysconf("SC_CLK_TCK")
SINGLE = json.dumps({"data": payload()}, separators=(",", ":"))
# wrk: a fresh Idempotency-Key per request (each thread numbers its own, under its own prefix).
IDEMPOTENT_LUA = """
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("prefix", threads .. "-" .. os.time())
end
local n = 0
request = function()
  n = n + 1
  wrk.headers["Idempotency-Key"] = prefix .. "-" .. n
  return wrk.format(nil)
end
"""


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes (their threads included), in seconds."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def measured(run: Callable[[], dict[str, float]], api: list[int], nats: list[int]) -> dict[str, float]:
    """``run()`` (a wrk run) with the CPU ms per request of the API process(es) and of NATS."""
    api0, nats0 = cpu_seconds(api), cpu_seconds(nats)
    got = run()
    api1, nats1 = cpu_seconds(api), cpu_seconds(nats)
    requests = got["rps"] * got["seconds"]
    got["api_cpu_ms"] = 1000 * (api1 - api0) / requests
    if nats:
        got["nats_cpu_ms"] = 1000 * (nats1 - nats0) / requests
    return got


def single(url: str, key: str, topic: str, args: argparse.Namespace, lua: str = "") -> dict[str, float]:
    got = wrk(f"{url}/v1/topics/{topic}/messages", key, SINGLE, args.connections, args.seconds, extra=lua)
    got["seconds"] = args.seconds
    return got


def create_topic(url: str, key: str, partitions: int, replicas: int | None) -> tuple[str, float]:
    name = f"bench-{secrets.token_hex(4)}"
    body: dict[str, Any] = {"name": name, "partitions": partitions}
    if replicas is not None:
        body["replicas"] = replicas
    started = time.perf_counter()
    answer = httpx.post(
        f"{url}/v1/topics", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120
    )
    answer.raise_for_status()
    return name, time.perf_counter() - started


def delete_topic(url: str, key: str, name: str) -> float:
    started = time.perf_counter()
    answer = httpx.delete(f"{url}/v1/topics/{name}", headers={"Authorization": f"Bearer {key}"}, timeout=120)
    answer.raise_for_status()
    return time.perf_counter() - started


class Deployments:
    """The embedded server and the cluster, for one code base (``code``: a checkout's path, or None)."""

    def __init__(self, tag: str, code: str | None, api_ports: tuple[int, ...]) -> None:
        self.tag = tag
        extra = {"QUEUECORE_USAGE_METERING": "false"}
        self.embedded = BenchServer(f"cluster-bench-{tag}", limits=LIMITS)
        if code:
            self.embedded.env["PYTHONPATH"] = code
        self.cluster = Cluster(
            Path(tempfile.mkdtemp(prefix=f"qc-cluster-{tag}-")),
            front_port=api_ports[0],
            api_ports=api_ports[1:],
            nats_port=NATS_PORT,
            database=f"qc_bench_cluster_{tag}_{os.getpid()}",
            rate_limit_prefix=f"qc:bench:{tag}:{os.getpid()}:",
            demo_user=False,
            log_level="WARNING",
            extra_env={**extra, **({"PYTHONPATH": code} if code else {})},
        )


def run(args: argparse.Namespace) -> dict[str, Any]:
    sides = [("new", None)] + ([("base", args.baseline)] if args.baseline else [])
    raw: dict[str, list[Any]] = {}

    def keep(name: str, value: Any) -> None:
        raw.setdefault(name, []).append(value)
        print(f"  {name}: {value}", flush=True)

    for r in range(args.rounds):
        print(f"round {r + 1}", flush=True)
        keep("load_average", os.getloadavg()[0])
        for tag, code in sides:
            # One deployment at a time (the box has 2 cores): the embedded server, then the cluster.
            d = Deployments(tag, code, (FRONT_PORT, FRONT_PORT + 1, FRONT_PORT + 2))
            try:
                d.embedded.start()
                api = [d.embedded.process.pid] if d.embedded.process else []
                for partitions in (1, 3):
                    topic, _ = create_topic(d.embedded.url, d.embedded.key, partitions, None)
                    keep(
                        f"{tag}_embedded_{partitions}p",
                        measured(partial(single, d.embedded.url, d.embedded.key, topic, args), api, []),
                    )
            finally:
                d.embedded.stop()
            cluster = d.cluster
            try:
                cluster.start(fresh=True)
                cluster.set_limits(LIMITS)
                assert cluster.nats is not None
                nats = [n.process.pid for n in cluster.nats.nodes if n.process is not None]
                key, one_api = cluster.keys["production"], cluster.api_urls[0]
                api = [cluster.api[0].pid]
                # The second API process serves only the latency run's consumer.
                for partitions in (1, 3):
                    topic, _ = create_topic(one_api, key, partitions, 3)
                    keep(
                        f"{tag}_cluster_{partitions}p",
                        measured(partial(single, one_api, key, topic, args), api, nats),
                    )
                    if partitions == 1:
                        keep(
                            f"{tag}_cluster_idempotent",
                            measured(partial(single, one_api, key, topic, args, IDEMPOTENT_LUA), api, nats),
                        )
                name, created = create_topic(one_api, key, 256, 3)
                keep(f"{tag}_create_256", {"create_s": created, "delete_s": delete_topic(one_api, key, name)})
                capacity = raw[f"{tag}_cluster_1p"][-1]["rps"]
                rate = max(10, int(capacity * 0.25))
                keep(f"{tag}_latency", asyncio.run(latency(cluster, key, rate, args.latency_seconds)))
            finally:
                cluster.stop()
                asyncio.run(drop_database(cluster.postgres_admin, cluster.database))
                shutil.rmtree(cluster.root, ignore_errors=True)
    return {
        "run": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "args": vars(args),
        "raw": raw,
        "median": summarise(raw, [tag for tag, _ in sides]),
    }


async def latency(cluster: Cluster, key: str, rate: int, seconds: float) -> dict[str, float]:
    """Publish on API process 1, consume on API process 2; JetStream's publish→pull beside it."""
    assert cluster.nats is not None
    topic, _ = create_topic(cluster.api_urls[0], key, 1, 3)
    delivered, _ = await push_latency(
        key,
        topic,
        seconds,
        rate,
        payload,
        publish_port=cluster.api_ports[0],
        consume_port=cluster.api_ports[1],
    )
    qc50, qc99 = p50_p99_ms(delivered)
    js50, js99 = await js_latency(cluster.nats.url, seconds, rate)
    return {"rate": rate, "p50_ms": qc50, "p99_ms": qc99, "jetstream_p50_ms": js50, "jetstream_p99_ms": js99}


def summarise(raw: dict[str, list[Any]], tags: list[str]) -> dict[str, Any]:
    def med(key: str, field: str) -> float:
        return float(statistics.median(x[field] for x in raw[key]))

    out: dict[str, Any] = {}
    for tag in tags:
        side: dict[str, Any] = {}
        for shape in ("embedded_1p", "embedded_3p", "cluster_1p", "cluster_3p", "cluster_idempotent"):
            fields = ["rps", "p50_ms", "p99_ms", "api_cpu_ms"] + (
                ["nats_cpu_ms"] if "cluster" in shape else []
            )
            side[shape] = {f: med(f"{tag}_{shape}", f) for f in fields}
        for p in ("1p", "3p"):
            ratios = [
                c["rps"] / e["rps"]
                for c, e in zip(raw[f"{tag}_cluster_{p}"], raw[f"{tag}_embedded_{p}"], strict=True)
            ]
            side[f"cluster_vs_embedded_{p}"] = float(statistics.median(ratios))
        side["idempotent_cost"] = float(
            statistics.median(
                p["rps"] / i["rps"]
                for p, i in zip(raw[f"{tag}_cluster_1p"], raw[f"{tag}_cluster_idempotent"], strict=True)
            )
        )
        side["create_256"] = {f: med(f"{tag}_create_256", f) for f in ("create_s", "delete_s")}
        side["latency"] = {
            f: med(f"{tag}_latency", f)
            for f in ("rate", "p50_ms", "p99_ms", "jetstream_p50_ms", "jetstream_p99_ms")
        }
        out[tag] = side
    return out


def write(report: dict[str, Any]) -> None:
    m, args = report["median"], report["args"]
    new = m["new"]
    base = m.get("base")

    def row(label: str, shape: str) -> str:
        cells = []
        for side in [new, base] if base else [new]:
            s = side[shape]
            nats = f"{s['nats_cpu_ms']:.3f}" if "nats_cpu_ms" in s else "–"
            cells.append(
                f"{s['rps']:,.0f} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} | {s['api_cpu_ms']:.3f} | {nats}"
            )
        return f"| {label} | " + " | ".join(cells) + " |"

    head = "| shape | req/s | p50 ms | p99 ms | API CPU ms/req | NATS CPU ms/req |"
    rule = "|---|---:|---:|---:|---:|---:|"
    if base:
        head += " before: req/s | p50 ms | p99 ms | API CPU ms/req | NATS CPU ms/req |"
        rule += "---:|---:|---:|---:|---:|"
    lines = [
        "# The cluster against one machine (#28)",
        "",
        f"`.venv/bin/python bench/cluster_bench.py --rounds {args['rounds']} --seconds {args['seconds']}"
        + (" --baseline <checkout of the code before>`" if base else "`"),
        f"({report['run']}, {report['machine']}); medians of {args['rounds']} rounds; every shape of a round",
        "runs on the same box one after the other, nothing else running. 1-minute load average at each",
        f"round's start: {', '.join(f'{x:.1f}' for x in report['raw']['load_average'])}.",
        "",
        f"## Single publishes: {args['connections']} connections (wrk), {args['seconds']} s, one API process",
        "",
        head,
        rule,
        row("embedded, 1 partition", "embedded_1p"),
        row("embedded, 3 partitions", "embedded_3p"),
        row("cluster R=3, 1 partition", "cluster_1p"),
        row("cluster R=3, 3 partitions", "cluster_3p"),
        row("cluster R=3, 1 partition, Idempotency-Key", "cluster_idempotent"),
        "",
        "| ratio (median of per-round ratios) | now |" + (" before |" if base else ""),
        "|---|---:|" + ("---:|" if base else ""),
    ]
    for label, field in (
        ("cluster ÷ embedded, single publish, 1 partition", "cluster_vs_embedded_1p"),
        ("cluster ÷ embedded, single publish, 3 partitions", "cluster_vs_embedded_3p"),
        ("plain ÷ idempotent publish rate on the cluster (cost of a key)", "idempotent_cost"),
    ):
        lines.append(f"| {label} | {new[field]:.2f}× |" + (f" {base[field]:.2f}× |" if base else ""))
    if base:
        lines += [
            "",
            (
                "NATS CPU per single publish, now ÷ before: "
                f"{new['cluster_1p']['nats_cpu_ms'] / base['cluster_1p']['nats_cpu_ms']:.2f} (1 partition), "
                f"{new['cluster_3p']['nats_cpu_ms'] / base['cluster_3p']['nats_cpu_ms']:.2f} (3 partitions)."
            ),
        ]
    lines += [
        "",
        "## A topic of 256 partitions × 3 replicas",
        "",
        "| | create s | delete s |",
        "|---|---:|---:|",
        f"| now | {new['create_256']['create_s']:.2f} | {new['create_256']['delete_s']:.2f} |",
    ]
    if base:
        lines.append(
            f"| before | {base['create_256']['create_s']:.2f} | {base['create_256']['delete_s']:.2f} |"
        )
    lat = new["latency"]
    lines += [
        "",
        f"## Publish→deliver across two API processes at 25 % of capacity ({lat['rate']:,.0f} msgs/s)",
        "",
        "| | QueueCore p50 ms | p99 ms | JetStream publish→pull p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
        f"| now | {lat['p50_ms']:.2f} | {lat['p99_ms']:.2f} | {lat['jetstream_p50_ms']:.2f} | {lat['jetstream_p99_ms']:.2f} |",
    ]
    if base:
        b = base["latency"]
        lines.append(
            f"| before ({b['rate']:,.0f} msgs/s) | {b['p50_ms']:.2f} | {b['p99_ms']:.2f} | "
            f"{b['jetstream_p50_ms']:.2f} | {b['jetstream_p99_ms']:.2f} |"
        )
    lines += [
        "",
        "Raw per-round figures: `cluster.json`. Analysis: `bench/README.md` (The cluster against one machine).",
    ]
    write_results("cluster", report, "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=8, help="each wrk run")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--baseline", default="", help="a checkout whose code the 'before' side runs")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install -y wrk (make bench does it)")
    write(run(args))


if __name__ == "__main__":
    main()
