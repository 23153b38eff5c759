"""SDK benchmark: the Node.js SDK (sdk/js) beside the Python SDK (sdk/src), on one server, in one run.

Each round runs ``node bench/js_sdk_bench.mjs`` and ``python bench/py_sdk_bench.py`` one after the other
(alternating which goes first) against the same ``queuecore-server serve`` (embedded metadata, local log
engine, an enterprise project with high limits, on a temporary data dir). Each measures, with its own SDK:

* **publishBatch**: ``--messages`` 200-byte messages on a 3-partition exactly-once topic, batches of
  1,000, four batches in flight; msgs/s;
* **consume+ack**: ``--messages`` pre-published on a 1-partition topic; one WebSocket consumer
  (``maxInFlight`` 1000) of a fresh group from earliest, acking each message in its handler; msgs/s from
  ``start()`` until every message is handled and ``stop()`` is done (every ack confirmed by the server;
  the lag is checked to be 0).

The figures are the medians of ``--rounds`` rounds (at least 3).

    .venv/bin/python bench/js_sdk_bench.py [--messages 20000] [--rounds 3]    (or: make bench-js)

Writes bench/results/sdk_js.md and sdk_js.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench_server import BenchServer

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
RESULTS = ROOT / "bench" / "results"


def run_client(command: list[str], server: BenchServer) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
    env["QUEUECORE_API_KEY"] = server.key  # in the environment, not on a command line
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (the figures are medians)")
    node = shutil.which("node") or "node"
    commands = {
        "node": [node, str(ROOT / "bench" / "js_sdk_bench.mjs"), "--messages", str(args.messages)],
        "python": [sys.executable, str(ROOT / "bench" / "py_sdk_bench.py"), "--messages", str(args.messages)],
    }
    server = BenchServer("sdk-js-bench")
    rounds: dict[str, list[dict[str, Any]]] = {"node": [], "python": []}
    versions: dict[str, str] = {}
    try:
        server.start()
        for client in ("node", "python"):  # warm-up (JIT, caches, the server's first topics): not counted
            run_client([*commands[client], "--base-url", server.url], server)
        for number in range(args.rounds):
            order = ["node", "python"] if number % 2 == 0 else ["python", "node"]
            for client in order:
                result = run_client([*commands[client], "--base-url", server.url], server)
                versions[client] = result.get("node") or result.get("python") or ""
                rounds[client].append(result)
                print(
                    f"round {number + 1} {client:6}: publishBatch {result['publishBatch']:9.0f} msgs/s, "
                    f"consume+ack {result['consume']:9.0f} msgs/s",
                    flush=True,
                )
    finally:
        server.stop()

    medians = {
        client: {
            "publishBatch": statistics.median(r["publishBatch"] for r in results),
            "consume": statistics.median(r["consume"] for r in results),
        }
        for client, results in rounds.items()
    }
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    report = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "commit": commit,
        "messages": args.messages,
        "rounds": args.rounds,
        "versions": versions,
        "medians": medians,
        "raw": rounds,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sdk_js.json").write_text(json.dumps(report, indent=2) + "\n")
    node_m, py_m = medians["node"], medians["python"]
    lines = [
        "# SDK benchmark: Node.js SDK beside the Python SDK",
        "",
        (
            f"One `queuecore-server` (local engine, embedded metadata), {report['machine']}, commit {commit}; "
            f"{args.messages} messages of ~200 bytes per measurement; medians of {args.rounds} rounds, the two "
            "clients alternating in each round, after one warm-up round of each that is not counted. "
            "Produced by `bench/js_sdk_bench.py` (`make bench-js`)."
        ),
        "",
        (
            f"| msgs/s | Node.js SDK ({versions.get('node', '')}) | Python SDK ({versions.get('python', '')}) "
            "| Node / Python |"
        ),
        "|---|---:|---:|---:|",
        (
            f"| publishBatch (batches of 1,000, 4 in flight) | {node_m['publishBatch']:,.0f} "
            f"| {py_m['publishBatch']:,.0f} | {node_m['publishBatch'] / py_m['publishBatch']:.2f} |"
        ),
        (
            f"| one consumer, consume + ack (WebSocket) | {node_m['consume']:,.0f} | {py_m['consume']:,.0f} "
            f"| {node_m['consume'] / py_m['consume']:.2f} |"
        ),
        "",
        "Every round:",
        "",
        "| round | client | publishBatch | consume + ack |",
        "|---:|---|---:|---:|",
    ]
    for client in ("node", "python"):
        for number, result in enumerate(rounds[client], 1):
            lines.append(
                f"| {number} | {client} | {result['publishBatch']:,.0f} | {result['consume']:,.0f} |"
            )
    lines += [
        "",
        (
            "consume + ack runs from `start()` until every message is handled and `stop()` is done, which "
            "waits for the server to confirm every ack (the group's lag is checked to be 0 afterwards). The "
            "machine's 2 cores are shared by the server, the client and, on this machine, other work: compare "
            "the two columns of one run, not runs of different days."
        ),
        "",
    ]
    (RESULTS / "sdk_js.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
