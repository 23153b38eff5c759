"""Spark benchmark: the ``queuecore`` data source's batch read, by bulk reads (the default) and by the JSON
pages (``readFormat=json``, the path before bulk reads), beside ``spark.read.json`` of the same records from a
local file, and its write, on ``local[2]`` against one ``queuecore-server``.

    .venv/bin/python bench/spark_bench.py [--messages 1000000] [--write-messages 200000] [--rounds 3]
        [--engines local,jetstream]

``local`` is the embedded default (SQLite, local log engine); ``jetstream`` the same server on a 3-node NATS
cluster of the run's own (``infra/nats_cluster.py``; SQLite metadata, as metadata is not what is measured).
Each read is materialised whole with Spark's ``noop`` sink (every column of every row is produced). The file
holds the very messages the stream read answers, one JSON object a line, read with the connector's schema
given (no inference pass). The three reads of a round run in a rotating order. Medians over ``--rounds``;
writes bench/results/spark.md and spark.json.
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
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

from infra.nats_cluster import NatsCluster
from tests.fixtures.nats import free_base_port
from tests.spark.support import Server, unique

READS = ("bulk", "json", "file")


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


def local_spark(extra: dict[str, str] | None = None) -> Any:
    """The benchmarks' Spark: ``local[2]``, a 1 GB driver, no UI, UTC, the ``queuecore`` source registered;
    ``extra``: further settings."""
    from pyspark.sql import SparkSession
    from queuecore_spark import QueueCoreDataSource

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for name, value in (extra or {}).items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(QueueCoreDataSource)
    return spark


def run_engine(engine: str, args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """Publish, then time the three reads (and the write) against one server on ``engine``."""
    from pyspark.sql import functions as F
    from queuecore_spark import SCHEMA

    cluster = None
    settings: dict[str, str] = {}
    if engine == "jetstream":
        cluster = NatsCluster(tmp / "nats", base_port=free_base_port()).start()
        settings = {"QUEUECORE_LOG_ENGINE": "jetstream", "QUEUECORE_NATS_URL": cluster.url}
    server = Server(tmp / f"data-{engine}", settings=settings)
    server.data_dir.mkdir()
    server.cli("migrate")
    key = server.bootstrap("spark-bench")["development"]
    server.start()
    rows: list[dict[str, Any]] = []
    try:
        http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        topic = unique("bench")
        http.post("/v1/topics", json={"name": topic, "partitions": args.partitions}).raise_for_status()
        t = timed(lambda: publish(server.url, key, topic, args.messages))
        print(f"{engine}: published {args.messages} messages in {t:.1f} s", flush=True)
        records = tmp / f"records-{engine}.json"
        assert dump(server.url, key, topic, args.partitions, records) == args.messages

        spark = local_spark()

        def source(read_format: str):  # type: ignore[no-untyped-def]
            df = spark.read.format("queuecore").option("topic", topic).option("apiKey", key)
            return df.option("baseUrl", server.url).option("readFormat", read_format).load()

        actions = {
            "bulk": lambda: source("records").write.format("noop").mode("overwrite").save(),
            "json": lambda: source("json").write.format("noop").mode("overwrite").save(),
            "file": lambda: (
                spark.read.schema(SCHEMA).json(str(records)).write.format("noop").mode("overwrite").save()
            ),
        }
        assert source("records").count() == source("json").count() == args.messages
        rows.append(
            {
                "engine": engine,
                "round": 0,
                "what": "warm-up",
                "seconds": sum(timed(a) for a in actions.values()),
            }
        )
        for r in range(1, args.rounds + 1):
            # Rotate who goes first, so none always meets a warmer cache.
            order = READS[r % 3 :] + READS[: r % 3]
            for what in order:
                rows.append({"engine": engine, "round": r, "what": what, "seconds": timed(actions[what])})
                print(rows[-1], flush=True)
            if not args.write_messages:
                continue
            target = unique("bench.write")
            http.post("/v1/topics", json={"name": target, "partitions": args.partitions}).raise_for_status()
            written = (
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
            written.count()

            def write(target: str = target, written=written) -> None:  # type: ignore[no-untyped-def]
                written.write.format("queuecore").option("topic", target).option("apiKey", key).option(
                    "baseUrl", server.url
                ).mode("append").save()

            rows.append({"engine": engine, "round": r, "what": "write", "seconds": timed(write)})
            written.unpersist()
            described = http.get(f"/v1/topics/{target}").json()
            assert sum(p["latestOffset"] for p in described["partitionDetails"]) == args.write_messages
            print(rows[-1], flush=True)
        spark.stop()
    finally:
        server.stop()
        if cluster is not None:
            cluster.stop()
    return rows


def figures_of(
    rows: list[dict[str, Any]], engine: str, messages: int, write_messages: int
) -> dict[str, float]:
    """An engine's medians, their ratios to ``spark.read.json``, and the median of each round's own ratio
    (the three reads of a round run back to back, so a round's ratio is the least touched by other work)."""

    def of(what: str) -> list[dict[str, Any]]:
        return [x for x in rows if x["engine"] == engine and x["what"] == what]

    def median(what: str, n: int) -> float:
        return statistics.median(n / float(x["seconds"]) for x in of(what))

    def per_round(what: str) -> float:
        file = {x["round"]: float(x["seconds"]) for x in of("file")}
        return statistics.median(file[x["round"]] / float(x["seconds"]) for x in of(what))

    bulk, pages, file = (median(what, messages) for what in READS)
    out = {
        "read_bulk_msgs_per_s": bulk,
        "read_json_pages_msgs_per_s": pages,
        "read_json_file_msgs_per_s": file,
        "ratio_bulk": bulk / file,
        "ratio_json_pages": pages / file,
        "ratio_bulk_per_round": per_round("bulk"),
        "ratio_json_pages_per_round": per_round("json"),
    }
    if write_messages:
        out["write_msgs_per_s"] = median("write", write_messages)
    return out


def render(result: dict[str, Any]) -> str:
    """bench/results/spark.md of one run (``spark.json``)."""
    engines = list(result["engines"])
    rounds = max(int(x["round"]) for x in result["rounds"])
    targets = {"local": "≥ 1.0", "jetstream": "≥ 0.5"}
    lines = [
        "# Spark benchmark: the queuecore data source",
        "",
        (
            "One `queuecore-server` (embedded metadata; the local engine, or a 3-node NATS JetStream cluster on "
            f"the same machine) and Spark `local[2]` (pyspark {result.get('pyspark', '?')}, driver 1g) on "
            f"one {result.get('machine', '?')} machine with {result['cpus']} CPUs shared by all of them (and by "
            f"other work), commit {result['commit']}. {result['messages']:,} messages of 200 bytes in a topic of "
            f"{result['partitions']} partitions; medians of {rounds} rounds after a warm-up round; produced by "
            "`bench/spark_bench.py`. The machine is shared: compare the ratios, not the absolute figures "
            'across runs. "÷ file" is the ratio of the medians; "per round" the median of each round\'s own '
            "ratio (a round's three reads run back to back, so it is the least touched by other work)."
        ),
        "",
        "| engine | read | msgs/s | ÷ file | per round |",
        "|---|---|---:|---:|---:|",
    ]
    for engine in engines:
        f = result["engines"][engine]
        lines += [
            (
                f'| {engine} | bulk read, `spark.read.format("queuecore")` (target {targets.get(engine, "")}) '
                f"| {f['read_bulk_msgs_per_s']:,.0f} | **{f['ratio_bulk']:.2f}** | **{f['ratio_bulk_per_round']:.2f}** |"
            ),
            (
                f"| {engine} | JSON pages, `readFormat=json` (the read before bulk reads) "
                f"| {f['read_json_pages_msgs_per_s']:,.0f} | {f['ratio_json_pages']:.2f} "
                f"| {f['ratio_json_pages_per_round']:.2f} |"
            ),
            (
                f'| {engine} | `spark.read.json` of the same records from a local file ("file") '
                f"| {f['read_json_file_msgs_per_s']:,.0f} | 1.00 | 1.00 |"
            ),
        ]
        if "write_msgs_per_s" in f:
            lines.append(
                f'| {engine} | write, `df.write.format("queuecore")` ({result["write_messages"]:,} rows, 2 tasks) '
                f"| {f['write_msgs_per_s']:,.0f} | | |"
            )
    lines += [
        "",
        "Every round:",
        "",
        "| engine | round | what | seconds |",
        "|---|---:|---|---:|",
        *(
            f"| {x['engine']} | {x['round']} | {x['what']} | {float(x['seconds']):.2f} |"
            for x in result["rounds"]
        ),
        "",
        (
            "Reads are materialised with the `noop` sink (every column of every row is produced). The file "
            "read is given the connector's schema, so it makes no inference pass."
        ),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--write-messages", type=int, default=200_000, help="0: no write")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engines", default="local,jetstream")
    parser.add_argument("--render-only", action="store_true", help="spark.md again from spark.json, no run")
    args = parser.parse_args()
    if args.render_only:
        result = json.loads((RESULTS / "spark.json").read_text())
        for engine in result["engines"]:
            result["engines"][engine] = figures_of(
                result["rounds"], engine, result["messages"], result["write_messages"]
            )
        (RESULTS / "spark.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "spark.md").write_text(render(result))
        return
    engines = [e for e in args.engines.split(",") if e]
    os.environ["PYSPARK_PYTHON"] = sys.executable

    rows: list[dict[str, Any]] = []
    for engine in engines:
        tmp = Path(tempfile.mkdtemp(prefix=f"spark-bench-{engine}-"))
        try:
            rows += run_engine(engine, args, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    result = {
        "messages": args.messages,
        "write_messages": args.write_messages,
        "partitions": args.partitions,
        "engines": {e: figures_of(rows, e, args.messages, args.write_messages) for e in engines},
        "rounds": rows,
        "commit": commit,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "pyspark": __import__("pyspark").__version__,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "spark.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "spark.md").write_text(render(result))
    print(render(result))


if __name__ == "__main__":
    main()
