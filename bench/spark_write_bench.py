"""Spark write benchmark: the ``queuecore`` data source's write (and, for scale, its batch read beside
``spark.read.json`` of the same records from a local file), on ``local[2]`` against one ``queuecore-server``
(embedded defaults). bench/spark_bench.py is the read benchmark (bulk reads, JSON pages, both engines).

    .venv/bin/python bench/spark_write_bench.py [--messages 1000000] [--write-messages 200000] [--rounds 3]
        [--old-writer 77534ad]

The write runs three ways each round, in turn (order rotated): the pipelined writer as shipped; the same
with ``maxInFlight=1`` (one request at a time per task); and the writer of commit ``--old-writer`` (before
pipelining: Spark rows, batches across partitions, one request at a time), loaded from git as the package
``queuecore_spark_v0`` and registered as ``queuecore_v0``, so the ratio is measured side by side.

Each read is materialised whole with Spark's ``noop`` sink (every column of every row is produced). The file
holds the very messages the stream read answers, one JSON object a line, read with the connector's schema
given (no inference pass). Medians over ``--rounds``; writes bench/results/spark_write.md and spark_write.json.
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
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

from bench.spark_bench import dump, local_spark, publish, timed
from tests.spark.support import Server, unique


def old_connector(commit: str, into: Path) -> Path:
    """The connector's package as of ``commit``, copied to ``into/queuecore_spark_v0`` (returns ``into``)."""
    package = into / "queuecore_spark_v0"
    package.mkdir(parents=True)
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", commit, "spark/src/queuecore_spark/"],
        check=True, capture_output=True, text=True, cwd=ROOT,
    ).stdout.split()  # fmt: skip
    for path in listed:
        if path.endswith(".py"):
            source = subprocess.run(
                ["git", "show", f"{commit}:{path}"], check=True, capture_output=True, cwd=ROOT
            ).stdout
            (package / Path(path).name).write_bytes(source)
    return into


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and its descendants (alive, or waited for), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    total, todo = 0.0, [pid]
    while todo:
        at = todo.pop()
        total += stats.get(at, (0, 0.0))[1]
        todo.extend(child for child, (parent, _) in stats.items() if parent == at)
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--write-messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old-writer", default="77534ad", help="the commit whose writer is compared")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import functions as F
    from queuecore_spark import SCHEMA

    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        # The old connector, importable here and in Spark's Python workers (they inherit PYTHONPATH).
        old_path = str(old_connector(args.old_writer, Path(tmp) / "old"))
        sys.path.insert(0, old_path)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (old_path, os.environ.get("PYTHONPATH")) if p)
        from queuecore_spark_v0 import QueueCoreDataSource as OldDataSource

        class OldWriter(OldDataSource):  # type: ignore[misc]
            @classmethod
            def name(cls) -> str:
                return "queuecore_v0"

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

            spark = local_spark()
            spark.dataSource.register(OldWriter)

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

                writers = [
                    ("write", "queuecore", {}),
                    ("write maxInFlight=1", "queuecore", {"maxInFlight": "1"}),
                    ("write old", "queuecore_v0", {}),
                ]
                for what, fmt, options in writers[r % 3 :] + writers[: r % 3]:
                    target = unique("bench.write")
                    http.post(
                        "/v1/topics", json={"name": target, "partitions": args.partitions}
                    ).raise_for_status()

                    def write(  # type: ignore[no-untyped-def]
                        target: str = target, fmt: str = fmt, options: dict[str, str] = options, source=source
                    ) -> None:
                        source.write.format(fmt).option("topic", target).option("apiKey", key).option(
                            "baseUrl", server.url
                        ).options(**options).mode("append").save()

                    # CPU per message, beside the time: on a shared 2-CPU machine throughput follows CPU.
                    assert server.process is not None
                    spark_cpu, server_cpu = cpu_seconds(os.getpid()), cpu_seconds(server.process.pid)
                    seconds = timed(write)
                    spark_cpu = cpu_seconds(os.getpid()) - spark_cpu
                    server_cpu = cpu_seconds(server.process.pid) - server_cpu
                    rows.append(
                        {"round": r, "what": what, "seconds": seconds, "spark_cpu": spark_cpu,
                         "server_cpu": server_cpu}
                    )  # fmt: skip
                    described = http.get(f"/v1/topics/{target}").json()
                    written = sum(p["latestOffset"] for p in described["partitionDetails"])
                    assert written == args.write_messages, (what, written)
                    print(rows[-1], flush=True)
                source.unpersist()
            spark.stop()
        finally:
            server.stop()

    def median(what: str, n: int) -> float:
        return statistics.median(n / x["seconds"] for x in rows if x["what"] == what)

    def cpu_us(what: str, side: str) -> float:
        return statistics.median(1e6 * x[side] / args.write_messages for x in rows if x["what"] == what)

    qc, fl, wr, wr1, wr0 = (
        median("queuecore", args.messages),
        median("file", args.messages),
        median("write", args.write_messages),
        median("write maxInFlight=1", args.write_messages),
        median("write old", args.write_messages),
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
        "write_one_in_flight_msgs_per_s": wr1,
        "write_old_msgs_per_s": wr0,
        "write_ratio_to_old": wr / wr0,
        "old_writer_commit": args.old_writer,
        "commit": commit,
        "cpus": os.cpu_count(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "spark_write.json").write_text(json.dumps(result, indent=2) + "\n")
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
        f"| write, the same with `maxInFlight=1` | {wr1:,.0f} |",
        f"| write, the writer of {args.old_writer} (before pipelining), same run | {wr0:,.0f} |",
        f"| write ratio, pipelined / old (target ≥ 3) | {wr / wr0:.2f} |",
        "",
        "CPU per message written (medians; Spark: the driver, its JVM and Python workers; server: its process):",
        "",
        "| writer | Spark µs/msg | server µs/msg |",
        "|---|---:|---:|",
        *(
            f"| {what} | {cpu_us(what, 'spark_cpu'):.1f} | {cpu_us(what, 'server_cpu'):.1f} |"
            for what in ("write", "write maxInFlight=1", "write old")
        ),
        "",
        (
            f"The server spends {cpu_us('write', 'server_cpu'):.1f} µs of CPU per message written (every item "
            "carries an idempotency key, so the whole batch is parsed), so one server process takes at most "
            f"{1e6 / cpu_us('write', 'server_cpu'):,.0f} msgs/s even with a CPU to itself; Spark spends "
            f"{cpu_us('write', 'spark_cpu'):.1f} µs per message beside it, on the same two CPUs. Where the "
            "CPUs are the limit, requests in flight cannot add throughput: they hide the time a request "
            "travels and waits, not CPU time."
        ),
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
    (RESULTS / "spark_write.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
