"""SDK benchmark: the Go SDK (sdk/go) beside the Python SDK (sdk/src) and, when it is there, the Node.js SDK
(sdk/js), on one server, in one run.

Each round runs every client one after the other (rotating which goes first) against the same
``queuecore-server serve`` (embedded metadata, local log engine, an enterprise project with high limits, on a
temporary data dir). Each measures, with its own SDK:

* **publishBatch**: ``--messages`` ~200-byte messages on a 3-partition exactly-once topic, batches of 1,000,
  four batches in flight; msgs/s;
* **consume+ack**: ``--messages`` pre-published on a 1-partition topic; one WebSocket consumer
  (``maxInFlight`` 1000) of a fresh group from earliest, acking each message in its handler; msgs/s from
  starting the consumer until every message is handled and the consumer has stopped (every ack confirmed by
  the server; the lag is checked to be 0).

Clients: ``bench/go_sdk_bench`` (a Go program built here against sdk/go), this file with ``--python-client``
(the Python SDK), and ``bench/js_sdk_bench.mjs`` when it and the built Node SDK exist. The figures are the
medians of ``--rounds`` rounds (at least 3), after one warm-up round of each client that is not counted.

    make bench-go        (or, with the Go environment of the Makefile: .venv/bin/python bench/go_sdk_bench.py
                          [--messages 20000] [--rounds 3])

Writes bench/results/sdk_go.md and sdk_go.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_server import BenchServer

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
RESULTS = ROOT / "bench" / "results"
GO_DIR = ROOT / ".go"


# -- the Python client's round ---------------------------------------------------------------------------


def payload(i: int) -> dict[str, Any]:
    return {"type": "order.created", "orderId": f"ord_{i:08d}", "amount": 9900, "note": "x" * 120}


async def python_round(base_url: str, messages: int) -> dict[str, Any]:
    from queuecore import AsyncQueueCore

    def chunks() -> list[list[dict[str, Any]]]:
        return [[payload(i) for i in range(s, min(messages, s + 1000))] for s in range(0, messages, 1000)]

    async with AsyncQueueCore(api_key=os.environ["QUEUECORE_API_KEY"], base_url=base_url) as client:
        topic = f"bench-py-pub-{secrets.token_hex(4)}"
        await client.topics.create(topic, partitions=3)
        pending = iter(chunks())

        async def lane() -> None:
            for batch in pending:
                await client.publish_batch(topic, batch)

        started = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(4)))
        publish = messages / (time.perf_counter() - started)
        await client.topics.delete(topic)

        topic = f"bench-py-csm-{secrets.token_hex(4)}"
        await client.topics.create(topic, partitions=1)
        for batch in chunks():
            await client.publish_batch(topic, batch)
        consumer = client.consume(topic, group="bench", start_from="earliest", max_in_flight=1000)
        handled = 0

        async def handle(msg: Any) -> None:
            nonlocal handled
            msg.ack()
            handled += 1
            if handled == messages:
                consumer.stop()

        consumer.on("message", handle)
        started = time.perf_counter()
        await consumer.start()  # returns once stopped: every ack confirmed, the member gone
        consume = messages / (time.perf_counter() - started)
        lag = (await client.offsets.get(topic, group="bench", partition=0)).lag
        if lag != 0:
            raise RuntimeError(f"lag {lag} after stop(): acks not all confirmed")
        await client.topics.delete(topic)
    return {
        "client": "python",
        "python": platform.python_version(),
        "publishBatch": publish,
        "consume": consume,
    }


# -- the driver ------------------------------------------------------------------------------------------


def build_go_client() -> Path:
    """Build bench/go_sdk_bench against sdk/go, resolving gorilla/websocket like `make test-go` does."""
    src = ROOT / "bench" / "go_sdk_bench"
    GO_DIR.mkdir(exist_ok=True)
    modfile = GO_DIR / "bench.mod"
    mod = (src / "go.mod").read_text().replace("=> ../../sdk/go", f"=> {ROOT / 'sdk' / 'go'}")
    modfile.write_text(mod)
    (GO_DIR / "bench.sum").unlink(missing_ok=True)
    out = GO_DIR / "bin" / "go_sdk_bench"
    env = dict(os.environ, GOFLAGS=f"-mod=mod -modcacherw -modfile={modfile}")
    subprocess.run(["go", "build", "-o", str(out), "."], cwd=src, env=env, check=True)
    return out


def run_client(command: list[str], server: BenchServer) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
    env["QUEUECORE_API_KEY"] = server.key  # in the environment, not on a command line
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=900)
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
    parser.add_argument("--python-client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.python_client:
        print(json.dumps(asyncio.run(python_round(args.base_url, args.messages))))
        return
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (the figures are medians)")

    msgs = ["--messages", str(args.messages)]
    commands = {
        "go": [str(build_go_client()), *msgs],
        "python": [sys.executable, __file__, "--python-client", *msgs],
    }
    node = shutil.which("node")
    node_bench = ROOT / "bench" / "js_sdk_bench.mjs"
    if node and node_bench.exists() and (ROOT / "sdk" / "js" / "dist").exists():
        commands["node"] = [node, str(node_bench), *msgs]
    clients = list(commands)
    server = BenchServer("sdk-go-bench")
    rounds: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    versions: dict[str, str] = {}
    try:
        server.start()
        for client in clients:  # warm-up (caches, JIT, the server's first topics): not counted
            run_client([*commands[client], "--base-url", server.url], server)
        for number in range(args.rounds):
            order = clients[number % len(clients) :] + clients[: number % len(clients)]
            for client in order:
                result = run_client([*commands[client], "--base-url", server.url], server)
                versions[client] = str(result.get(client) or "")
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
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs"
    report = {
        "machine": machine,
        "commit": commit,
        "messages": args.messages,
        "rounds": args.rounds,
        "versions": versions,
        "medians": medians,
        "raw": rounds,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sdk_go.json").write_text(json.dumps(report, indent=2) + "\n")
    names = {"go": "Go SDK", "python": "Python SDK", "node": "Node.js SDK"}
    head = " | ".join(f"{names[c]} ({versions.get(c, '')})" for c in clients)
    go_m, py_m = medians["go"], medians["python"]
    lines = [
        "# SDK benchmark: the Go SDK beside the other SDKs",
        "",
        (
            f"One `queuecore-server` (local engine, embedded metadata), {machine}, commit {commit}; "
            f"{args.messages} messages of ~200 bytes per measurement; medians of {args.rounds} rounds, the clients "
            "taking turns to go first, after one warm-up round of each that is not counted. Produced by "
            "`bench/go_sdk_bench.py` (`make bench-go`)."
        ),
        "",
        f"| msgs/s | {head} | Go / Python |",
        "|---|" + "---:|" * (len(clients) + 1),
        "| publishBatch (batches of 1,000, 4 in flight) | "
        + " | ".join(f"{medians[c]['publishBatch']:,.0f}" for c in clients)
        + f" | {go_m['publishBatch'] / py_m['publishBatch']:.2f} |",
        "| one consumer, consume + ack (WebSocket) | "
        + " | ".join(f"{medians[c]['consume']:,.0f}" for c in clients)
        + f" | {go_m['consume'] / py_m['consume']:.2f} |",
        "",
        "Every round:",
        "",
        "| round | client | publishBatch | consume + ack |",
        "|---:|---|---:|---:|",
    ]
    for client in clients:
        for number, result in enumerate(rounds[client], 1):
            lines.append(
                f"| {number} | {client} | {result['publishBatch']:,.0f} | {result['consume']:,.0f} |"
            )
    lines += [
        "",
        (
            "consume + ack runs from starting the consumer until every message is handled and the consumer has "
            "stopped, which waits for the server to confirm every ack (the group's lag is checked to be 0 "
            "afterwards). The machine's 2 cores are shared by the server, the client and, on this machine, other "
            "work: compare the columns of one run, not runs of different days."
        ),
        "",
    ]
    (RESULTS / "sdk_go.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
