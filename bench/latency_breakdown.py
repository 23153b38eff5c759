"""Where publish→deliver latency goes: one server, the consume benchmark's latency run in five shapes.

``consume_bench.py`` measures publish→deliver at 1,000 msgs/s with one WebSocket consumer acking every
frame. This script takes that run apart, in paired rounds on one ``queuecore-server`` (the machine's
speed swings within minutes, so only shapes measured side by side compare):

* **publish only**: no consumer; the publish answer (fsync'd append) p50/p99;
* **consumer, no acks**: one consumer (``maxInFlight`` 10,000) that never acks;
* **consumer, acks every 20 ms**: the delivered ids acked in one frame every 20 ms;
* **consumer, ack per frame** (the consume benchmark's shape), on an ``exactly-once`` topic;
* **consumer, ack per frame, at-least-once**: the same on an ``at-least-once`` topic (acks answered at
  once, checkpointed lazily).

Each round is ``consume_bench.qc_latency_run``: ``--rate`` msgs/s for ``--seconds`` through HTTP; the
shapes rotate their order every round. For each it reports publish→deliver (client clock, one process) and the publish
answer, medians over rounds, beside the server's CPU: its main thread (the event loop) and all threads.

    .venv/bin/python bench/latency_breakdown.py [--rounds 6] [--seconds 2] [--rate 1000] [--no-write]

Writes bench/results/latency_breakdown.md and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import consume_bench as cb
from bench_server import BenchServer
from support import Acks, machine, percentile, write_results

# name -> (topic delivery, consumer: None | acks: "none" | "every 20 ms" | "per frame")
SHAPES: dict[str, tuple[str, Acks | None]] = {
    "publish only": ("exactly-once", None),
    "consumer, no acks": ("exactly-once", "none"),
    "consumer, acks every 20 ms": ("exactly-once", "every 20 ms"),
    "consumer, ack per frame": ("exactly-once", "per frame"),
    "consumer, ack per frame, at-least-once": ("at-least-once", "per frame"),
}


class Cpu:
    """CPU seconds of the server process and of its main thread, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def _read(self, path: str) -> float:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def sample(self) -> tuple[float, float, float]:
        return (
            time.perf_counter(),
            self._read(f"/proc/{self.pid}/stat"),
            self._read(f"/proc/{self.pid}/task/{self.pid}/stat"),
        )

    @staticmethod
    def percent(start: tuple[float, float, float], end: tuple[float, float, float]) -> tuple[int, int]:
        wall = end[0] - start[0]
        return round((end[2] - start[2]) / wall * 100), round((end[1] - start[1]) / wall * 100)


async def one_round(server: BenchServer, cpu: Cpu, shape: str, seconds: float, rate: int) -> dict[str, float]:
    delivery, acks = SHAPES[shape]
    start = cpu.sample()  # the topic's creation and the connection count too: a few ms of the round
    delivered, answered = await cb.qc_latency_run(server, seconds, rate, delivery=delivery, acks=acks)
    main, process = Cpu.percent(start, cpu.sample())
    figures = {
        "answer_p50_ms": percentile(answered, 0.5) * 1000,
        "answer_p99_ms": percentile(answered, 0.99) * 1000,
        "main_thread_cpu_pct": main,
        "process_cpu_pct": process,
    }
    if delivered:
        figures["deliver_p50_ms"] = percentile(delivered, 0.5) * 1000
        figures["deliver_p99_ms"] = percentile(delivered, 0.99) * 1000
    return figures


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server = cb.new_server()
    server.start()
    assert server.process is not None
    cpu = Cpu(server.process.pid)
    rounds: dict[str, list[dict[str, float]]] = {shape: [] for shape in SHAPES}
    try:
        await one_round(server, cpu, "consumer, ack per frame", 1, args.rate)  # warm-up, not counted
        names = list(SHAPES)
        for i in range(args.rounds):
            order = names[i % len(names) :] + names[: i % len(names)]
            for shape in order:
                figures = await one_round(server, cpu, shape, args.seconds, args.rate)
                rounds[shape].append(figures)
                print(f"round {i + 1} {shape}: {json.dumps({k: round(v, 2) for k, v in figures.items()})}")
    finally:
        server.stop()
    median = {
        shape: {key: round(statistics.median(r[key] for r in results), 2) for key in results[0]}
        for shape, results in rounds.items()
    }
    return {
        "machine": machine(),
        "rounds": args.rounds,
        "seconds": args.seconds,
        "rate_per_s": args.rate,
        "median": median,
        "per_round": rounds,
    }


def write(report: dict[str, Any]) -> None:
    m = report["median"]

    def cell(figures: dict[str, float], key: str) -> str:
        return f"{figures[key]:.2f}" if key in figures else "–"

    rows = "\n".join(
        f"| {shape} | {cell(f, 'deliver_p50_ms')} | {cell(f, 'deliver_p99_ms')} | {cell(f, 'answer_p50_ms')} | "
        f"{cell(f, 'answer_p99_ms')} | {f['main_thread_cpu_pct']:.0f} | {f['process_cpu_pct']:.0f} |"
        for shape, f in m.items()
    )
    write_results(
        "latency_breakdown",
        report,
        f"""# Latency breakdown

`.venv/bin/python bench/latency_breakdown.py --rounds {report["rounds"]} --seconds {report["seconds"]} \\
--rate {report["rate_per_s"]}` on {report["machine"]}; one server, the shapes alternating round by round;
medians of {report["rounds"]} rounds. {report["rate_per_s"]:,} msgs/s published one at a time over HTTP;
one WebSocket consumer where there is one.

| shape | publish→deliver p50 ms | p99 ms | publish answer p50 ms | p99 ms | server main thread CPU % | server CPU % (all threads) |
|---|---:|---:|---:|---:|---:|---:|
{rows}

Reading it: the publish answer with no consumer is the floor (an fsync'd append through HTTP). A
consumer's deliveries and acks add to the server's event loop, and the publish answers slow down with
it: publish→deliver tracks the publish answer (a commit wakes the consumer before it answers the
publishers). `bench/README.md` discusses the figures.
""",
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--no-write", action="store_true", help="print only (trial runs)")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    print(json.dumps(report["median"], indent=2))
    if not args.no_write:
        write(report)


if __name__ == "__main__":
    main()
