"""Scale-out benchmark: QueueCore on a 3-node NATS JetStream cluster vs nats-py on the same cluster, one run.

The deployment is ``make cluster``'s (``infra/cluster.py``): 3 nats-server 2.15 nodes with ``sync_interval:
always``, Postgres metadata, Redis limits, 3 API processes, HAProxy in front. Same 200-byte JSON payloads
(``support.payload``) everywhere. Each round runs every shape once; figures are medians of
``--rounds``.

* **(a) batch publish**: wrk POSTs batches of 1000 through the front address (6 connections) to a
  1-partition and to a 3-partition R=3 topic; nats-py ``js.publish_async`` in windows of 1,000 into an
  R=3 stream, acks awaited (one connection, as a single client would).
* **(b) consume**: ``--messages`` pre-published on a 1-partition R=3 topic; one WebSocket consumer through
  the front address reads and acks them all (``maxInFlight`` 1000, one ack frame per delivered frame,
  exactly-once). JetStream: a durable pull consumer on an R=3 stream, ``fetch(1000)``, one ack each.
* **(c) publish→deliver** at ``--rate`` msgs/s for ``--seconds``: HTTP publish to API process 1, the
  WebSocket consumer on API process 2 (so every delivery crosses nodes through NATS). JetStream beside it:
  ``js.publish`` and a pull consumer on an R=3 stream.
* **(d) the curve**: HAProxy with 1, 2, then 3 API processes behind it, wrk single-message publish at
  ``--connections`` for ``--seconds-wrk`` (a 3-partition R=3 topic); and wrk straight at API process 1,
  no proxy ("direct"), to show what the proxy hop costs.

    .venv/bin/python bench/scaleout_bench.py [--rounds 3] [--messages 20000] [--profile]

Writes bench/results/scaleout.md and scaleout.json. Ports 23111-23313 (NATS) and 23400-23403 (front, API).
With ``--profile``, py-spy records API process 1 during one extra batch-publish and one single-publish
run and the top frames are written beside the results (``scaleout.profile-*.txt``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from support import (
    BIN,
    RESULTS,
    fill,
    jetstream_drain,
    jetstream_latency,
    machine,
    p50_p99_ms,
    payload,
    push_drain,
    push_latency,
    write_results,
    wrk,
)

from infra.cluster import Cluster

NATS_PORT, FRONT_PORT = 23111, 23400
LIMITS = "publish=10000000,consume=10000000,admin=100000"
PAYLOAD = json.dumps(payload(), separators=(",", ":")).encode()


# --- QueueCore ---------------------------------------------------------------------------------------


def qc_topic(cluster: Cluster, partitions: int, replicas: int = 3) -> str:
    name = f"bench-{secrets.token_hex(4)}"
    answer = httpx.post(
        f"{cluster.url}/v1/topics",
        json={"name": name, "partitions": partitions, "replicas": replicas},
        headers={"Authorization": f"Bearer {cluster.keys['production']}"},
        timeout=60,
    )
    answer.raise_for_status()
    return name


def qc_batch(cluster: Cluster, topic: str, seconds: int, connections: int = 6) -> dict[str, float]:
    body = json.dumps({"messages": [{"data": payload(i)} for i in range(1000)]}, separators=(",", ":"))
    got = wrk(
        f"{cluster.url}/v1/topics/{topic}/messages/batch",
        cluster.keys["production"],
        body,
        connections,
        seconds,
    )
    return {"msgs_per_s": got["rps"] * 1000, "p50_ms": got["p50_ms"], "p99_ms": got["p99_ms"]}


def qc_single(
    cluster: Cluster, topic: str, seconds: int, connections: int, url: str = ""
) -> dict[str, float]:
    body = json.dumps({"data": payload()}, separators=(",", ":"))
    return wrk(
        f"{url or cluster.url}/v1/topics/{topic}/messages",
        cluster.keys["production"],
        body,
        connections,
        seconds,
    )


async def qc_fill(cluster: Cluster, topic: str, count: int) -> None:
    await fill(cluster.url, cluster.keys["production"], topic, count, payload)


async def qc_drain(cluster: Cluster, topic: str, count: int) -> float:
    """One WebSocket consumer through the front address; msgs/s from the first frame to the last ``acked``."""
    return await push_drain(cluster.front_port, cluster.keys["production"], topic, 1, count)


async def qc_latency(cluster: Cluster, seconds: float, rate: int) -> tuple[float, float]:
    """Publish on API process 1, consume on API process 2: publish→deliver p50/p99 in ms."""
    topic = qc_topic(cluster, 1)
    pub_port, sub_port = cluster.api_ports[0], cluster.api_ports[1]
    delivered, _ = await push_latency(
        cluster.keys["production"],
        topic,
        seconds,
        rate,
        payload,
        publish_port=pub_port,
        consume_port=sub_port,
    )
    return p50_p99_ms(delivered)


# --- nats-py straight into JetStream (R=3 streams of the same cluster) -------------------------------


async def _stream(url: str) -> tuple[Any, Any, str]:
    import nats
    from nats.js.api import StorageType

    nc = await nats.connect(url.split(","))
    js = nc.jetstream()
    stream = f"BENCH{secrets.token_hex(3).upper()}"
    await js.add_stream(name=stream, subjects=[f"{stream}.>"], storage=StorageType.FILE, num_replicas=3)
    return nc, js, stream


async def js_batch(url: str, seconds: float, window: int = 1000) -> float:
    nc, js, stream = await _stream(url)
    sent = 0
    try:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            acks = [await js.publish_async(f"{stream}.a", PAYLOAD) for _ in range(window)]
            await asyncio.gather(*acks)
            sent += window
        return sent / (time.perf_counter() - started)
    finally:
        await js.delete_stream(stream)
        await nc.close()


async def js_drain(url: str, count: int) -> float:
    nc, js, stream = await _stream(url)
    try:
        for start in range(0, count, 1000):
            await asyncio.gather(
                *[
                    await js.publish_async(f"{stream}.a", PAYLOAD)
                    for _ in range(start, min(count, start + 1000))
                ]
            )
        return await jetstream_drain(nc, js, stream, 1, count)
    finally:
        await js.delete_stream(stream)
        await nc.close()


async def js_latency(url: str, seconds: float, rate: int) -> tuple[float, float]:
    nc, js, stream = await _stream(url)
    try:
        return await jetstream_latency(js, stream, seconds, rate, payload)
    finally:
        await js.delete_stream(stream)
        await nc.close()


# --- profile -----------------------------------------------------------------------------------------


def profile(cluster: Cluster, name: str, run: Any, seconds: int) -> Path:
    """py-spy (top frames by own and total time, --nonblocking) on API process 1 while ``run`` loads it."""
    out = RESULTS / f"scaleout.profile-{name}.txt"
    raw = Path(tempfile.mkdtemp()) / "profile.txt"
    spy = subprocess.Popen(
        [str(BIN / "py-spy"), "record", "--pid", str(cluster.api[0].pid), "--duration", str(seconds),
         "--rate", "200", "--nonblocking", "--format", "raw", "--output", str(raw)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1)
    run()
    spy.wait(timeout=seconds + 60)
    out.write_text(summarise_folded(raw.read_text()))
    return out


def summarise_folded(folded: str, top: int = 40) -> str:
    """Own time and total (inclusive) time per frame from py-spy's folded stacks."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    for line in folded.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        samples += count
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            total[frame] = total.get(frame, 0) + count
    lines = [f"{samples} samples (all threads)", "", "own time:"]
    lines += [f"{100 * n / samples:5.1f}%  {f}" for f, n in sorted(own.items(), key=lambda x: -x[1])[:top]]
    lines += ["", "total time:"]
    lines += [f"{100 * n / samples:5.1f}%  {f}" for f, n in sorted(total.items(), key=lambda x: -x[1])[:top]]
    return "\n".join(lines) + "\n"


