"""Spark streaming benchmark: ``spark.readStream.format("queuecore")`` on ``local[2]`` against one
``queuecore-server`` (embedded defaults).

    .venv/bin/python bench/spark_stream_bench.py [--messages 1000000] [--rounds 3]
        [--latency-seconds 30] [--rate 1000]

Throughput: the topic of ``--messages`` read whole by the batch read and by a streaming query run with
``Trigger.AvailableNow`` (one micro-batch, and micro-batches of ``maxOffsetsPerTrigger`` = a fifth of the
topic), each into Spark's ``noop`` sink, in turn each round (order rotated); medians of ``--rounds``.

Latency: a streaming query from ``latest`` with a 1 s processing-time trigger into a ``foreachBatch`` sink
that collects each micro-batch on the driver, while a publisher sends ``--rate`` messages per second (in
batches of 50) for ``--latency-seconds``. Each message carries its send time; the latency of a message is
the time its row was in the collected micro-batch minus that time (publish → row visible in the sink).
Writes bench/results/spark_stream.md and spark_stream.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

from bench.spark_bench import local_spark, publish, timed
from tests.spark.support import Server, unique


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=1000, help="messages per second during the latency run")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import functions as F

    rows: list[dict[str, Any]] = []
    latencies: list[float] = []
    batches: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="spark-stream-bench-") as tmp:
        server = Server(Path(tmp) / "data")
        server.data_dir.mkdir()
        server.cli("migrate")
        key = server.bootstrap("spark-bench")["development"]
        server.start()
        try:
            http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
            topic = unique("bench")
            http.post("/v1/topics", json={"name": topic, "partitions": args.partitions}).raise_for_status()
            t = timed(lambda: publish(server.url, key, topic, args.messages))
            print(f"published {args.messages} messages in {t:.1f} s", flush=True)

            spark = local_spark(
                {"spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2"}
            )
            options = {"topic": topic, "apiKey": key, "baseUrl": server.url}
            checkpoints = iter(range(1_000_000))

            def batch_read() -> None:
                df = spark.read.format("queuecore").options(**options).load()
                df.write.format("noop").mode("overwrite").save()

            def stream_read(limit: int | None) -> None:
                stream = spark.readStream.format("queuecore").options(**options)
                stream = stream.option("startingOffsets", "earliest")
                if limit is not None:
                    stream = stream.option("maxOffsetsPerTrigger", str(limit))
                query = (
                    stream.load()
                    .writeStream.format("noop")
                    .option("checkpointLocation", str(Path(tmp) / f"cp-{next(checkpoints)}"))
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination()
                read = sum(int(p["numInputRows"]) for p in query.recentProgress)
                assert query.exception() is None and read == args.messages, read
                # Spark's own account: the time of its micro-batches (a running query's rate), without
                # the query's start (its Python source process, the first offsets) or its stop.
                triggers = sum(int(p["durationMs"]["triggerExecution"]) for p in query.recentProgress)
                in_batches.append({"limit": limit, "seconds": triggers / 1000})

            in_batches: list[dict[str, Any]] = []
            fifth = -(-args.messages // 5)
            runs = [
                ("batch read", batch_read),
                ("stream, availableNow", lambda: stream_read(None)),
                (f"stream, availableNow, maxOffsetsPerTrigger={fifth}", lambda: stream_read(fifth)),
            ]
            rows.append({"round": 0, "what": "warm-up", "seconds": timed(batch_read) + timed(runs[1][1])})
            for r in range(1, args.rounds + 1):
                for what, action in runs[r % 3 :] + runs[: r % 3]:
                    rows.append({"round": r, "what": what, "seconds": timed(action)})
                    print(rows[-1], flush=True)

            # -- latency: publish -> row visible in a foreachBatch sink, 1 s trigger -----------------------
            live = unique("bench.live")
            http.post("/v1/topics", json={"name": live, "partitions": args.partitions}).raise_for_status()

            def sink(df: Any, batch_id: int) -> None:
                started = time.time()
                sent = [
                    r[0] for r in df.select(F.get_json_object("data", "$.sentAt").cast("double")).collect()
                ]
                now = time.time()
                latencies.extend(now - s for s in sent if s is not None)
                batches.append({"rows": len(sent), "seconds": now - started})

            query = (
                spark.readStream.format("queuecore")
                .options(**{**options, "topic": live})
                .load()
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(Path(tmp) / "cp-live"))
                .trigger(processingTime="1 second")
                .start()
            )
            while not query.recentProgress:  # the first trigger has run: the query's start is behind us
                time.sleep(0.1)
            total = int(args.latency_seconds * args.rate)
            sent = 0

            def publisher() -> None:
                nonlocal sent
                with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as client:
                    began = time.time()
                    while sent < total:
                        due = began + sent / args.rate
                        pause = due - time.time()
                        if pause > 0:
                            time.sleep(pause)
                        items = [{"data": {"sentAt": time.time(), "n": sent + i}} for i in range(50)]
                        client.post(f"/v1/topics/{live}/messages/batch", json={"messages": items})
                        sent += 50

            thread = threading.Thread(target=publisher)
            thread.start()
            thread.join()
            deadline = time.time() + 60
            while len(latencies) < sent and time.time() < deadline:
                time.sleep(0.2)
            query.stop()
            assert len(latencies) == sent, (len(latencies), sent)
            spark.stop()
        finally:
            server.stop()

    def median(what: str) -> float:
        return statistics.median(args.messages / x["seconds"] for x in rows if x["what"] == what)

    batch = median("batch read")
    streams = {what: median(what) for what, _ in runs[1:]}
    in_triggers = {
        what: statistics.median(args.messages / x["seconds"] for x in in_batches[1:] if x["limit"] == limit)
        for what, limit in ((runs[1][0], None), (runs[2][0], fifth))
    }
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    busy = [b for b in batches if b["rows"]]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    result = {
        "messages": args.messages,
        "partitions": args.partitions,
        "rounds": rows,
        "batch_read_msgs_per_s": batch,
        "stream_msgs_per_s": streams,
        "stream_msgs_per_s_in_micro_batches": in_triggers,
        "latency_seconds": {"p50": p50, "p99": p99, "max": max(latencies), "count": len(latencies)},
        "latency_run": {"seconds": args.latency_seconds, "rate": args.rate, "micro_batches": len(busy)},
        "commit": commit,
        "cpus": os.cpu_count(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "spark_stream.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        '# Spark streaming benchmark: `spark.readStream.format("queuecore")`',
        "",
        (
            f"One `queuecore-server` (local engine, embedded metadata) and Spark `local[2]` (pyspark "
            f"{__import__('pyspark').__version__}, driver 1g) on one {platform.machine()} machine with "
            f"{os.cpu_count()} CPUs shared by both (and by other work), commit {commit}; produced by "
            "`bench/spark_stream_bench.py`."
        ),
        "",
        (
            f"## Throughput ({args.messages:,} messages of 200 bytes, {args.partitions} partitions; medians of "
            f"{args.rounds} rounds after a warm-up, the three runs in turn, into the `noop` sink)"
        ),
        "",
        "| | msgs/s | of the batch read (target ≥ 0.8) |",
        "|---|---:|---:|",
        f"| batch read | {batch:,.0f} | 1.00 |",
        *(f"| {what} | {value:,.0f} | {value / batch:.2f} |" for what, value in streams.items()),
        *(
            f"| {what}: in its micro-batches (Spark's triggerExecution, without the query's start) | "
            f"{value:,.0f} | {value / batch:.2f} |"
            for what, value in in_triggers.items()
        ),
        "",
        (
            f"## Latency, publish → row visible in a `foreachBatch` sink (1 s trigger; {args.rate:,} msgs/s "
            f"for {args.latency_seconds:g} s, batches of 50)"
        ),
        "",
        "| | seconds |",
        "|---|---:|",
        f"| p50 (target ≤ 2) | {p50:.2f} |",
        f"| p99 | {p99:.2f} |",
        f"| max | {max(latencies):.2f} |",
        "",
        (
            f"{len(latencies):,} messages in {len(busy)} non-empty micro-batches; collecting a micro-batch on "
            f"the driver took {statistics.median(b['seconds'] for b in busy):.2f} s (median)."
        ),
        "",
        "Every throughput round:",
        "",
        "| round | what | seconds |",
        "|---:|---|---:|",
        *(f"| {x['round']} | {x['what']} | {x['seconds']:.2f} |" for x in rows),
    ]
    (RESULTS / "spark_stream.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
