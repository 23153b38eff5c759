"""What a streaming query of a Python data source costs Spark before its first row, with no server at all.

    .venv/bin/python bench/spark_stream_start.py [--rows 1000000] [--rounds 3]

A data source of this file (``probe``) hands Spark ready Arrow batches in the queuecore connector's schema
(``--rows`` rows in 12 tasks, nothing read from anywhere), once as ``spark.read`` and once as
``spark.readStream`` with ``Trigger.AvailableNow`` (one micro-batch), both into the ``noop`` sink on
``local[2]``, in turn each round. For the stream it separates Spark's micro-batch (``triggerExecution``)
from the rest of the query (its start: the Python source process on the driver, the first offsets; and
its stop). That rest is what a streaming read of any Python source pays on top of a batch read of the same
rows; ``spark_stream.md`` holds the queuecore source's own rates. Writes bench/results/spark_stream_start.md
and .json (medians of ``--rounds`` after a warm-up round).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from bench.spark_bench import local_spark
from bench.support import machine, write_results

SCHEMA = (
    "id string, topic string, partition int, offset long, key string, data string, "
    "headers map<string,string>, timestamp timestamp"
)
TASKS = 12
CHUNK = 20_000
DATA = '{"type":"order.created","note":"' + "x" * 166 + '"}'  # 200 bytes


class Span(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


def spans(start: int, end: int) -> list[Span]:
    step = max(1, -(-(end - start) // TASKS))
    return [Span(at, min(end, at + step)) for at in range(start, end, step)]


def batches(span: Span) -> Iterator[pa.RecordBatch]:
    for at in range(span.start, span.end, CHUNK):
        n = min(CHUNK, span.end - at)
        offsets = range(at, at + n)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([f"msg_{o:018d}" for o in offsets], pa.string()),
                pa.array(["probe"] * n, pa.string()),
                pa.array([at % 4] * n, pa.int32()),
                pa.array(offsets, pa.int64()),
                pa.nulls(n, pa.string()),
                pa.array([DATA] * n, pa.string()),
                pa.array([[]] * n, pa.map_(pa.string(), pa.string())),
                pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
            ],
            names=["id", "topic", "partition", "offset", "key", "data", "headers", "timestamp"],
        )


class ProbeReader(DataSourceReader):
    def __init__(self, rows: int) -> None:
        self.rows = rows

    def partitions(self) -> Sequence[InputPartition]:
        return spans(0, self.rows)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Span)
        return batches(partition)


class ProbeStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, rows: int) -> None:
        self.rows = rows

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def initialOffset(self) -> dict[str, int]:
        return {"at": 0}

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        return {"at": self.rows}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return spans(start["at"], end["at"])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Span)
        return batches(partition)

    def commit(self, end: dict[str, int]) -> None:
        pass


class Probe(DataSource):
    @classmethod
    def name(cls) -> str:
        return "probe"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return ProbeReader(int(self.options["rows"]))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return ProbeStream(int(self.options["rows"]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = local_spark({"spark.ui.showConsoleProgress": "false"})
    spark.dataSource.register(Probe)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="spark-stream-start-") as tmp:
        checkpoints = iter(range(1_000_000))

        def batch_read() -> float:
            start = time.perf_counter()
            spark.read.format("probe").option("rows", args.rows).load().write.format("noop").mode(
                "overwrite"
            ).save()
            return time.perf_counter() - start

        def stream_read() -> tuple[float, float]:
            start = time.perf_counter()
            query = (
                spark.readStream.format("probe")
                .option("rows", args.rows)
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", str(Path(tmp) / f"cp-{next(checkpoints)}"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            total = time.perf_counter() - start
            assert sum(int(p["numInputRows"]) for p in query.recentProgress) == args.rows
            return total, sum(int(p["durationMs"]["triggerExecution"]) for p in query.recentProgress) / 1000

        batch_read()
        stream_read()  # warm-up
        for n in range(args.rounds):
            batch = batch_read()
            total, micro = stream_read()
            rounds.append({"batch": batch, "stream": total, "micro_batch": micro, "rest": total - micro})
            print(f"round {n + 1}: {rounds[-1]}", flush=True)
    spark.stop()
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    lines = [
        "# A Python streaming source's start, with no server (`bench/spark_stream_start.py`)",
        "",
        (
            f"{machine()}; Spark `local[2]`; {args.rows:,} rows in the connector's schema handed over as ready Arrow "
            f"batches by a source of the script (nothing read from anywhere), in {TASKS} tasks; medians of "
            f"{args.rounds} rounds after a warm-up, the batch and the stream read in turn, into the `noop` sink."
        ),
        "",
        "| | seconds | rows/s | of the batch read |",
        "|---|---:|---:|---:|",
        f"| batch read (`spark.read`) | {med['batch']:.2f} | {args.rows / med['batch']:,.0f} | 1.00 |",
        (
            f"| stream, availableNow, whole query | {med['stream']:.2f} | {args.rows / med['stream']:,.0f} | "
            f"{med['batch'] / med['stream']:.2f} |"
        ),
        (
            f"| stream: its one micro-batch (Spark's `triggerExecution`) | {med['micro_batch']:.2f} | "
            f"{args.rows / med['micro_batch']:,.0f} | {med['batch'] / med['micro_batch']:.2f} |"
        ),
        f"| stream: the rest (the query's start and stop) | {med['rest']:.2f} | | |",
        "",
        "| round | batch s | stream s | micro-batch s | rest s |",
        "|---:|---:|---:|---:|---:|",
        *(
            f"| {i + 1} | {r['batch']:.2f} | {r['stream']:.2f} | {r['micro_batch']:.2f} | {r['rest']:.2f} |"
            for i, r in enumerate(rounds)
        ),
    ]
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    write_results("spark_stream_start", {"machine": machine(), "rows": args.rows, "rounds": rounds}, markdown)


if __name__ == "__main__":
    main()
