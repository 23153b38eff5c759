"""Archive: an incremental copy of topics to Parquet.

Layout: ``<out>/project=<p>/environment=<e>/topic=<t>/date=<yyyy-mm-dd>/part-….parquet`` with the columns of
the ``queuecore`` read schema but ``topic`` (it is in the path) and ``date`` (the message's UTC day).

Each topic is one Structured Streaming query (``availableNow``) from the ``queuecore`` source into Spark's
Parquet file sink, checkpointed in ``<out>/_checkpoints/<p>/<e>/<t>``: a re-run copies only what is new,
and a batch that crashed is redone from the same offsets. The file sink lists the files each batch committed
in ``<topic dir>/_spark_metadata``; files a crashed batch left behind are not listed there, and the job
deletes them after each run, so readers of any directory of the archive see every message exactly once.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import orjson
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from .._http import Client

logger = logging.getLogger("queuecore_spark.archive")

COLUMNS = ["id", "partition", "offset", "key", "data", "headers", "timestamp"]


@dataclass(frozen=True)
class Source:
    """One project environment to archive: its labels in the layout and its API key."""

    project: str
    environment: str
    api_key: str


def environment_of(api_key: str) -> str:
    """``pq_live_sk_…`` keys are production's; ``pq_test_sk_…`` development's or staging's (say which)."""
    return "production" if api_key.startswith("pq_live_") else "development"


def list_topics(base_url: str, api_key: str) -> list[str]:
    names: list[str] = []
    cursor: str | None = None
    with Client(base_url, api_key) as client:
        while True:
            path = "/v1/topics?limit=1000" + (f"&cursor={cursor}" if cursor else "")
            page: dict[str, Any] = client._call("GET", path)
            names.extend(t["name"] for t in page["data"])
            cursor = page.get("nextCursor")
            if not cursor:
                return names


def topic_dir(out: Path, source: Source, topic: str) -> Path:
    return out / f"project={source.project}" / f"environment={source.environment}" / f"topic={topic}"


def archive_topic(spark: SparkSession, out: Path, source: Source, base_url: str, topic: str) -> int:
    """Copy what is new in one topic; returns how many messages this run added."""
    target = topic_dir(out, source, topic)
    checkpoint = out / "_checkpoints" / source.project / source.environment / topic
    stream = (
        spark.readStream.format("queuecore")
        .option("topic", topic)
        .option("apiKey", source.api_key)
        .option("baseUrl", base_url)
        .option("startingOffsets", "earliest")
        .load()
        .select(*COLUMNS, F.date_format("timestamp", "yyyy-MM-dd").alias("date"))
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(target))
        .option("checkpointLocation", str(checkpoint))
        .partitionBy("date")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        raise error
    added = sum(int(p["numInputRows"]) for p in query.recentProgress)
    remove_uncommitted(target)
    return added


def committed_files(target: Path) -> set[str]:
    """The files the sink's log lists (``_spark_metadata/<batch>`` and ``<batch>.compact``)."""
    log = target / "_spark_metadata"
    files: set[str] = set()
    if not log.is_dir():
        return files
    for entry in log.iterdir():
        if entry.name.startswith(".") or entry.name.endswith(".tmp"):
            continue
        for line in entry.read_bytes().splitlines()[1:]:  # the first line is the log's version
            if line.strip():
                item = orjson.loads(line)
                if item.get("action", "add") == "add":
                    files.add(os.path.realpath(unquote(urlparse(item["path"]).path)))
    return files


def remove_uncommitted(target: Path) -> int:
    """Delete data files no committed batch lists (left by a crashed run); returns how many."""
    keep = committed_files(target)
    removed = 0
    for path in target.rglob("*.parquet"):
        if "_spark_metadata" in path.parts or os.path.realpath(path) in keep:
            continue
        path.unlink()
        crc = path.with_name(f".{path.name}.crc")
        if crc.exists():
            crc.unlink()
        removed += 1
    if removed:
        logger.warning("removed %d uncommitted file(s) under %s", removed, target)
    return removed


def run(
    spark: SparkSession, out: Path, sources: list[Source], base_url: str, topics: list[str] | None = None
) -> dict[str, int]:
    """Archive every topic (or ``topics``) of each source; returns messages added per topic directory."""
    added: dict[str, int] = {}
    for source in sources:
        names = topics if topics is not None else list_topics(base_url, source.api_key)
        for topic in names:
            count = archive_topic(spark, out, source, base_url, topic)
            added[str(topic_dir(out, source, topic).relative_to(out))] = count
            logger.info(
                "archived %s/%s/%s: %d new message(s)", source.project, source.environment, topic, count
            )
    return added
