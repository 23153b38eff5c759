"""A driver program for ``spark-submit --master spark://…`` (tests/spark/test_cluster.py): the connector's
batch read, write and AvailableNow stream on a standalone cluster, so readers and writers run in executors.

    spark-submit --master spark://127.0.0.1:<port> cluster_app.py <base url> <api key> <topic> <copy topic> <dir>

Each reader task records where it ran (its process id and working directory) in ``<dir>/reads``; the last
line printed is a JSON summary.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from queuecore_spark import QueueCoreDataSource, _options
from queuecore_spark._source import BatchReader


class TracedReader(BatchReader):  # type: ignore[misc]
    trace: str = ""

    def read(self, partition: Any) -> Iterator[Any]:
        where = {"pid": os.getpid(), "cwd": os.getcwd()}
        Path(self.trace, f"{uuid.uuid4().hex}.json").write_text(json.dumps(where))
        return super().read(partition)


class Traced(QueueCoreDataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "queuecore_traced"

    def reader(self, schema: Any) -> BatchReader:
        reader = TracedReader(_options.parse(self.options), schema)
        reader.trace = self.options["traceDir"]
        return reader


def main() -> None:
    base_url, key, topic, copy, out = sys.argv[1:6]
    reads = Path(out, "reads")
    reads.mkdir(parents=True)
    spark = SparkSession.builder.appName("queuecore-cluster-test").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(QueueCoreDataSource)
    spark.dataSource.register(Traced)
    options = {"topic": topic, "apiKey": key, "baseUrl": base_url}

    df = (
        spark.read.format("queuecore_traced")
        .options(**options)
        .option("maxRecordsPerPartition", "500")
        .option("traceDir", str(reads))
        .load()
    )
    read = sorted(r["id"] for r in df.select("id").collect())

    # Write what was read to another topic: the pipelined writer, in executors.
    df.select("data", "key").repartition(2).write.format("queuecore").options(
        **{**options, "topic": copy}
    ).mode("append").save()

    batches: list[int] = []

    def count(batch: Any, batch_id: int) -> None:
        batches.append(batch.count())

    query = (
        spark.readStream.format("queuecore")
        .options(**options)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000")
        .load()
        .writeStream.foreachBatch(count)
        .option("checkpointLocation", str(Path(out, "checkpoint")))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    summary = {
        "master": spark.sparkContext.master,
        "driver_pid": os.getpid(),
        "read": read,
        "stream_batches": [n for n in batches if n],
    }
    spark.stop()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
