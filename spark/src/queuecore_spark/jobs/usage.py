"""Usage rollups: the usage-metering events into the rollup tables behind the dashboard's usage charts.

Where the events are: the server's ``UsageMeter`` (``app/broker/usage.py``) appends one JSON event per
authenticated request to the internal topic ``__usage`` of the log engine (one partition), which has no REST
route. With the local engine (the embedded default and single-node deployments) that is the segment files in
``<data dir>/log/__usage-0/``: this job reads them directly, read-only, one Spark task per segment, and only
batches that are complete and pass their CRC (a batch being written is left for the next run).

Each run adds up the events from the offset the previous run stopped at, per project environment, API key,
category and minute / hour / day: requests, messages, bytes in and out, 429s, and the busiest second's
requests. The counts and the new
offset are written in one transaction (``app.stores.metadata.usage_repositories``), which also checks that
the offset is still where this run started: a run that crashed, is repeated or races another adds nothing
twice. The job runs where the server is installed (it uses the server's settings and store code).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

logger = logging.getLogger("queuecore_spark.usage")

SOURCE = "__usage"
BUCKETS = {"minute": 60, "hour": 3600, "day": 86400}
EVENT_SCHEMA = (
    "offset long, at long, project_id string, environment string, key_id string, category string, "
    "status int, messages long, bytes_in long, bytes_out long"
)


def segments(partition_dir: Path, from_offset: int) -> list[str]:
    """The segment files that may hold offsets >= ``from_offset``, oldest first."""
    logs = sorted((int(p.stem), str(p)) for p in partition_dir.glob("*.log") if p.stem.isdigit())
    keep = [path for i, (base, path) in enumerate(logs) if i + 1 == len(logs) or logs[i + 1][0] > from_offset]
    return keep


def read_segment(path: str, from_offset: int) -> Iterator[tuple[Any, ...]]:
    """The events of one segment file at or after ``from_offset`` (complete, CRC-valid batches only)."""
    from app.stores.log.local.records import CorruptRecordError, decode_batch, ensure_valid
    from app.stores.log.protocol import Record

    try:
        buf = Path(path).read_bytes()
    except FileNotFoundError:  # removed by retention meanwhile
        return
    position = 0
    while position < len(buf):
        try:
            header = ensure_valid(buf, position)
        except CorruptRecordError:
            return  # the tail being written (or preallocated space): the next run reads it
        records: list[Record] = []
        decode_batch(buf, position, header, records, start_offset=from_offset)
        for record in records:
            e = orjson.loads(record.value)
            yield (
                record.offset,
                int(e["at"]),
                e.get("projectId") or "",
                e.get("environment") or "",
                e.get("keyId") or "",
                e.get("category") or "none",
                int(e.get("status") or 0),
                int(e.get("messages") or 0),
                int(e.get("bytesIn") or 0),
                int(e.get("bytesOut") or 0),
            )
        position += header.size


@dataclass(frozen=True)
class Result:
    events: int
    from_offset: int
    next_offset: int
    buckets: int


def rollup(spark: SparkSession, partition_dir: Path, from_offset: int) -> tuple[list[Any], int, int]:
    """(bucket rows, events read, next offset) of the events from ``from_offset`` on."""
    files = segments(partition_dir, from_offset)
    if not files:
        return [], 0, from_offset
    rdd = spark.sparkContext.parallelize(files, len(files)).flatMap(lambda p: read_segment(p, from_offset))
    events = spark.createDataFrame(rdd, EVENT_SCHEMA).cache()
    try:
        stats = events.agg(F.count("*").alias("n"), F.max("offset").alias("last")).first()
        assert stats is not None
        if not stats["n"]:
            return [], 0, from_offset
        keys = ["project_id", "environment", "key_id", "category"]
        per_second = events.groupBy(*keys, (F.floor(F.col("at") / 1000)).cast("long").alias("second")).agg(
            F.count("*").alias("in_second")
        )
        per_granularity = []
        for name, seconds in BUCKETS.items():
            sums = (
                events.withColumn("bucket", (F.floor(F.col("at") / 1000 / seconds) * seconds).cast("long"))
                .groupBy(*keys, "bucket")
                .agg(
                    F.count("*").alias("requests"),
                    F.sum("messages").alias("messages"),
                    F.sum("bytes_in").alias("bytes_in"),
                    F.sum("bytes_out").alias("bytes_out"),
                    F.sum(F.when(F.col("status") == 429, 1).otherwise(0)).alias("rate_limited"),
                )
            )
            peaks = (
                per_second.withColumn("bucket", (F.floor(F.col("second") / seconds) * seconds).cast("long"))
                .groupBy(*keys, "bucket")
                .agg(F.max("in_second").alias("peak_requests_per_second"))
            )
            per_granularity.append(sums.join(peaks, [*keys, "bucket"]).withColumn("granularity", F.lit(name)))
        table = per_granularity[0]
        for more in per_granularity[1:]:
            table = table.unionByName(more)
        return table.collect(), int(stats["n"]), int(stats["last"]) + 1
    finally:
        events.unpersist()


def run(spark: SparkSession, data_dir: Path | None = None, database_url: str | None = None) -> Result:
    """One incremental roll-up against the server's settings (``QUEUECORE_*``), overridable here."""
    from app.settings import Settings

    overrides: dict[str, Any] = {}
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    if database_url is not None:
        overrides["database_url"] = database_url
    settings = Settings(**overrides)
    engine = str(getattr(settings, "log_engine", "local"))
    if engine != "local":
        raise RuntimeError(
            f"The usage job reads the local log engine's files; QUEUECORE_LOG_ENGINE={engine} is not supported yet."
        )
    partition_dir = settings.log_dir / f"{SOURCE}-0"
    return asyncio.run(_run(spark, partition_dir, settings.resolved_database_url))


async def _run(spark: SparkSession, partition_dir: Path, url: str) -> Result:
    from app.stores.metadata.database import MetadataStore
    from app.stores.metadata.protocol import Rollup
    from app.stores.metadata.usage_repositories import UsageRollupRepository

    store = MetadataStore(url, pool_size=2)
    try:
        async with store.sessions() as session:
            start = await UsageRollupRepository.from_session(session).next_offset(SOURCE)
        rows, events, next_offset = await asyncio.to_thread(rollup, spark, partition_dir, start)
        if not events:
            return Result(0, start, start, 0)
        rollups = [
            Rollup(
                project_id=r["project_id"],
                environment=r["environment"],
                key_id=r["key_id"],
                category=r["category"],
                granularity=r["granularity"],
                bucket_start=datetime.fromtimestamp(r["bucket"], UTC),
                requests=int(r["requests"]),
                messages=int(r["messages"]),
                bytes_in=int(r["bytes_in"]),
                bytes_out=int(r["bytes_out"]),
                rate_limited=int(r["rate_limited"]),
                peak_requests_per_second=int(r["peak_requests_per_second"]),
            )
            for r in rows
        ]
        async with store.sessions() as session:
            repo = UsageRollupRepository.from_session(session)
            if not await repo.add(rollups, source=SOURCE, from_offset=start, next_offset=next_offset):
                await session.rollback()
                raise RuntimeError("Another usage roll-up moved the offset meanwhile; nothing was written.")
            await session.commit()
        logger.info("rolled up %d usage event(s): offsets %d–%d", events, start, next_offset - 1)
        return Result(events, start, next_offset, len(rollups))
    finally:
        await store.engine.dispose()
