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

    .venv/bin/python bench/consume_bench.py [--messages 20000] [--rounds 3] [--seconds 5] [--no-write]

Writes bench/results/consume.md and consume.json. A drain that does not see every ack answered within
``BENCH_DRAIN_TIMEOUT`` seconds (300) fails the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import BenchServer
from support import (
    Acks,
    fill,
    jetstream_drain,
    jetstream_latency,
    machine,
    p50_p99_ms,
    paced,
    push_drain,
    push_latency,
    stamped,
    write_results,
)

NATS_URL = "nats://127.0.0.1:4222"
REDIS_URL = "redis://127.0.0.1:6379/0"
# Enterprise, limits raised so that they never shape a figure (the latency run publishes at 1,000/s).
LIMITS = "publish=100000,consume=100000,admin=1000"


def payload(i: int) -> dict[str, Any]:
    return {"type": "order.created", "orderId": f"ord_{i:08d}", "amount": 9900, "note": "x" * 120}


def new_server() -> BenchServer:
    """The QueueCore server of a consume run (not started)."""
    return BenchServer("consume-bench", LIMITS)


# --- QueueCore ---------------------------------------------------------------------------------------


async def qc_topic(server: BenchServer, partitions: int, count: int, delivery: str = "exactly-once") -> str:
    name = f"bench-{secrets.token_hex(4)}"
    headers = {"Authorization": f"Bearer {server.key}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as http:
        r = await http.post("/v1/topics", json={"name": name, "partitions": partitions, "delivery": delivery})
        r.raise_for_status()
    if count:
        await fill(server.url, server.key, name, count, payload)
    return name


async def qc_drain(server: BenchServer, topic: str, consumers: int, count: int) -> float:
    return await push_drain(server.port, server.key, topic, consumers, count)


async def qc_latency_run(
    server: BenchServer,
    seconds: float,
    rate: int,
    *,
    delivery: str = "exactly-once",
    acks: Acks | None = "per frame",
) -> tuple[list[float], list[float]]:
    """Publish one message at a time at ``rate`` for ``seconds`` through HTTP, with one WebSocket
    consumer on a fresh 1-partition topic (none when ``acks`` is None); the consumer acks ``"per frame"``,
    ``"every 20 ms"`` or ``"none"`` (then with ``maxInFlight`` 10,000). Returns the publish→deliver
    latencies (empty without a consumer) and the publish answers' latencies, in seconds."""
    topic = await qc_topic(server, 1, 0, delivery)
    return await push_latency(
        server.key,
        topic,
        seconds,
        rate,
        payload,
        publish_port=server.port,
        consume_port=None if acks is None else server.port,
        acks=acks or "per frame",
    )


async def qc_latency(server: BenchServer, seconds: float, rate: int) -> tuple[float, float]:
    """publish→deliver p50/p99 in ms: one consumer acking every frame, exactly-once topic."""
    delivered, _ = await qc_latency_run(server, seconds, rate)
    return p50_p99_ms(delivered)


async def qc_publish_latency(server: BenchServer, seconds: float, rate: int) -> tuple[float, float]:
    """The floor under publish→deliver: the publish answer alone (fsync'd append), same rate, no consumer."""
    _, answered = await qc_latency_run(server, seconds, rate, acks=None)
    return p50_p99_ms(answered)


# --- NATS JetStream ----------------------------------------------------------------------------------


async def js_drain(consumers: int, count: int) -> float:
    import nats
    from nats.js.api import StorageType

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
        return await jetstream_drain(nc, js, stream, consumers, count)
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
    try:
        return await jetstream_latency(js, stream, seconds, rate, payload)
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
        await paced(rate, total, lambda i: client.xadd(key, {"d": json.dumps(stamped(payload(i)))}))
        await asyncio.wait_for(reader, 60)
        return p50_p99_ms(latencies)
    finally:
        await client.delete(key)
        await client.aclose()


# --- Runner ------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server = new_server()
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
        "machine": machine(),
        "messages": args.messages,
        "rounds": args.rounds,
        "latency_rate_per_s": args.rate,
        "latency_seconds": args.seconds,
        "raw": results,
        "median": summary,
    }


def write(report: dict[str, Any]) -> None:
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
    write_results(
        "consume",
        report,
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
""",
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--no-write", action="store_true", help="print only (trial runs)")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    if not args.no_write:
        write(report)
    print(json.dumps(report["median"], indent=2))


if __name__ == "__main__":
    main()
