"""Consume benchmark: QueueCore WebSocket push vs NATS JetStream vs Redis Streams, same run, same machine.

Three shapes, each ``--rounds`` times; the figure is the median.

* **one consumer**: ``--messages`` pre-published 200-byte messages on a 1-partition topic; one consumer
  reads and acks them all. msgs/s from the first frame to the last ack answered.
  QueueCore: one WebSocket (``maxInFlight`` 1000), one ``ack {ids}`` frame per delivered frame, waiting
  for every ``acked``. JetStream: one durable pull consumer, explicit acks, ``fetch(1000)`` then one
  ``ack()`` per message (nats-py has no batch ack for explicit acks). Redis: ``XREADGROUP COUNT 1000`` then
  one ``XACK`` of the ids.
* **four consumers**: the same on a 4-partition topic with four consumers in one group (QueueCore: four
  WebSockets; JetStream: four pull subscriptions of one durable consumer; Redis: four group consumers of
  one stream). All clients are asyncio tasks of this one process: the client side shares one core.
* **latency**: messages published one at a time at 1,000 msgs/s for ``--seconds`` (QueueCore through
  ``POST /v1/topics/{name}/messages``; JetStream ``js.publish``; Redis ``XADD``), each carrying its send
  time; one consumer acks as it goes; publish→deliver p50/p99 in ms.

The QueueCore server is a real ``queuecore-server serve`` (embedded SQLite metadata, at-least-once
topics, usage metering on) on a temporary data dir, with an enterprise project whose publish limit is
raised for the latency run.

    .venv/bin/python bench/consume_bench.py [--messages 20000] [--rounds 3] [--seconds 5]

Writes bench/results/consume.md and consume.json. A drain that does not see every ack answered within
``BENCH_DRAIN_TIMEOUT`` seconds (300) fails the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rawhttp

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
RESULTS = ROOT / "bench" / "results"
NATS_URL = "nats://127.0.0.1:4222"
REDIS_URL = "redis://127.0.0.1:6379/0"


def payload(i: int) -> dict[str, Any]:
    return {"type": "order.created", "orderId": f"ord_{i:08d}", "amount": 9900, "note": "x" * 120}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- QueueCore ---------------------------------------------------------------------------------------


class Server:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="qc-consume-bench-"))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
        self.env.update({"QUEUECORE_DATA_DIR": str(self.dir), "QUEUECORE_LOG_LEVEL": "WARNING"})
        self.port = 18000 + secrets.randbelow(2000)
        self.process: subprocess.Popen[bytes] | None = None
        self.key = ""

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [str(BIN / "queuecore-server"), *args], env=self.env, capture_output=True, text=True, check=True
        )
        return done.stdout

    def start(self) -> None:
        self.cli("migrate")
        boot = json.loads(self.cli("bootstrap", "--project", "bench", "--tier", "pro", "--json"))
        self.cli(
            "projects", "set-tier", "--project", "bench", "--tier", "enterprise",
            "--limits", "publish=100000,consume=100000,admin=1000",
        )  # fmt: skip
        self.key = boot["keys"]["production"]
        self.process = subprocess.Popen(
            [str(BIN / "queuecore-server"), "serve", "--port", str(self.port)],
            env=self.env,
            stdout=(self.dir / "server.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        for _ in range(300):
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process:
            self.process.terminate()
            self.process.wait(30)


async def qc_topic(server: Server, partitions: int, count: int, delivery: str = "exactly-once") -> str:
    name = f"bench-{secrets.token_hex(4)}"
    headers = {"Authorization": f"Bearer {server.key}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as http:
        r = await http.post("/v1/topics", json={"name": name, "partitions": partitions, "delivery": delivery})
        r.raise_for_status()
        for start in range(0, count, 1000):
            body = {"messages": [{"data": payload(i)} for i in range(start, min(count, start + 1000))]}
            (await http.post(f"/v1/topics/{name}/messages/batch", json=body)).raise_for_status()
    return name


async def qc_drain(server: Server, topic: str, consumers: int, count: int) -> float:
    from websockets.asyncio.client import connect

    url = (
        f"ws://127.0.0.1:{server.port}/v1/topics/{topic}/consume?group=g&startFrom=earliest&maxInFlight=1000"
    )
    headers = {"Authorization": f"Bearer {server.key}"}
    acked = 0
    done = asyncio.Event()
    started: list[float] = []

    async def one(ws: Any) -> None:
        nonlocal acked
        async for raw in ws:
            frame = json.loads(raw)
            kind = frame["type"]
            if kind in ("message", "messages"):
                if not started:
                    started.append(time.perf_counter())
                batch = frame["messages"] if kind == "messages" else [frame]
                await ws.send(json.dumps({"type": "ack", "ids": [m["id"] for m in batch]}))
            elif kind == "acked":
                acked += len(frame["ids"])
                if acked >= count:
                    done.set()

    sockets = [await connect(url, additional_headers=headers, max_size=None) for _ in range(consumers)]
    for ws in sockets:
        json.loads(await ws.recv())  # welcome
    tasks = [asyncio.create_task(one(ws)) for ws in sockets]
    await asyncio.wait_for(done.wait(), float(os.environ.get("BENCH_DRAIN_TIMEOUT", "300")))
    elapsed = time.perf_counter() - started[0]
    for t in tasks:
        t.cancel()
    for ws in sockets:
        await ws.close()
    return count / elapsed


async def qc_latency_run(
    server: Server,
    seconds: float,
    rate: int,
    *,
    delivery: str = "exactly-once",
    acks: str | None = "per frame",
) -> tuple[list[float], list[float]]:
    """Publish one message at a time at ``rate`` for ``seconds`` through HTTP, with one WebSocket
    consumer on a fresh 1-partition topic (none when ``acks`` is None); the consumer acks ``"per frame"``,
    ``"every 20 ms"`` or ``"none"`` (then with ``maxInFlight`` 10,000). Returns the publish→deliver
    latencies (empty without a consumer) and the publish answers' latencies, in seconds."""
    from websockets.asyncio.client import connect

    topic = await qc_topic(server, 1, 0, delivery)
    headers = {"Authorization": f"Bearer {server.key}"}
    total = int(seconds * rate)
    delivered: list[float] = []
    answered: list[float] = []
    ws: Any = None
    tasks: list[asyncio.Task[None]] = []
    if acks is not None:
        max_in_flight = 10_000 if acks == "none" else 1000
        url = (
            f"ws://127.0.0.1:{server.port}/v1/topics/{topic}/consume"
            f"?group=g&startFrom=latest&maxInFlight={max_in_flight}"
        )
        ws = await connect(url, additional_headers=headers)
        json.loads(await ws.recv())  # welcome
        unacked: list[str] = []

        async def consume() -> None:
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] not in ("message", "messages"):
                    continue
                now = time.perf_counter()
                batch = frame["messages"] if frame["type"] == "messages" else [frame]
                delivered.extend(now - m["data"]["sentAt"] for m in batch)
                if acks == "per frame":
                    await ws.send(json.dumps({"type": "ack", "ids": [m["id"] for m in batch]}))
                elif acks == "every 20 ms":
                    unacked.extend(m["id"] for m in batch)
                if len(delivered) >= total:
                    return

        async def ack_every_20_ms() -> None:
            while True:
                await asyncio.sleep(0.02)
                if unacked:
                    ids = unacked[:]
                    unacked.clear()
                    await ws.send(json.dumps({"type": "ack", "ids": ids}))

        tasks.append(asyncio.create_task(consume()))
        if acks == "every 20 ms":
            tasks.append(asyncio.create_task(ack_every_20_ms()))
    pool = rawhttp.Pool("127.0.0.1", server.port, headers)
    path = f"/v1/topics/{topic}/messages"

    async def publish(i: int) -> None:
        sent = time.perf_counter()
        status = await pool.post(path, json.dumps({"data": stamp(i)}).encode())
        assert status == 201, status
        answered.append(time.perf_counter() - sent)

    await paced(rate, total, publish)
    await pool.close()
    if tasks:
        await asyncio.wait_for(tasks[0], 60)
    for task in tasks[1:]:
        task.cancel()
    if ws is not None:
        await ws.close()
    return delivered, answered


