"""What the benchmark scripts share, so that each measures its systems the same way: paths, the 200-byte
payload, percentiles and medians, pacing at a rate, wrk runs, one WebSocket consumer's drain and
publish→deliver runs against a QueueCore server, the JetStream latency run beside them, and writing
``results/<name>.json`` and ``.md``. The server launcher is ``bench_server.BenchServer``.

Scripts import it by name (``sys.path`` holds ``bench/`` when a script runs): ``from support import ...``.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import httpx
import rawhttp

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
RESULTS = ROOT / "bench" / "results"

Message = Callable[[int], dict[str, Any]]
Acks = Literal["per frame", "every 20 ms", "none"]


def payload(i: int = 0) -> dict[str, Any]:
    """A 200-byte JSON message."""
    base = {"type": "order.created", "orderId": f"ord_{i:08d}", "amount": 9900, "currency": "usd", "note": ""}
    size = len(json.dumps(base, separators=(",", ":")))
    base["note"] = "x" * (200 - size)
    return base


def stamped(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` carrying its send time (this process's ``perf_counter``), for publish→deliver."""
    return {**message, "sentAt": time.perf_counter()}


def percentile(values: list[float], q: float) -> float:
    """The value at quantile ``q`` (0 to 1) of ``values``: the ``int(q * n)``-th smallest."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def p50_p99_ms(seconds: list[float]) -> tuple[float, float]:
    """p50 and p99 of latencies in seconds, in milliseconds."""
    return percentile(seconds, 0.5) * 1000, percentile(seconds, 0.99) * 1000


def machine() -> str:
    """The machine line of a report: architecture, CPUs, Python."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def write_results(name: str, report: dict[str, Any], markdown: str) -> None:
    """``results/<name>.json`` (the whole report) and ``results/<name>.md``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)


async def paced(rate: int, total: int, send: Callable[[int], Awaitable[Any]], in_flight: int = 100) -> None:
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


# --- wrk ---------------------------------------------------------------------------------------------

WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
wrk.body = [==[{body}]==]
"""


def wrk(
    url: str, key: str, body: str, connections: int, seconds: int, threads: int = 2, extra: str = ""
) -> dict[str, float]:
    """POST ``body`` to ``url`` with wrk: requests/s and the p50/p99 in ms. Any non-2xx answer fails.
    ``extra``: more Lua for the script (a ``request`` function that sets per-request headers, say)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(WRK_SCRIPT.format(key=key, body=body) + extra)
        script = f.name
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", script, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    os.unlink(script)
    rps = float(_found(r"Requests/sec:\s+([\d.]+)", out)[0])
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if non2xx:
        raise RuntimeError(f"wrk saw {non2xx.group(1)} non-2xx answers:\n{out}")

    def pct(name: str) -> float:
        value, unit = _found(rf"\s{name}%\s+([\d.]+)(us|ms|s)", out)
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    return {"rps": rps, "p50_ms": pct("50"), "p99_ms": pct("99")}


def _found(pattern: str, text: str) -> tuple[str, ...]:
    match = re.search(pattern, text)
    if match is None:
        raise RuntimeError(f"wrk's output has no {pattern!r}:\n{text}")
    return match.groups()


# --- one QueueCore server: fill, drain, publish→deliver ----------------------------------------------


async def fill(url: str, key: str, topic: str, count: int, message: Message) -> None:
    """Publish ``message(0..count-1)`` to ``topic`` in batches of 1,000."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
        for start in range(0, count, 1000):
            body = {"messages": [{"data": message(i)} for i in range(start, min(count, start + 1000))]}
            (await http.post(f"/v1/topics/{topic}/messages/batch", json=body)).raise_for_status()


async def push_drain(port: int, key: str, topic: str, consumers: int, count: int) -> float:
    """``consumers`` WebSockets of group ``g`` (``maxInFlight`` 1000) read ``topic`` from the earliest
    offset and ack every frame; msgs/s from the first frame to ``count`` acks answered. A drain that does
    not see every ack answered within ``BENCH_DRAIN_TIMEOUT`` seconds (300) fails."""
    from websockets.asyncio.client import connect

    url = f"ws://127.0.0.1:{port}/v1/topics/{topic}/consume?group=g&startFrom=earliest&maxInFlight=1000"
    headers = {"Authorization": f"Bearer {key}"}
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


async def push_latency(
    key: str,
    topic: str,
    seconds: float,
    rate: int,
    message: Message,
    *,
    publish_port: int,
    consume_port: int | None,
    acks: Acks = "per frame",
) -> tuple[list[float], list[float]]:
    """Publish ``message(i)``, stamped, one at a time at ``rate`` for ``seconds`` through HTTP on
    ``publish_port``, with one WebSocket consumer of group ``g`` on ``consume_port`` from the latest offset
    (none when it is None); the consumer acks ``"per frame"``, ``"every 20 ms"`` or ``"none"`` (then with
    ``maxInFlight`` 10,000). Returns the publish→deliver latencies (empty without a consumer) and the
    publish answers' latencies, in seconds."""
    from websockets.asyncio.client import connect

    headers = {"Authorization": f"Bearer {key}"}
    total = int(seconds * rate)
    delivered: list[float] = []
    answered: list[float] = []
    ws: Any = None
    tasks: list[asyncio.Task[None]] = []
    if consume_port is not None:
        max_in_flight = 10_000 if acks == "none" else 1000
        url = (
            f"ws://127.0.0.1:{consume_port}/v1/topics/{topic}/consume"
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
    pool = rawhttp.Pool("127.0.0.1", publish_port, headers)
    path = f"/v1/topics/{topic}/messages"

    async def publish(i: int) -> None:
        sent = time.perf_counter()
        status = await pool.post(path, json.dumps({"data": stamped(message(i))}).encode())
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


# --- NATS JetStream ----------------------------------------------------------------------------------


async def jetstream_drain(nc: Any, js: Any, stream: str, consumers: int, count: int) -> float:
    """``consumers`` pull subscriptions of one durable consumer read ``count`` messages of ``stream``,
    ``fetch(1000)`` then one ``ack()`` each (nats-py has no batch ack for explicit acks); msgs/s."""
    import nats
    from nats.js.api import ConsumerConfig

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


async def jetstream_latency(
    js: Any, stream: str, seconds: float, rate: int, message: Message
) -> tuple[float, float]:
    """publish→deliver p50/p99 in ms through JetStream: ``js.publish`` of ``message(i)``, stamped, at
    ``rate`` for ``seconds`` into ``stream``, read by a pull consumer (``fetch(100)``) acking each."""
    import nats
    import nats.js.errors

    total = int(seconds * rate)
    latencies: list[float] = []
    sub = await js.pull_subscribe(f"{stream}.>", "lat")

    async def consume() -> None:
        while len(latencies) < total:
            try:
                msgs = await sub.fetch(100, timeout=0.5)
            except nats.errors.TimeoutError:
                continue
            except nats.js.errors.ServiceUnavailableError:
                # The pull consumer's leader is not answering for a moment (just created, or re-elected):
                # the reference is asked again, as its clients would.
                await asyncio.sleep(0.05)
                continue
            now = time.perf_counter()
            for m in msgs:
                latencies.append(now - json.loads(m.data)["sentAt"])
                await m.ack()

    reader = asyncio.create_task(consume())
    await paced(rate, total, lambda i: js.publish(f"{stream}.a", json.dumps(stamped(message(i))).encode()))
    await asyncio.wait_for(reader, 60)
    return p50_p99_ms(latencies)
