"""Spark benchmark: the ``queuecore`` data source's batch read beside ``spark.read.json`` of the same records
from a local file, and its write, on ``local[2]`` against one ``queuecore-server`` (embedded defaults).

    .venv/bin/python bench/spark_bench.py [--messages 1000000] [--write-messages 200000] [--rounds 3]

Each read is materialised whole with Spark's ``noop`` sink (every column of every row is produced). The file
holds the very messages the stream read answers, one JSON object a line, read with the connector's schema
given (no inference pass). Medians over ``--rounds``; writes bench/results/spark.md and spark.json.
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
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

from tests.spark.support import Server, unique


def payload(i: int) -> bytes:
    """A 200-byte JSON message body item."""
    base = f'{{"type":"order.created","orderId":"ord_{i:08d}","amount":9900,"currency":"usd","note":"'
    return (base + "x" * (200 - len(base) - 2) + '"}').encode()


def publish(url: str, key: str, topic: str, n: int) -> None:
    def batch(start: int) -> None:
        body = (
            b'{"messages":['
            + b",".join(b'{"data":' + payload(i) + b"}" for i in range(start, min(n, start + 1000)))
            + b"]}"
        )
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            r = http.post(f"/v1/topics/{topic}/messages/batch", content=body,
                          headers={"Content-Type": "application/json"})  # fmt: skip
            r.raise_for_status()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(batch, range(0, n, 1000)))


def dump(url: str, key: str, topic: str, partitions: int, path: Path) -> int:
    """Every message of the topic, as the stream read answers them, one JSON object a line."""
    count = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http, \
            path.open("wb") as out:  # fmt: skip
        for p in range(partitions):
            offset = 0
            while True:
                page = http.get(
                    f"/v1/topics/{topic}/partitions/{p}/messages",
                    params={"fromOffset": offset, "limit": 1000},
                ).json()
                if not page["data"]:
                    break
                for m in page["data"]:
                    out.write(json.dumps(m, separators=(",", ":")).encode() + b"\n")
                count += len(page["data"])
                offset = page["nextOffset"]
    return count


def timed(action) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--write-messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from queuecore_spark import SCHEMA, QueueCoreDataSource

    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
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
            records = Path(tmp) / "records.json"
            assert dump(server.url, key, topic, args.partitions, records) == args.messages

            spark = (
                SparkSession.builder.master("local[2]")
                .config("spark.driver.memory", "1g")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.session.timeZone", "UTC")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(QueueCoreDataSource)

            def read_queuecore() -> None:
                df = spark.read.format("queuecore").option("topic", topic).option("apiKey", key)
                df.option("baseUrl", server.url).load().write.format("noop").mode("overwrite").save()

            def read_file() -> None:
                spark.read.schema(SCHEMA).json(str(records)).write.format("noop").mode("overwrite").save()

            counted = spark.read.format("queuecore").option("topic", topic).option("apiKey", key)
            assert counted.option("baseUrl", server.url).load().count() == args.messages
            rows = [{"round": 0, "what": "warm-up", "seconds": timed(read_queuecore) + timed(read_file)}]
            for r in range(1, args.rounds + 1):
                # Alternate who goes first, so neither always meets a warmer cache.
                order = [("queuecore", read_queuecore), ("file", read_file)]
                for what, action in order if r % 2 else order[::-1]:
                    rows.append({"round": r, "what": what, "seconds": timed(action)})
                    print(rows[-1], flush=True)
                target = unique("bench.write")
                http.post(
                    "/v1/topics", json={"name": target, "partitions": args.partitions}
                ).raise_for_status()
                source = (
                    spark.range(0, args.write_messages, 1, 2)
                    .select(
                        F.format_string(
                            '{"type":"order.created","orderId":"ord_%08d","amount":9900,"currency":"usd","note":"%s"}',
                            F.col("id"),
                            F.lit("x" * 104),
                        ).alias("data")
                    )
                    .cache()
                )
                source.count()

                def write(target: str = target, source=source) -> None:  # type: ignore[no-untyped-def]
                    source.write.format("queuecore").option("topic", target).option("apiKey", key).option(
                        "baseUrl", server.url
                    ).mode("append").save()

                rows.append({"round": r, "what": "write", "seconds": timed(write)})
                source.unpersist()
                described = http.get(f"/v1/topics/{target}").json()
                assert sum(p["latestOffset"] for p in described["partitionDetails"]) == args.write_messages
                print(rows[-1], flush=True)
            spark.stop()
        finally:
            server.stop()

    def median(what: str, n: int) -> float:
        return statistics.median(n / x["seconds"] for x in rows if x["what"] == what)

    qc, fl, wr = (
        median("queuecore", args.messages),
        median("file", args.messages),
        median("write", args.write_messages),
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    result = {
        "messages": args.messages,
        "write_messages": args.write_messages,
        "partitions": args.partitions,
        "rounds": rows,
        "read_queuecore_msgs_per_s": qc,
        "read_json_file_msgs_per_s": fl,
        "ratio": qc / fl,
        "write_msgs_per_s": wr,
        "commit": commit,
        "cpus": os.cpu_count(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "spark.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Spark benchmark: the queuecore data source",
        "",
        (
            f"One `queuecore-server` (local engine, embedded metadata) and Spark `local[2]` (pyspark "
            f"{__import__('pyspark').__version__}, driver 1g) on one {platform.machine()} machine with "
            f"{os.cpu_count()} CPUs shared by both (and by other work), commit {commit}. {args.messages:,} messages of "
            f"200 bytes in a topic of {args.partitions} partitions; medians of {args.rounds} rounds after a warm-up "
            "round; produced by `bench/spark_bench.py`."
        ),
        "",
        "| | msgs/s |",
        "|---|---:|",
        f'| batch read, `spark.read.format("queuecore")` | {qc:,.0f} |',
        f"| `spark.read.json` of the same records from a local file | {fl:,.0f} |",
        f"| ratio (target ≥ 0.5) | {qc / fl:.2f} |",
        f'| write, `df.write.format("queuecore")` ({args.write_messages:,} rows, 2 tasks) | {wr:,.0f} |',
        "",
        "Every round:",
        "",
        "| round | what | seconds |",
        "|---:|---|---:|",
        *(f"| {x['round']} | {x['what']} | {x['seconds']:.2f} |" for x in rows),
        "",
        (
            "Reads are materialised with the `noop` sink (every column of every row is produced). The file "
            "read is given the connector's schema, so it makes no inference pass."
        ),
    ]
    (RESULTS / "spark.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