async def qc_latency(server: Server, seconds: float, rate: int) -> tuple[float, float]:
    """publish→deliver p50/p99 in ms: one consumer acking every frame, exactly-once topic."""
    delivered, _ = await qc_latency_run(server, seconds, rate)
    return percentile(delivered, 0.5) * 1000, percentile(delivered, 0.99) * 1000


async def qc_publish_latency(server: Server, seconds: float, rate: int) -> tuple[float, float]:
    """The floor under publish→deliver: the publish answer alone (fsync'd append), same rate, no consumer."""
    _, answered = await qc_latency_run(server, seconds, rate, acks=None)
    return percentile(answered, 0.5) * 1000, percentile(answered, 0.99) * 1000


def stamp(i: int) -> dict[str, Any]:
    return {**payload(i), "sentAt": time.perf_counter()}


async def paced(rate: int, total: int, send: Any, in_flight: int = 100) -> None:
    """Start one send every 1/rate s (not waiting for answers, at most ``in_flight`` outstanding: a
    system that cannot keep up falls behind the rate instead of queueing without bound), then wait."""
    start = time.perf_counter()
    pending: set[asyncio.Future[Any]] = set()
    room = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        try:
            await send(i)
        finally:
            room.release()

    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await room.acquire()
        task = asyncio.ensure_future(one(i))
        pending.add(task)
        task.add_done_callback(pending.discard)
    await asyncio.gather(*pending)


