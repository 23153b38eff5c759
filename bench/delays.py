"""Delayed-delivery accuracy: how late a delayed message reaches a connected consumer, at a given due rate.

For each due rate (``--rates``, messages falling due per second) and each transport (WebSocket push, REST
pull), one run on a fresh ``--partitions``-partition topic of a real ``queuecore-server`` (embedded
SQLite, local engine, exactly-once topic):

1. the consumer connects (push: one WebSocket, ``maxInFlight`` 10,000, one ``ack {ids}`` frame per
   delivered frame; pull: one member, long polls of up to 1000 messages, one ack call per poll);
2. ``rate × seconds`` messages are published in batches of 1000, before any falls due, message ``i``
   with ``deliverAt = T0 + i / rate`` (``T0`` = ``--lead`` seconds after the run starts): from ``T0`` on,
   ``rate`` messages fall due every second for ``--seconds``;
3. each message's lateness = the wall-clock time it reached the consumer (this process) − its
   ``deliverAt`` (both on this machine's clock). A negative lateness would be a delivery before the due
   time: the report counts them (``early``; it must be 0).

The figures are p50 / p99 / max lateness in ms per run, medians over ``--rounds``. ``received`` counts
the messages that arrived within 60 s of the last due time (each counted once).

    .venv/bin/python bench/delays.py [--rates 1000,5000,10000] [--seconds 5] [--rounds 1] [--no-write]

Writes bench/results/delays.md and delays.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import BenchServer
from support import machine, percentile, write_results

LIMITS = "publish=100000,consume=100000,admin=10000"
BATCH = 1000


def now_ms() -> float:
    return time.time() * 1000


async def _topic(http: httpx.AsyncClient, partitions: int) -> str:
    name = f"delays-{secrets.token_hex(4)}"
    r = await http.post("/v1/topics", json={"name": name, "partitions": partitions})
    r.raise_for_status()
    return name


async def _publish_due(http: httpx.AsyncClient, topic: str, rate: int, seconds: float, t0_ms: float) -> int:
    """``rate × seconds`` messages, message ``i`` due at ``t0 + i / rate``; all published before ``t0``."""
    total = int(rate * seconds)
    for start in range(0, total, BATCH):
        items = [
            {"data": {"i": i}, "deliverAt": round(t0_ms + i * 1000 / rate)}
            for i in range(start, min(total, start + BATCH))
        ]
        r = await http.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
        r.raise_for_status()
    if now_ms() >= t0_ms:
        raise RuntimeError("publishing took past the first due time: raise --lead")
    return total


async def _publish_paced(http: httpx.AsyncClient, topic: str, rate: int, seconds: float, t0_ms: float) -> int:
    """The baseline: the same number of messages without a delay, published from ``t0`` on at ``rate``
    (a batch every 10 ms), so that they become deliverable at the rate the delayed ones fall due."""
    total = int(rate * seconds)
    per_batch = max(1, rate // 100)
    await asyncio.sleep(max(0.0, (t0_ms - now_ms()) / 1000))
    start = time.perf_counter()
    for n, first in enumerate(range(0, total, per_batch)):
        await asyncio.sleep(max(0.0, start + n * 0.01 - time.perf_counter()))
        items = [{"data": {"i": i}} for i in range(first, min(total, first + per_batch))]
        r = await http.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
        r.raise_for_status()
    return total


def _lateness(arrived: float, message: dict[str, Any]) -> float:
    """Arrival − the time the message became deliverable: its ``deliverAt``, else its publish time."""
    return arrived - _ms(message["deliverAt"] or message["timestamp"])


async def _push(
    server: BenchServer, topic: str, total: int, deadline: float, late: list[float], ready: asyncio.Event
) -> None:
    url = (
        f"ws://127.0.0.1:{server.port}/v1/topics/{topic}/consume?group=g&startFrom=earliest&maxInFlight=10000"
    )
    async with connect(
        url, additional_headers={"Authorization": f"Bearer {server.key}"}, max_size=None
    ) as ws:
        welcome = json.loads(await ws.recv())
        assert welcome["type"] == "welcome", welcome
        ready.set()
        seen: set[str] = set()
        while len(seen) < total:
            try:
                raw = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                return  # the report says how many arrived in time
            frame = json.loads(raw)
            batch = [frame] if frame["type"] == "message" else frame.get("messages", [])
            arrived = now_ms()
            for m in batch:
                if m["id"] not in seen:
                    seen.add(m["id"])
                    late.append(_lateness(arrived, m))
            if batch:
                await ws.send(json.dumps({"type": "ack", "ids": [m["id"] for m in batch]}))


async def _pull(
    server: BenchServer, topic: str, total: int, deadline: float, late: list[float], ready: asyncio.Event
) -> None:
    headers = {"Authorization": f"Bearer {server.key}"}
    base = f"/v1/topics/{topic}/groups/g"
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as http:
        r = await http.post(f"{base}/members", json={"startFrom": "earliest", "sessionTimeout": "30s"})
        r.raise_for_status()
        ident = {"memberId": r.json()["memberId"], "generationId": r.json()["generationId"]}
        ready.set()
        seen: set[str] = set()
        while len(seen) < total and time.monotonic() < deadline:
            r = await http.post(f"{base}/poll", json={**ident, "maxMessages": 1000, "waitSeconds": 5})
            r.raise_for_status()
            arrived = now_ms()
            batch = r.json()["messages"]
            for m in batch:
                if m["id"] not in seen:
                    seen.add(m["id"])
                    late.append(_lateness(arrived, m))
            if batch:
                a = await http.post(f"{base}/ack", json={**ident, "ids": [m["id"] for m in batch]})
                a.raise_for_status()


def _ms(instant: str) -> float:
    return datetime.fromisoformat(instant).timestamp() * 1000


async def one_run(
    server: BenchServer,
    transport: str,
    rate: int,
    seconds: float,
    partitions: int,
    lead: float,
    *,
    delayed: bool = True,
) -> dict[str, Any]:
    ready = asyncio.Event()
    headers = {"Authorization": f"Bearer {server.key}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as http:
        topic = await _topic(http, partitions)
        late: list[float] = []
        total = int(rate * seconds)
        deadline = time.monotonic() + lead + seconds + 60
        consume = _push if transport == "push" else _pull
        consumer = asyncio.ensure_future(consume(server, topic, total, deadline, late, ready))
        await asyncio.wait_for(ready.wait(), 30)
        t0 = now_ms() + lead * 1000
        if delayed:
            await _publish_due(http, topic, rate, seconds, t0)
        else:
            await _publish_paced(http, topic, rate, seconds, t0)
        await consumer
        await http.delete(f"/v1/topics/{topic}")
    return {
        "transport": transport,
        "delayed": delayed,
        "rate": rate,
        "messages": total,
        "received": len(late),
        "early": sum(1 for v in late if v < 0),
        "p50_ms": round(percentile(late, 0.5), 1),
        "p99_ms": round(percentile(late, 0.99), 1),
        "max_ms": round(max(late), 1),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = BenchServer("delays", LIMITS)
    server.start()
    runs: list[dict[str, Any]] = []
    try:
        for rate in args.rates:
            for transport, delayed in (("push", True), ("push", False), ("pull", True), ("pull", False)):
                rounds = [
                    await one_run(
                        server, transport, rate, args.seconds, args.partitions, args.lead, delayed=delayed
                    )
                    for _ in range(args.rounds)
                ]
                summary = {
                    "transport": transport,
                    "delayed": delayed,
                    "rate": rate,
                    "messages": rounds[0]["messages"],
                    "early": sum(r["early"] for r in rounds),
                    "received": min(r["received"] for r in rounds),
                    **{k: statistics.median(r[k] for r in rounds) for k in ("p50_ms", "p99_ms", "max_ms")},
                    "rounds": rounds,
                }
                print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}), flush=True)
                runs.append(summary)
    finally:
        server.stop()
    return {"machine": machine(), "args": vars(args), "runs": runs}


def markdown(report: dict[str, Any], command: str) -> str:
    args = report["args"]
    rows = "\n".join(
        f"| {r['transport']} | {'delayed' if r['delayed'] else 'not delayed (baseline)'} | {r['rate']:,} | {r['messages']:,} | {r['p50_ms']} | {r['p99_ms']} | "
        f"{r['max_ms']} | {r['early']} | {r['received']:,} |"
        for r in report["runs"]
    )
    return f"""# Delayed-delivery accuracy

