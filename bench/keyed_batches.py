"""Paired A/B of keyed batch publishes: batches of 1,000 messages each carrying an ``idempotencyKey`` (what
every SDK's batch publish and Spark's writer send), a git revision against the working tree, on the local
engine and on a 3-node JetStream cluster.

    .venv/bin/python bench/keyed_batches.py [--rev HEAD] [--rounds 5] [--batches 60] [--engines local,jetstream]

Each side is one ``queuecore-server`` (the revision served from a temporary ``git worktree`` through
``PYTHONPATH``), with a NATS cluster of its own on JetStream (the two never share a bucket or a stream).
A round sends ``--batches`` new batches to each side in turn (the order alternates), from two client threads
(two requests in flight, as a Spark task's lanes), with the shape of Spark's items: ``data`` (200 bytes),
``idempotencyKey``, ``partition`` (4 partitions). Each side's figures are msgs/s, the API process's CPU per
message and, on JetStream, its cluster's CPU per message. Medians of the rounds, and each round's own ratio.
Writes bench/results/keyed_batches.md and .json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ab_latency import cpu_seconds, worktree
from bench_server import BenchServer
from support import machine, write_results

from infra.nats_cluster import NatsCluster
from tests.fixtures.nats import free_base_port

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
NOTE = "x" * 104


def data(row: int) -> str:
    """A 200-byte message (the Spark benchmark's)."""
    return (
        f'{{"type":"order.created","orderId":"ord_{row:08d}","amount":9900,"currency":"usd","note":"{NOTE}"}}'
    )


class Side:
    """One server (and its NATS cluster on JetStream) serving one tree."""

    def __init__(self, name: str, engine: str, env: dict[str, str], tmp: Path) -> None:
        self.name = name
        self.cluster: NatsCluster | None = None
        self.server = BenchServer(f"keyed-{engine}")
        self.server.env.update(env)
        if engine == "jetstream":
            self.cluster = NatsCluster(
                tmp / f"nats-{len(name)}-{time.monotonic_ns()}", base_port=free_base_port()
            )
            self.cluster.start()
            self.server.env.update(
                {"QUEUECORE_LOG_ENGINE": "jetstream", "QUEUECORE_NATS_URL": self.cluster.url}
            )
        self.server.start()
        self.rounds = 0

    def cluster_cpu(self) -> float:
        if self.cluster is None:
            return 0.0
        return sum(cpu_seconds(node.process.pid) for node in self.cluster.nodes if node.process is not None)

    def round(self, batches: int) -> dict[str, float]:
        """Publish ``batches`` batches of 1,000 to a new topic: msgs/s and CPU µs per message."""
        self.rounds += 1
        topic = f"keyed-{self.rounds}"
        headers = {"Authorization": f"Bearer {self.server.key}", "Content-Type": "application/json"}
        with httpx.Client(base_url=self.server.url, headers=headers, timeout=120) as http:
            http.post("/v1/topics", json={"name": topic, "partitions": PARTITIONS}).raise_for_status()
        bodies = [_body(topic, b) for b in range(batches)]
        assert self.server.process is not None
        api, nats, started = cpu_seconds(self.server.process.pid), self.cluster_cpu(), time.perf_counter()
        errors: list[str] = []

        def lane(first: int) -> None:
            with httpx.Client(base_url=self.server.url, headers=headers, timeout=120) as http:
                for b in range(first, batches, 2):
                    answer = http.post(f"/v1/topics/{topic}/messages/batch", content=bodies[b])
                    if answer.status_code != 201:
                        errors.append(answer.text[:300])

        lanes = [threading.Thread(target=lane, args=(k,)) for k in range(2)]
        for t in lanes:
            t.start()
        for t in lanes:
            t.join()
        seconds = time.perf_counter() - started
        if errors:
            raise RuntimeError(f"{self.name}: {errors[0]}")
        n = batches * 1000
        return {
            "msgs_per_s": n / seconds,
            "api_us": (cpu_seconds(self.server.process.pid) - api) / n * 1e6,
            "nats_us": (self.cluster_cpu() - nats) / n * 1e6,
        }

    def stop(self) -> None:
        self.server.stop()
        if self.cluster is not None:
            self.cluster.stop()


def _body(topic: str, batch: int) -> bytes:
    """A batch as Spark's writer sends it: one partition, keys ``spark:<write>:0:<task>:<row>``."""
    partition = batch % PARTITIONS
    rows = range(batch * 1000, batch * 1000 + 1000)
    items = [
        f'{{"data":{data(row)},"idempotencyKey":"spark:{topic}:0:{partition}:{row}","partition":{partition}}}'
        for row in rows
    ]
    return ('{"messages":[' + ",".join(items) + "]}").encode()


def run_engine(engine: str, args: argparse.Namespace, tree: Path, tmp: Path) -> dict[str, Any]:
    names = [args.rev, "working tree"]
    sides = [Side(args.rev, engine, {"PYTHONPATH": str(tree)}, tmp), Side("working tree", engine, {}, tmp)]
    rounds: list[dict[str, dict[str, float]]] = []
    try:
        for side in sides:
            side.round(max(4, args.batches // 10))  # warm-up, not counted
        for r in range(args.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            figures = {side.name: side.round(args.batches) for side in order}
            rounds.append(figures)
            print(
                f"{engine} round {r + 1}: "
                + ", ".join(
                    f"{n} {figures[n]['msgs_per_s']:,.0f} msgs/s api {figures[n]['api_us']:.1f} µs"
                    f" nats {figures[n]['nats_us']:.1f} µs"
                    for n in names
                ),
                flush=True,
            )
    finally:
        for side in sides:
            side.stop()

    def median(name: str, what: str) -> float:
        return statistics.median(r[name][what] for r in rounds)

    return {
        "rounds": rounds,
        "medians": {n: {w: median(n, w) for w in ("msgs_per_s", "api_us", "nats_us")} for n in names},
        "per_round_ratio": statistics.median(
            r["working tree"]["msgs_per_s"] / r[args.rev]["msgs_per_s"] for r in rounds
        ),
    }


def render(result: dict[str, Any]) -> str:
    rev = result["rev"]
    lines = [
        "# Keyed batch publishes: a revision against the working tree",
        "",
        (
            f"Produced by `bench/keyed_batches.py` on {result['machine']}, {result['date']}: batches of 1,000 "
            f"messages of 200 bytes, each with an `idempotencyKey` and a `partition` (Spark's items; every SDK's "
            f"batch items carry a key too), {result['batches']} batches a round from two client threads, "
            f"{result['rounds_asked']} rounds; `{rev}` and the working tree (`{result['tree']}`) served side by "
            "side, each with a NATS cluster of its own on JetStream, taking turns. CPU is per message published: "
            "the API process's, and the three NATS servers' together. The machine is shared by the client, the "
            "servers and (on JetStream) six NATS servers: compare the ratios, not the absolute figures."
        ),
        "",
        "| engine | tree | msgs/s | API CPU µs/msg | NATS CPU µs/msg |",
        "|---|---|---:|---:|---:|",
    ]
    for engine, figures in result["engines"].items():
        for name, m in figures["medians"].items():
            nats = f"{m['nats_us']:.1f}" if engine == "jetstream" else ""
            lines.append(f"| {engine} | {name} | {m['msgs_per_s']:,.0f} | {m['api_us']:.1f} | {nats} |")
        new, old = figures["medians"]["working tree"], figures["medians"][rev]
        lines.append(
            f"| {engine} | **ratio** | **{new['msgs_per_s'] / old['msgs_per_s']:.2f}** (per round "
            f"{figures['per_round_ratio']:.2f}) | {new['api_us'] / old['api_us']:.2f} | "
            + (f"{new['nats_us'] / old['nats_us']:.2f} |" if engine == "jetstream" else "|")
        )
    lines += [
        "",
        "Every round (msgs/s; API µs/msg):",
        "",
        "| engine | round | " + f"{rev} | working tree |",
        "|---|---:|---:|---:|",
    ]
    for engine, figures in result["engines"].items():
        for i, r in enumerate(figures["rounds"], 1):
            lines.append(
                f"| {engine} | {i} | "
                + " | ".join(
                    f"{r[n]['msgs_per_s']:,.0f}; {r[n]['api_us']:.1f}" for n in (rev, "working tree")
                )
                + " |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="HEAD", help="the revision to compare against (default HEAD)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=60, help="batches of 1,000 per side and round")
    parser.add_argument("--engines", default="local,jetstream")
    args = parser.parse_args()
    tree = worktree(args.rev)
    described = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    try:
        with tempfile.TemporaryDirectory(prefix="qc-keyed-") as tmp:
            engines = {e: run_engine(e, args, tree, Path(tmp)) for e in args.engines.split(",")}
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    result = {
        "rev": args.rev,
        "tree": described,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "batches": args.batches,
        "rounds_asked": args.rounds,
        "engines": engines,
    }
    write_results("keyed_batches", result, render(result))
    print(json.dumps({e: f["medians"] for e, f in engines.items()}, indent=1))


if __name__ == "__main__":
    main()