# --- NATS JetStream ----------------------------------------------------------------------------------


async def js_drain(consumers: int, count: int) -> float:
    import nats
    from nats.js.api import ConsumerConfig, StorageType

    nc = await nats.connect(NATS_URL)
    js = nc.jetstream()
    stream = f"BENCH{secrets.token_hex(3).upper()}"
    await js.add_stream(name=stream, subjects=[f"{stream}.>"], storage=StorageType.FILE)
    try:
        acks = []
        for i in range(count):
            acks.append(await js.publish_async(f"{stream}.a", json.dumps(payload(i)).encode()))
            if len(acks) >= 1000:
                await asyncio.gather(*acks)
                acks = []
        await asyncio.gather(*acks)
        config = ConsumerConfig(ack_wait=30, max_ack_pending=10_000)
        subs = [await js.pull_subscribe(f"{stream}.>", "workers", config=config) for _ in range(consumers)]
        done = 0
        started = time.perf_counter()

        async def one(sub: Any) -> None:
            nonlocal done
            while done < count:
                try:
                    msgs = await sub.fetch(1000, timeout=1)
                except nats.errors.TimeoutError:
                    continue
                for m in msgs:
                    json.loads(m.data)
                    await m.ack()
                done += len(msgs)

        await asyncio.gather(*(one(s) for s in subs))
        await nc.flush()
        return count / (time.perf_counter() - started)
    finally:
        await js.delete_stream(stream)
        await nc.close()


async def js_latency(seconds: float, rate: int) -> tuple[float, float]:
    import nats
    from nats.js.api import StorageType

    nc = await nats.connect(NATS_URL)
    js = nc.jetstream()
    stream = f"LAT{secrets.token_hex(3).upper()}"
    await js.add_stream(name=stream, subjects=[f"{stream}.>"], storage=StorageType.FILE)
    total = int(seconds * rate)
    latencies: list[float] = []
    try:
        sub = await js.pull_subscribe(f"{stream}.>", "lat")

        async def consume() -> None:
            while len(latencies) < total:
                try:
                    msgs = await sub.fetch(100, timeout=0.5)
                except nats.errors.TimeoutError:
                    continue
                now = time.perf_counter()
                for m in msgs:
                    latencies.append(now - json.loads(m.data)["sentAt"])
                    await m.ack()

        reader = asyncio.create_task(consume())
        await paced(rate, total, lambda i: js.publish(f"{stream}.a", json.dumps(stamp(i)).encode()))
        await asyncio.wait_for(reader, 60)
        return percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
    finally:
        await js.delete_stream(stream)
        await nc.close()