`{command}` on {report["machine"]}; medians of {args["rounds"]} round(s) per line.

How late a delayed message reaches a connected consumer: its arrival (wall clock, in the benchmark's
process) minus its `deliverAt`. Each run publishes `rate × {args["seconds"]}` messages on a fresh
{args["partitions"]}-partition exactly-once topic before the first falls due, message `i` due at
`T0 + i / rate`, so that `rate` messages fall due every second; one consumer (a WebSocket with
`maxInFlight` 10,000 acking every frame, or a pull member long-polling 1000 at a time and acking each
poll) receives them. Embedded server (SQLite metadata, local engine). `early` counts deliveries before
`deliverAt` (must be 0).

Baseline, in the same run: the same number of messages **without** a delay, published from `T0` at the
same rate (a batch every 10 ms) to the same kind of consumer; their lateness is arrival − publish
timestamp. It is the floor the delayed figures compare to: what delivering at that rate costs on this
machine at this moment, whatever the delay.

| transport | messages | due msgs/s | count | late p50 ms | late p99 ms | max ms | early | received |
|---|---|---:|---:|---:|---:|---:|---:|---:|
{rows}

Caveats:
- The machine is shared and loaded now (2 cores, five other agents building and testing at the same
  time): the figures are this run's, side by side, not a capacity claim. Server, consumer and publisher
  all run on the same two cores.
- Where the time goes: a delayed message read before it is due becomes a lease row due at `deliverAt`.
  When it falls due, a WebSocket member's beat (at most every 20 ms, `delays.COALESCE_MS`) or a waiting
  long poll hands out every due row in one metadata transaction (SQLite here: one write lock, one
  commit) *before* sending, and the ack of such a message is a lease-row ack (another transaction).
  A message that is not delayed goes out as an in-memory lease with no metadata write at all: that is
  the gap between the two lines of a rate. A traced run at 100 due msgs/s showed the due-row hand-out
  taking ~6 ms once warm, lateness ~25–30 ms (20 of them the coalescing window), and 60–230 ms
  hand-outs while the machine's load was at its worst: on this loaded machine the metadata commit, not
  the wake-up, decides the tail.
- What would close the gap (not done): hand out rows falling due in the next ~100 ms ahead of time
  (held by the member, sent from memory at `deliverAt`), so that the commit is off the critical path.
- Lateness includes the consumer's own processing (JSON decoding in Python, acks): at the highest rates
  the single-process client is part of what is measured.
"""


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 5000, 10000])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--lead", type=float, default=8.0, help="seconds between the start and the first due time"
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(main(args))
    if not args.no_write:
        command = "python bench/delays.py " + " ".join(sys.argv[1:])
        write_results("delays", report, markdown(report, command.strip()))
