"""Paired A/B of publish→deliver latency (or drain, or single publish): a git revision against the working
tree, in one run.

The machine is shared and its speed swings by 2x within minutes, so two separate runs of
``consume_bench.py`` cannot tell a 1 ms change from noise. This script starts one real
``queuecore-server`` per side (the revision served from a temporary ``git worktree`` through
``PYTHONPATH``; the working tree from the installed package), keeps both up, and alternates short
latency rounds between them (``qc_latency`` of ``consume_bench.py``: HTTP publish at 1,000 msgs/s, one
WebSocket consumer acking as it goes, exactly-once topic). Each round of one side is paired with the
adjacent round of the other; the figure is how many pairs the working tree wins, beside both medians.

    .venv/bin/python bench/ab_latency.py [--rev HEAD] [--rounds 16] [--seconds 2] [--drain 20000]

With ``--drain N``, each round is instead the one-consumer drain of ``consume_bench.py`` (N messages
pre-published, one WebSocket consumer acking every frame, exactly-once topic), and the figure is msgs/s.

With ``--batch C``, the same with batches of 100 messages (``messages/batch``).

With ``--single C``, each round is ``wrk`` at C connections publishing single 200-byte messages to a
3-partition topic (as ``publish_bench.py``), and the figures are req/s and the server's CPU per request
(all its threads, from ``/proc``): the second tells a change in cost from a change in the machine.

Prints the per-round figures and the medians; writes nothing. 12 wins of 16 or more is unlikely by
chance (one-sided sign test, p ≈ 0.04).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import consume_bench as cb
import httpx
from bench_server import BenchServer
from support import payload, wrk

ROOT = Path(__file__).resolve().parent.parent


def worktree(rev: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="qc-ab-")) / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
        check=True,
        capture_output=True,
    )
    return path


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid``, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


BATCH = 100  # messages per --batch request


def single_round(args: argparse.Namespace, server: BenchServer, seconds: float) -> tuple[float, float]:
    """(req/s, server CPU µs per request) of ``wrk`` single publishes; with ``--batch``, of batches of
    ``BATCH`` messages."""
    assert server.process is not None
    if args.batch:
        body = json.dumps({"messages": [{"data": payload()} for _ in range(BATCH)]}, separators=(",", ":"))
        url, connections = f"{server.url}/v1/topics/ab/messages/batch", args.batch
    else:
        body = json.dumps({"data": payload()}, separators=(",", ":"))
        url, connections = f"{server.url}/v1/topics/ab/messages", args.single
    before = cpu_seconds(server.process.pid)
    result = wrk(url, server.key, body, connections, max(1, round(seconds)))
    used = cpu_seconds(server.process.pid) - before
    return result["rps"], used / (result["rps"] * seconds) * 1e6


async def one_round(args: argparse.Namespace, server: BenchServer, seconds: float) -> tuple[float, float]:
    """(p50 ms, p99 ms) of publish→deliver, with ``--drain`` (msgs/s, msgs/s), with ``--single``
    (req/s, CPU µs per request)."""
    if args.single or args.batch:
        return await asyncio.to_thread(single_round, args, server, seconds)
    if args.drain:
        topic = await cb.qc_topic(server, 1, args.drain)
        rate = await cb.qc_drain(server, topic, 1, args.drain)
        return rate, rate
    return await cb.qc_latency(server, seconds, args.rate)


async def run(args: argparse.Namespace, tree: Path) -> None:
    sides = {args.rev: {"PYTHONPATH": str(tree)}, "working tree": {}}
    servers: dict[str, BenchServer] = {}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    try:
        for name, env in sides.items():
            server = cb.new_server()
            server.env.update(env)
            server.start()
            servers[name] = server
            if args.single or args.batch:
                async with httpx.AsyncClient(base_url=server.url) as http:
                    created = await http.post(
                        "/v1/topics",
                        json={"name": "ab", "partitions": 3},
                        headers={"Authorization": f"Bearer {server.key}"},
                    )
                    created.raise_for_status()
        for server in servers.values():
            await one_round(args, server, 1)  # warm-up, not counted
        for i in range(args.rounds):
            order = list(servers.items()) if i % 2 == 0 else list(servers.items())[::-1]
            for name, server in order:
                results[name].append(await one_round(args, server, args.seconds))
            if args.single or args.batch:
                print(
                    f"round {i + 1}: "
                    + ", ".join(
                        f"{n} {results[n][-1][0]:,.0f} req/s {results[n][-1][1]:.0f} µs" for n in sides
                    ),
                    flush=True,
                )
            elif args.drain:
                print(f"round {i + 1}: " + ", ".join(f"{n} {results[n][-1][0]:,.0f} msgs/s" for n in sides))
            else:
                print(
                    f"round {i + 1}: "
                    + ", ".join(f"{n} {results[n][-1][0]:.2f}/{results[n][-1][1]:.2f}" for n in sides),
                    flush=True,
                )
    finally:
        for server in servers.values():
            server.stop()
    base, cand = list(sides)
    if args.single or args.batch:
        pairs = list(zip(results[base], results[cand], strict=True))
        faster = sum(c[0] > b[0] for b, c in pairs)
        cheaper = sum(c[1] < b[1] for b, c in pairs)
        for name, rounds in results.items():
            rps = statistics.median(r for r, _ in rounds)
            cpu = statistics.median(c for _, c in rounds)
            kind = f"{BATCH}-message batch" if args.batch else "single publish"
            print(f"{name}: {kind} median {rps:,.0f} req/s, {cpu:.0f} µs of server CPU per request")
        print(f"working tree faster in {faster}/{args.rounds} pairs, cheaper in {cheaper}/{args.rounds}")
        return
    if args.drain:
        wins = sum(c[0] > b[0] for b, c in zip(results[base], results[cand], strict=True))
        for name, rounds in results.items():
            print(f"{name}: one-consumer drain median {statistics.median(r for r, _ in rounds):,.0f} msgs/s")
        print(f"working tree faster in {wins}/{args.rounds} pairs")
        return
    wins50 = sum(c[0] < b[0] for b, c in zip(results[base], results[cand], strict=True))
    wins99 = sum(c[1] < b[1] for b, c in zip(results[base], results[cand], strict=True))
    for name, rounds in results.items():
        p50 = statistics.median(p for p, _ in rounds)
        p99 = statistics.median(p for _, p in rounds)
        print(f"{name}: publish->deliver median p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    print(f"working tree lower p50 in {wins50}/{args.rounds} pairs, lower p99 in {wins99}/{args.rounds}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rev", default="HEAD", help="the revision to compare against (default HEAD)")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--drain", type=int, default=0, help="messages per drain round (0: latency rounds)")
    parser.add_argument("--single", type=int, default=0, help="wrk connections for single-publish rounds")
    parser.add_argument(
        "--batch", type=int, default=0, help=f"wrk connections for rounds of {BATCH}-message batches"
    )
    args = parser.parse_args()
    tree = worktree(args.rev)
    try:
        asyncio.run(run(args, tree))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


if __name__ == "__main__":
    main()
