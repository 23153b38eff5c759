"""Usage rollups: the usage-metering events into the rollup tables behind the dashboard's usage charts.

The server appends one JSON event per authenticated request to its internal usage topic (on whichever log
engine it runs). This job reads them over the operators' admin API (``GET /v1/admin/usage/events``, with
``QUEUECORE_ADMIN_TOKEN``), one Spark task per slice of offsets, and adds them up per project environment,
API key, category and minute / hour / day: requests, messages, bytes in and out, 429s, and the busiest
second's requests. It imports nothing of the server: it runs wherever Spark runs and reaches the service.

Each run starts where the rollups stand (``GET /v1/admin/usage/rollups/progress``) and ends at the newest
event. The counts of a window of events and the new offset are written in one call
(``POST /v1/admin/usage/rollups``), which the server applies only if the rollups are still where the
window started (compare and set): a run that crashed, is repeated or races another adds nothing twice.
A window whose buckets are more than one call takes is halved until they fit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from .._http import Client, QueueCoreError

logger = logging.getLogger("queuecore_spark.usage")

BUCKETS = {"minute": 60, "hour": 3600, "day": 86400}
EVENT_SCHEMA = (
    "offset long, at long, project_id string, environment string, key_id string, category string, "
    "status int, messages long, bytes_in long, bytes_out long"
)
PAGE = 10_000  # the events call's largest page
MAX_ROLLUPS = 10_000  # the rollups call's largest batch
SLICE = 50_000  # events per Spark task
WINDOW = 2_000_000  # events per compare-and-set call (halved while its buckets are too many)


@dataclass(frozen=True)
class Result:
    events: int
    from_offset: int
    next_offset: int
    buckets: int
    skipped: int = 0  # events removed by retention before any run added them up


def read_slice(base_url: str, token: str, start: int, end: int) -> Iterator[tuple[Any, ...]]:
    """The events of offsets ``[start, end)`` as rows of ``EVENT_SCHEMA`` (one Spark task's work)."""
    with Client(base_url, token) as client:
        offset = start
        while offset < end:
            page = client.usage_events(offset, min(PAGE, end - offset))
            for item in page["data"]:
                if item["offset"] >= end:
                    return
                e = item["event"]
                yield (
                    int(item["offset"]),
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
            if not page["data"] or page["nextOffset"] <= offset:
                return  # nothing more is kept (the window's end was computed before retention cut it)
            offset = page["nextOffset"]


def rollup(spark: SparkSession, base_url: str, token: str, start: int, end: int) -> tuple[list[Any], int]:
    """(bucket rows, events read) of the events ``[start, end)``."""
    slices = [(s, min(s + SLICE, end)) for s in range(start, end, SLICE)]
    rdd = spark.sparkContext.parallelize(slices, len(slices)).flatMap(
        lambda bounds: read_slice(base_url, token, bounds[0], bounds[1])
    )
    events = spark.createDataFrame(rdd, EVENT_SCHEMA).cache()
    try:
        count = events.count()
        if not count:
            return [], 0
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
        return table.collect(), count
    finally:
        events.unpersist()


def _wire(row: Any) -> dict[str, Any]:
    return {
        "projectId": row["project_id"],
        "environment": row["environment"],
        "keyId": row["key_id"],
        "category": row["category"],
        "granularity": row["granularity"],
        "bucketStart": int(row["bucket"]),
        "requests": int(row["requests"]),
        "messages": int(row["messages"]),
        "bytesIn": int(row["bytes_in"]),
        "bytesOut": int(row["bytes_out"]),
        "rateLimited": int(row["rate_limited"]),
        "peakRequestsPerSecond": int(row["peak_requests_per_second"]),
    }


def run(spark: SparkSession, base_url: str, admin_token: str, *, window: int = WINDOW) -> Result:
    """One incremental roll-up of every usage event not added up yet."""
    with Client(base_url, admin_token) as client:
        start = client.usage_progress()
        first = start
        head = client.usage_events(start, 1)
        end = int(head["latestOffset"])
        skipped = 0
        if head["earliestOffset"] > start:
            skipped = int(head["earliestOffset"]) - start
            logger.warning("%d usage events were removed by retention before any run added them up", skipped)
        read_from = start + skipped
        events = buckets = 0
        while read_from < end:
            upto = min(read_from + window, end)
            rows, count = rollup(spark, base_url, admin_token, read_from, upto)
            if len(rows) > MAX_ROLLUPS and upto - read_from > 1:
                window = max(1, (upto - read_from) // 2)
                continue
            _add(client, rows, start, upto)
            events += count
            buckets += len(rows)
            start = read_from = upto
        if events:
            logger.info("rolled up %d usage event(s): offsets %d–%d", events, first, end - 1)
        return Result(events, first, max(start, first), buckets, skipped)


def _add(client: Client, rows: list[Any], from_offset: int, to_offset: int) -> None:
    body = orjson.dumps(
        {"fromOffset": from_offset, "toOffset": to_offset, "rollups": [_wire(r) for r in rows]}
    )
    try:
        client.add_rollups(body)
    except QueueCoreError as exc:
        # A retried call whose first attempt was applied (its answer lost) finds the rollups moved: by itself.
        if exc.code == "CONFLICT" and client.usage_progress() == to_offset:
            return
        raise