# --- runner ------------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="qc-scaleout-"))
    cluster = Cluster(
        root,
        front_port=FRONT_PORT,
        api_ports=(FRONT_PORT + 1, FRONT_PORT + 2, FRONT_PORT + 3),
        nats_port=NATS_PORT,
        database=f"qc_bench_scaleout_{os.getpid()}",
        rate_limit_prefix=f"qc:bench:{os.getpid()}:",
        demo_user=False,
        log_level="WARNING",
    )
    raw: dict[str, list[Any]] = {
        k: []
        for k in (
            "qc_batch_1p", "qc_batch_3p", "js_batch", "qc_drain", "js_drain", "qc_latency", "js_latency",
            "curve_1", "curve_2", "curve_3", "curve_direct", "load_average",
        )
    }  # fmt: skip
    profiles: dict[str, str] = {}
    try:
        cluster.start(fresh=True)
        cluster.set_limits(LIMITS)
        assert cluster.nats is not None
        nats_url = cluster.nats.url
        one, three = qc_topic(cluster, 1), qc_topic(cluster, 3)
        single_topic = qc_topic(cluster, 3)
        for r in range(args.rounds):
            raw["load_average"].append(os.getloadavg()[0])
            raw["qc_batch_1p"].append(qc_batch(cluster, one, args.seconds_wrk))
            raw["qc_batch_3p"].append(qc_batch(cluster, three, args.seconds_wrk))
            raw["js_batch"].append(asyncio.run(js_batch(nats_url, args.seconds_wrk)))
            print(
                f"round {r + 1} (a): {raw['qc_batch_1p'][-1]['msgs_per_s']:,.0f} / {raw['qc_batch_3p'][-1]['msgs_per_s']:,.0f} vs {raw['js_batch'][-1]:,.0f}",
                flush=True,
            )
            topic = qc_topic(cluster, 1)
            asyncio.run(qc_fill(cluster, topic, args.messages))
            raw["qc_drain"].append(asyncio.run(qc_drain(cluster, topic, args.messages)))
            raw["js_drain"].append(asyncio.run(js_drain(nats_url, args.messages)))
            print(f"round {r + 1} (b): {raw['qc_drain'][-1]:,.0f} vs {raw['js_drain'][-1]:,.0f}", flush=True)
            raw["qc_latency"].append(asyncio.run(qc_latency(cluster, args.seconds, args.rate)))
            raw["js_latency"].append(asyncio.run(js_latency(nats_url, args.seconds, args.rate)))
            print(f"round {r + 1} (c): {raw['qc_latency'][-1]} vs {raw['js_latency'][-1]}", flush=True)
            for n in (1, 2, 3):
                cluster.balance(n)
                raw[f"curve_{n}"].append(qc_single(cluster, single_topic, args.seconds_wrk, args.connections))
            raw["curve_direct"].append(
                qc_single(cluster, single_topic, args.seconds_wrk, args.connections, url=cluster.api_urls[0])
            )
            print(
                f"round {r + 1} (d): {[raw[f'curve_{n}'][-1]['rps'] for n in (1, 2, 3, 'direct')]}",
                flush=True,
            )
        if args.profile:
            profiles["batch"] = str(profile(cluster, "batch", lambda: qc_batch(cluster, one, 10), 10))
            profiles["single"] = str(
                profile(cluster, "single", lambda: qc_single(cluster, single_topic, 10, args.connections), 10)
            )
    finally:
        cluster.stop()
        asyncio.run(_drop(cluster))
        shutil.rmtree(root, ignore_errors=True)

    def med(key: str, field: str) -> float:
        return median([x[field] for x in raw[key]])

    summary = {
        "batch_publish": {
            "queuecore_1_partition_msgs_per_s": med("qc_batch_1p", "msgs_per_s"),
            "queuecore_3_partitions_msgs_per_s": med("qc_batch_3p", "msgs_per_s"),
            "queuecore_1_partition_p50_ms": med("qc_batch_1p", "p50_ms"),
            "queuecore_3_partitions_p50_ms": med("qc_batch_3p", "p50_ms"),
            "nats_py_msgs_per_s": median(raw["js_batch"]),
        },
        "consume": {
            "queuecore_msgs_per_s": median(raw["qc_drain"]),
            "jetstream_pull_msgs_per_s": median(raw["js_drain"]),
        },
        "latency": {
            "queuecore_p50_ms": median([p for p, _ in raw["qc_latency"]]),
            "queuecore_p99_ms": median([p for _, p in raw["qc_latency"]]),
            "jetstream_p50_ms": median([p for p, _ in raw["js_latency"]]),
            "jetstream_p99_ms": median([p for _, p in raw["js_latency"]]),
        },
        "curve": {
            str(n): {f: med(f"curve_{n}", f) for f in ("rps", "p50_ms", "p99_ms")}
            for n in (1, 2, 3, "direct")
        },
    }
    return {
        "run": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "args": vars(args),
        "raw": raw,
        "median": summary,
        "load_average_1min_at_round_start": raw["load_average"],
        "profiles": profiles,
    }


