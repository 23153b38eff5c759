"""HTTP publish benchmark: QueueCore (one uvicorn worker) vs NATS JetStream and Redis Streams.

Same 200-byte JSON payloads, same run, on this machine. QueueCore is driven over HTTP by ``wrk``
(a C load generator, so the client does not starve the server of CPU the way a Python client would);
JetStream and Redis Streams are driven from Python, as their users would (nats-py async publish with
acks, redis-py pipelined XADD). The single publish is also set against a bare FastAPI POST
(``bare_fastapi.py``) driven by the same wrk settings in the same rounds.

    .venv/bin/python bench/publish_bench.py [--seconds 10] [--rounds 3] [--port 18110] [--no-write]

``--port`` serves the three HTTP servers on that port and the next two (default: free ports).
Prints a table and writes bench/results/publish.md and publish.json (medians over ``--rounds``, and
every round's figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import BenchServer, free_port
from support import BIN, ROOT, payload, percentile, write_results, wrk

# Enterprise, limits far above what one process can publish: they never shape a figure.
LIMITS = "publish=10000000,consume=10000000,admin=10000000"


def queuecore(name: str, port: int | None = None, **extra_env: str) -> BenchServer:
    """A QueueCore server for this benchmark (not started), on ``port`` if given."""
    server = BenchServer(name, LIMITS)
    server.port = port or server.port
    server.env.update(extra_env)
    return server


class BareFastAPI:
    """``bare_fastapi.py`` under uvicorn, as QueueCore is served: the single publish's yardstick."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                str(BIN / "uvicorn"),
                "--app-dir",
                str(ROOT / "bench"),
                "bare_fastapi:app",
                "--port",
                str(self.port),
                "--http",
                "httptools",
                "--loop",
                "uvloop",
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(300):
            try:
                httpx.post(f"{self.url}/v1/topics/bench/messages", content=b"{}", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the bare FastAPI server did not start")

    def stop(self) -> None:
        if self.proc:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


async def jetstream_batch(batch: int, seconds: float) -> float:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    stream = f"QCBENCH{os.getpid()}"
    await js.add_stream(name=stream, subjects=[f"qcbench.{os.getpid()}"], storage="file")
    data = json.dumps(payload(), separators=(",", ":")).encode()
    sent = 0
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            futures = [await js.publish_async(f"qcbench.{os.getpid()}", data) for _ in range(batch)]
            await asyncio.gather(*futures)
            sent += batch
        elapsed = time.perf_counter() - started
    finally:
        await js.delete_stream(stream)
        await nc.close()
    return sent / elapsed


async def measure_concurrent(concurrency: int, seconds: float, call) -> dict:
    """Run ``call()`` from ``concurrency`` tasks for ``seconds``: calls/s and latency percentiles (ms)."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - t) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
    }


async def jetstream_single(concurrency: int, seconds: float) -> dict:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    stream, subject = f"QCBENCHS{os.getpid()}", f"qcbenchs.{os.getpid()}"
    await js.add_stream(name=stream, subjects=[subject], storage="file")
    data = json.dumps(payload(), separators=(",", ":")).encode()
    try:
        return await measure_concurrent(concurrency, seconds, lambda: js.publish(subject, data))
    finally:
        await js.delete_stream(stream)
        await nc.close()


async def redis_batch(batch: int, seconds: float) -> float:
    import redis.asyncio as redis

    client = redis.Redis()
    key = f"qcbench:{os.getpid()}"
    data = json.dumps(payload(), separators=(",", ":"))
    sent = 0
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            pipe = client.pipeline(transaction=False)
            for _ in range(batch):
                pipe.xadd(key, {"data": data})
            await pipe.execute()
            sent += batch
        elapsed = time.perf_counter() - started
    finally:
        await client.delete(key)
        await client.aclose()
    return sent / elapsed


async def redis_single(concurrency: int, seconds: float) -> dict:
    import redis.asyncio as redis

    client = redis.Redis(max_connections=concurrency)
    key = f"qcbenchs:{os.getpid()}"
    data = json.dumps(payload(), separators=(",", ":"))
    try:
        return await measure_concurrent(concurrency, seconds, lambda: client.xadd(key, {"data": data}))
    finally:
        await client.delete(key)
        await client.aclose()


def median_of(rounds: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--port", type=int, default=None, help="first of three ports (default: free ports)")
    parser.add_argument("--no-write", action="store_true", help="print only (trial runs)")
    args = parser.parse_args()
    ports = [args.port, args.port + 1, args.port + 2] if args.port else [None, None, None]
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install -y wrk (make bench does it)")

    server = queuecore("publish-bench", ports[0])
    server.start()
    key = server.key
    headers = {"Authorization": f"Bearer {key}"}
    httpx.post(
        f"{server.url}/v1/topics", json={"name": "bench", "partitions": 3}, headers=headers
    ).raise_for_status()
    # The same service without usage metering, measured in the same rounds: what metering costs.
    bare = queuecore("publish-bench-unmetered", ports[1], QUEUECORE_USAGE_METERING="false")
    bare.start()
    bare_key = bare.key
    httpx.post(
        f"{bare.url}/v1/topics",
        json={"name": "bench", "partitions": 3},
        headers={"Authorization": f"Bearer {bare_key}"},
    ).raise_for_status()
    fastapi = BareFastAPI(ports[2])
    fastapi.start()
    single_body = json.dumps({"data": payload()}, separators=(",", ":"))
    batch_body = json.dumps({"messages": [{"data": payload(i)} for i in range(1000)]}, separators=(",", ":"))
    results: dict[str, dict] = {}
    try:
        rounds: dict[str, list[dict]] = {
            name: []
            for name in (
                "queuecore_batch",
                "jetstream_batch",
                "redis_batch",
                "queuecore_single",
                "jetstream_single",
                "redis_single",
                "unmetered_batch",
                "unmetered_single",
                "fastapi_single",
            )
        }
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
            qb = wrk(f"{server.url}/v1/topics/bench/messages/batch", key, batch_body, 4, args.seconds)
            rounds["queuecore_batch"].append(
                {"msgs_per_s": qb["rps"] * 1000, "p50_ms": qb["p50_ms"], "p99_ms": qb["p99_ms"]}
            )
            rounds["jetstream_batch"].append({"msgs_per_s": asyncio.run(jetstream_batch(1000, args.seconds))})
            rounds["redis_batch"].append({"msgs_per_s": asyncio.run(redis_batch(1000, args.seconds))})
            rounds["queuecore_single"].append(
                wrk(
                    f"{server.url}/v1/topics/bench/messages", key, single_body, args.connections, args.seconds
                )
            )
            rounds["jetstream_single"].append(asyncio.run(jetstream_single(args.connections, args.seconds)))
            rounds["redis_single"].append(asyncio.run(redis_single(args.connections, args.seconds)))
            ub = wrk(f"{bare.url}/v1/topics/bench/messages/batch", bare_key, batch_body, 4, args.seconds)
            rounds["unmetered_batch"].append({"msgs_per_s": ub["rps"] * 1000})
            rounds["unmetered_single"].append(
                wrk(
                    f"{bare.url}/v1/topics/bench/messages",
                    bare_key,
                    single_body,
                    args.connections,
                    args.seconds,
                )
            )
            rounds["fastapi_single"].append(
                wrk(
                    f"{fastapi.url}/v1/topics/bench/messages",
                    key,
                    single_body,
                    args.connections,
                    args.seconds,
                )
            )
        results = {name: median_of(rs) for name, rs in rounds.items()}
    finally:
        server.stop()
        bare.stop()
        fastapi.stop()

    qb, jb, rb = results["queuecore_batch"], results["jetstream_batch"], results["redis_batch"]
    qs, js, rs = results["queuecore_single"], results["jetstream_single"], results["redis_single"]
    fs = results["fastapi_single"]
    lines = [
        "# Publish benchmark (HTTP, one uvicorn worker)",
        "",
        (
            f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores shared by client and "
            f"server, {args.rounds} rounds of {args.seconds} s, medians. 200-byte JSON payloads. QueueCore driven by "
            "wrk over HTTP (fsync before every answer); JetStream (file storage) and Redis Streams from Python."
        ),
        "",
        "## Batches of 1000",
        "",
        "| system | msgs/s | vs QueueCore |",
        "|---|---:|---:|",
        f"| QueueCore HTTP batch publish (4 connections) | {qb['msgs_per_s']:,.0f} | 1.0× |",
        (
            f"| NATS JetStream, nats-py publish_async ×1000 + acks | {jb['msgs_per_s']:,.0f} | "
            f"{qb['msgs_per_s'] / jb['msgs_per_s']:.1f}× slower |"
        ),
        (
            f"| Redis Streams, pipelined XADD ×1000 | {rb['msgs_per_s']:,.0f} | "
            f"{qb['msgs_per_s'] / rb['msgs_per_s']:.1f}× slower |"
        ),
        "",
        f"## Single messages, {args.connections} concurrent",
        "",
        "| system | req/s | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
        f"| QueueCore HTTP publish | {qs['rps']:,.0f} | {qs['p50_ms']:.2f} | {qs['p99_ms']:.2f} |",
        f"| NATS JetStream publish (await ack) | {js['rps']:,.0f} | {js['p50_ms']:.2f} | {js['p99_ms']:.2f} |",
        f"| Redis Streams XADD | {rs['rps']:,.0f} | {rs['p50_ms']:.2f} | {rs['p99_ms']:.2f} |",
        (
            f"| bare FastAPI POST (`bare_fastapi.py`, wrk as QueueCore) | {fs['rps']:,.0f} | {fs['p50_ms']:.2f} | "
            f"{fs['p99_ms']:.2f} |"
        ),
        "",
        "## Against the targets (#21)",
        "",
        "| target | reached |",
        "|---|---:|",
        f"| batch ≥ 5× JetStream | {qb['msgs_per_s'] / jb['msgs_per_s']:.2f}× |",
        f"| batch ≥ 3× Redis Streams | {qb['msgs_per_s'] / rb['msgs_per_s']:.2f}× |",
        f"| single ≥ 60 % of a bare FastAPI POST | {100 * qs['rps'] / fs['rps']:.0f} % |",
        f"| single p99 ≤ 10 ms at {args.connections} connections | {qs['p99_ms']:.2f} ms |",
        "",
        "## What usage metering costs (same run, a second server with QUEUECORE_USAGE_METERING=false)",
        "",
        "| | metered | unmetered |",
        "|---|---:|---:|",
        f"| batch publish msgs/s | {qb['msgs_per_s']:,.0f} | {results['unmetered_batch']['msgs_per_s']:,.0f} |",
        f"| single publish req/s | {qs['rps']:,.0f} | {results['unmetered_single']['rps']:,.0f} |",
        (
            f"| single publish p50 / p99 ms | {qs['p50_ms']:.2f} / {qs['p99_ms']:.2f} | "
            f"{results['unmetered_single']['p50_ms']:.2f} / {results['unmetered_single']['p99_ms']:.2f} |"
        ),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_results("publish", {**results, "rounds": rounds}, text)


if __name__ == "__main__":
    main()