# --- Redis Streams -----------------------------------------------------------------------------------


async def redis_drain(consumers: int, count: int) -> float:
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL, max_connections=consumers + 2)
    key = f"bench:{secrets.token_hex(4)}"
    try:
        for start in range(0, count, 1000):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(count, start + 1000)):
                pipe.xadd(key, {"d": json.dumps(payload(i))})
            await pipe.execute()
        await client.xgroup_create(key, "g", id="0")
        done = 0
        started = time.perf_counter()

        async def one(n: int) -> None:
            nonlocal done
            while done < count:
                got = await client.xreadgroup("g", f"c{n}", {key: ">"}, count=1000, block=1000)
                if not got:
                    continue
                entries = got[0][1]
                for _, fields in entries:
                    json.loads(fields[b"d"])
                await client.xack(key, "g", *[entry_id for entry_id, _ in entries])
                done += len(entries)

        await asyncio.gather(*(one(n) for n in range(consumers)))
        return count / (time.perf_counter() - started)
    finally:
        await client.delete(key)
        await client.aclose()


async def redis_latency(seconds: float, rate: int) -> tuple[float, float]:
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL, max_connections=128)
    key = f"lat:{secrets.token_hex(4)}"
    total = int(seconds * rate)
    latencies: list[float] = []
    try:
        await client.xgroup_create(key, "g", id="$", mkstream=True)

        async def consume() -> None:
            while len(latencies) < total:
                got = await client.xreadgroup("g", "c", {key: ">"}, count=100, block=500)
                if not got:
                    continue
                now = time.perf_counter()
                entries = got[0][1]
                latencies.extend(now - json.loads(fields[b"d"])["sentAt"] for _, fields in entries)
                await client.xack(key, "g", *[entry_id for entry_id, _ in entries])

        reader = asyncio.create_task(consume())
        await paced(rate, total, lambda i: client.xadd(key, {"d": json.dumps(stamp(i))}))
        await asyncio.wait_for(reader, 60)
        return percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
    finally:
        await client.delete(key)
        await client.aclose()


# --- Runner ------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server = Server()
    server.start()
    results: dict[str, dict[str, list[Any]]] = {
        system: {"one": [], "four": [], "latency": []} for system in ("queuecore", "jetstream", "redis")
    }
    at_least_once: list[float] = []  # QueueCore only: acks answered at once, written lazily
    publish_only: list[tuple[float, float]] = []  # QueueCore only: the publish answer, no consumer
    try:
        for round_no in range(args.rounds):
            for consumers, shape in ((1, "one"), (4, "four")):
                topic = await qc_topic(server, consumers, args.messages)
                results["queuecore"][shape].append(await qc_drain(server, topic, consumers, args.messages))
                results["jetstream"][shape].append(await js_drain(consumers, args.messages))
                results["redis"][shape].append(await redis_drain(consumers, args.messages))
                print(f"round {round_no + 1} {shape}: {[results[s][shape][-1] for s in results]}", flush=True)
            topic = await qc_topic(server, 1, args.messages, delivery="at-least-once")
            at_least_once.append(await qc_drain(server, topic, 1, args.messages))
            print(f"round {round_no + 1} one, at-least-once: {at_least_once[-1]}", flush=True)
            publish_only.append(await qc_publish_latency(server, args.seconds, args.rate))
            results["queuecore"]["latency"].append(await qc_latency(server, args.seconds, args.rate))
            results["jetstream"]["latency"].append(await js_latency(args.seconds, args.rate))
            results["redis"]["latency"].append(await redis_latency(args.seconds, args.rate))
            print(f"round {round_no + 1}: {json.dumps(results)}", flush=True)
    finally:
        server.stop()
    summary: dict[str, Any] = {}
    for system, shapes in results.items():
        summary[system] = {
            "one_consumer_msgs_per_s": round(statistics.median(shapes["one"])),
            "four_consumers_msgs_per_s": round(statistics.median(shapes["four"])),
            "latency_p50_ms": round(statistics.median(p50 for p50, _ in shapes["latency"]), 2),
            "latency_p99_ms": round(statistics.median(p99 for _, p99 in shapes["latency"]), 2),
        }
    summary["queuecore"]["one_consumer_at_least_once_msgs_per_s"] = round(statistics.median(at_least_once))
    results["queuecore"]["one_at_least_once"] = at_least_once
    results["queuecore"]["publish_only_latency"] = publish_only
    summary["queuecore"]["publish_only_p50_ms"] = round(statistics.median(p for p, _ in publish_only), 2)
    summary["queuecore"]["publish_only_p99_ms"] = round(statistics.median(p for _, p in publish_only), 2)
    return {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "messages": args.messages,
        "rounds": args.rounds,
        "latency_rate_per_s": args.rate,
        "latency_seconds": args.seconds,
        "raw": results,
        "median": summary,
    }