async def _drop(cluster: Cluster) -> None:
    from infra.cluster import drop_database

    await drop_database(cluster.postgres_admin, cluster.database)


def write(report: dict[str, Any]) -> None:
    m = report["median"]
    a, b, c, d = m["batch_publish"], m["consume"], m["latency"], m["curve"]
    best = max(a["queuecore_1_partition_msgs_per_s"], a["queuecore_3_partitions_msgs_per_s"])
    args = report["args"]
    text = (
        f"""# Scale-out benchmark: QueueCore on a 3-node JetStream cluster

`.venv/bin/python bench/scaleout_bench.py --rounds {args["rounds"]}` ({report["run"]}, {report["machine"]});
medians of {args["rounds"]} rounds, every system in the same rounds. `make cluster`'s shape: 3 nats-server
2.15 nodes (`sync_interval: always`), Postgres, Redis, 3 API processes, HAProxy in front; all on the
same 2 cores as the clients. 200-byte JSON payloads; every topic and stream R=3. The machine is shared:
1-minute load average at the start of each round {", ".join(f"{x:.1f}" for x in report["load_average_1min_at_round_start"])}.

| figure | QueueCore | nats-py on the same cluster | ratio | target |
|---|---:|---:|---:|---|
| (a) batch publish, batches of 1000, msgs/s (1-partition topic) | {a["queuecore_1_partition_msgs_per_s"]:,.0f} | {a["nats_py_msgs_per_s"]:,.0f} | {a["queuecore_1_partition_msgs_per_s"] / a["nats_py_msgs_per_s"]:.2f}× | ≥ 2× |
| (a) the same, 3-partition topic | {a["queuecore_3_partitions_msgs_per_s"]:,.0f} | | {a["queuecore_3_partitions_msgs_per_s"] / a["nats_py_msgs_per_s"]:.2f}× | |
| (b) one consumer, consume+ack, msgs/s | {b["queuecore_msgs_per_s"]:,.0f} | {b["jetstream_pull_msgs_per_s"]:,.0f} | {b["queuecore_msgs_per_s"] / b["jetstream_pull_msgs_per_s"]:.2f}× | ≥ 2× |
| (c) publish→deliver p50 ms, {args["rate"]:,} msgs/s, across two API processes | {c["queuecore_p50_ms"]:.2f} | {c["jetstream_p50_ms"]:.2f} | | |
| (c) publish→deliver p99 ms | {c["queuecore_p99_ms"]:.2f} | {c["jetstream_p99_ms"]:.2f} | | ≤ 15 ms |

(d) single-message publish through HAProxy, {args["connections"]} connections (wrk), {args["seconds_wrk"]} s:

| API processes behind the address | req/s | p50 ms | p99 ms |
|---:|---:|---:|---:|
"""
        + "\n".join(
            f"| {n} | {d[n]['rps']:,.0f} | {d[n]['p50_ms']:.1f} | {d[n]['p99_ms']:.1f} |"
            for n in ("1", "2", "3")
        )
        + f"""
| 1, no proxy (wrk straight at API process 1) | {d["direct"]["rps"]:,.0f} | {d["direct"]["p50_ms"]:.1f} | {d["direct"]["p99_ms"]:.1f} |

Batch publish p50 per request (1000 messages): {a["queuecore_1_partition_p50_ms"]:.1f} ms (1 partition),
{a["queuecore_3_partitions_p50_ms"]:.1f} ms (3 partitions). Best QueueCore batch figure: {best:,.0f} msgs/s.

How each side is driven:
- (a) QueueCore: wrk, 6 connections through HAProxy, `POST /v1/topics/{{name}}/messages/batch` with 1000
  messages; each answer waits for JetStream's quorum ack of an atomic batch (3 partitions: a commit record,
  then one atomic batch per partition). nats-py: one connection, `js.publish_async` ×1000 then all acks.
- (b) QueueCore: one WebSocket through HAProxy, `maxInFlight` 1000, an ack frame per delivered frame,
  exactly-once topic (acks durable in Postgres before `acked`). JetStream: one durable pull consumer (R=3),
  `fetch(1000)`, `ack()` per message.
- (c) QueueCore: `POST` to API process 1 (keep-alive raw HTTP client), the WebSocket consumer on API
  process 2; the wake-up crosses processes through NATS. JetStream: `js.publish` + pull `fetch(100)`.
- (d) HAProxy restarted with 1, 2, 3 servers in its backend; the idle API processes stay up. "No proxy":
  the same wrk run straight at API process 1, HAProxy still up with all 3.

Raw per-round figures: `scaleout.json`. Analysis: `bench/README.md` (Scale-out).
"""
    )
    write_results("scaleout", report, text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=5.0, help="latency run length")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds-wrk", type=int, default=8, help="each wrk and nats-py publish run")
    parser.add_argument("--connections", type=int, default=50, help="(d) wrk connections")
    parser.add_argument("--profile", action="store_true", help="py-spy on API process 1 after the rounds")
    parser.add_argument("--no-write", action="store_true", help="print only (trial runs)")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install -y wrk (make bench does it)")
    report = run(args)
    if not args.no_write:
        write(report)
    print(json.dumps(report["median"], indent=2))


if __name__ == "__main__":
    main()