def write(report: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "consume.json").write_text(json.dumps(report, indent=2) + "\n")
    m = report["median"]
    rows = "\n".join(
        f"| {name} | {m[key]['one_consumer_msgs_per_s']:,} | {m[key]['four_consumers_msgs_per_s']:,} | "
        f"{m[key]['latency_p50_ms']} | {m[key]['latency_p99_ms']} |"
        for key, name in (
            ("queuecore", "QueueCore WebSocket push"),
            ("jetstream", "NATS JetStream pull"),
            ("redis", "Redis Streams"),
        )
    )
    (RESULTS / "consume.md").write_text(
        f"""# Consume benchmark

`.venv/bin/python bench/consume_bench.py --messages {report["messages"]} --rounds {report["rounds"]} \\
--seconds {report["latency_seconds"]}` on {report["machine"]}; medians of {report["rounds"]} rounds.

| system | 1 consumer consume+ack msgs/s | 4 consumers, 4 partitions msgs/s | publish→deliver p50 ms | p99 ms |
|---|---:|---:|---:|---:|
{rows}

QueueCore, one consumer on an `at-least-once` topic (acks answered at once, written within 50 ms):
{m["queuecore"].get("one_consumer_at_least_once_msgs_per_s", 0):,} msgs/s.

Latency: {report["latency_rate_per_s"]:,} msgs/s published one at a time for {report["latency_seconds"]} s
(QueueCore through HTTP `POST /v1/topics/{{name}}/messages`). The floor under QueueCore's figure is the
publish answer itself (the append is fsync'd before a reader sees it), measured the same way with no
consumer: p50 {m["queuecore"].get("publish_only_p50_ms", 0)} ms, p99 {m["queuecore"].get("publish_only_p99_ms", 0)} ms.

Caveats:
- Every client runs as asyncio tasks in this one Python process (one core): the four-consumer figures
  are bounded by the client as much as by the servers, for all three systems alike. QueueCore's latency
  publisher is a minimal keep-alive HTTP client (`bench/rawhttp.py`): httpx saturated the client's core
  at ~500 req/s and measured itself.
- The topics are `exactly-once` (the default): every ack is durable in the metadata store (embedded
  SQLite) before `acked` answers. A WebSocket member keeps first-delivery leases in memory and writes one
  checkpoint per partition for the ack frames that arrived meanwhile (docs/consuming.md). JetStream and
  Redis keep consumer state in their own servers (Redis acknowledges from memory; JetStream file storage)
  and neither fsyncs a publish before a consumer sees it.
- nats-py acks explicit-ack messages one by one (fire-and-forget publishes); Redis acks a batch per XACK.
- Small message counts and few rounds: treat differences under ~10% as noise. The machine has few CPUs;
  the server, the client and Postgres/NATS/Redis share them.
- JetStream and Redis have no partitions here: "four consumers" is four consumers sharing one stream.
"""
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=1000)
    args = parser.parse_args()
    report = asyncio.run(run(args))
    write(report)
    print(json.dumps(report["median"], indent=2))


if __name__ == "__main__":
    main()
