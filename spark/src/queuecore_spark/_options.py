"""Options as Spark's Kafka source names them, read case-insensitively, and the offset ranges they select.

Offsets are Kafka's: ``{"<partition>": offset}`` JSON, where ``-2`` means earliest and ``-1`` latest; an
ending offset is exclusive (the next offset to be written, as QueueCore's ``latestOffset``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from ._http import DEFAULT_BASE_URL, ENV_API_KEY, ENV_BASE_URL, Client, QueueCoreError, invalid_option

EARLIEST = -2
LATEST = -1
READ_FORMATS = ("records", "json")  # the bulk read (application/vnd.queuecore.records) or JSON pages
DEFAULT_SPLIT = 100_000  # records per Spark input partition: long ranges are split so they parallelise


@dataclass(frozen=True)
class Options:
    topic: str
    api_key: str
    base_url: str
    starting: str | None
    ending: str | None
    starting_timestamp: str | None
    partitions: tuple[int, ...] | None
    max_offsets_per_trigger: int | None
    split: int
    min_partitions: int | None
    read_format: str = "records"  # "records": the bulk read; "json": the stream read's JSON pages

    def client(self) -> Client:
        return Client(self.base_url, self.api_key)


def parse(options: Mapping[str, str]) -> Options:
    """Read the options (names in any case); raise ``QueueCoreError`` INVALID_OPTION for bad ones."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    topic = opts.get("topic", "").strip()
    if not topic:
        raise invalid_option("The option 'topic' is required: .option('topic', '<name>').")
    api_key = (opts.get("apikey") or os.environ.get(ENV_API_KEY) or "").strip()
    if not api_key:
        raise invalid_option(
            f"No API key: set .option('apiKey', …) or the {ENV_API_KEY} environment variable."
        )
    base_url = (opts.get("baseurl") or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL).strip()
    starting_timestamp = opts.get("startingtimestamp")
    if starting_timestamp is not None:
        starting_timestamp = _timestamp(starting_timestamp)
    partitions = None
    if "partitions" in opts:
        try:
            partitions = tuple(sorted({int(p) for p in opts["partitions"].split(",") if p.strip()}))
        except ValueError:
            raise invalid_option("'partitions' takes comma-separated partition ids, e.g. '0,2'.") from None
        if not partitions or min(partitions) < 0:
            raise invalid_option("'partitions' takes comma-separated partition ids, e.g. '0,2'.")
    read_format = opts.get("readformat", "records").strip().lower()
    if read_format not in READ_FORMATS:
        raise invalid_option(f"'readFormat' is 'records' (the default) or 'json', got {read_format!r}.")
    return Options(
        topic=topic,
        api_key=api_key,
        base_url=base_url,
        starting=opts.get("startingoffsets"),
        ending=opts.get("endingoffsets"),
        starting_timestamp=starting_timestamp,
        partitions=partitions,
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        split=_positive(opts, "maxrecordsperpartition", "maxRecordsPerPartition") or DEFAULT_SPLIT,
        min_partitions=_positive(opts, "minpartitions", "minPartitions"),
        read_format=read_format,
    )


def _positive(opts: dict[str, str], key: str, name: str) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key])
    except ValueError:
        value = 0
    if value < 1:
        raise invalid_option(f"'{name}' must be a positive integer, got {opts[key]!r}.")
    return value


def _timestamp(value: str) -> str:
    """Epoch milliseconds or ISO-8601 with a zone, checked here so a typo fails before any task runs."""
    value = value.strip()
    if value.isdigit():
        return value
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise invalid_option(
            f"'startingTimestamp' takes epoch milliseconds or ISO-8601 with a zone, got {value!r}."
        )
    return value


def offsets_spec(value: str | None, default: int, name: str) -> int | dict[int, int]:
    """``earliest`` / ``latest`` → EARLIEST / LATEST; JSON → ``{partition: offset}``."""
    if value is None:
        return default
    text = value.strip()
    if text.lower() == "earliest":
        return EARLIEST
    if text.lower() == "latest":
        return LATEST
    try:
        raw = orjson.loads(text)
        if not isinstance(raw, dict):
            raise TypeError
        spec = {int(p): int(o) for p, o in raw.items()}
    except (orjson.JSONDecodeError, TypeError, ValueError):
        raise invalid_option(
            f"'{name}' takes 'earliest', 'latest' or JSON like {{\"0\": 42, \"1\": -2}}, got {value!r}."
        ) from None
    if any(o < EARLIEST for o in spec.values()):
        raise invalid_option(f"'{name}': an offset is >= 0, or -2 (earliest) / -1 (latest).")
    return spec


@dataclass(frozen=True)
class PartitionState:
    id: int
    earliest: int
    latest: int


def partition_states(client: Client, opts: Options) -> list[PartitionState]:
    """The selected partitions of the topic with their earliest and latest offsets."""
    topic = client.describe_topic(opts.topic)
    details: list[dict[str, Any]] = topic.get("partitionDetails") or []
    states = [PartitionState(int(d["id"]), int(d["earliestOffset"]), int(d["latestOffset"])) for d in details]
    if opts.partitions is not None:
        known = {s.id for s in states}
        missing = [p for p in opts.partitions if p not in known]
        if missing:
            raise invalid_option(
                f"'partitions' names {missing}, but topic '{opts.topic}' has partitions 0–{len(states) - 1}."
            )
        states = [s for s in states if s.id in opts.partitions]
    return states


def resolve(
    client: Client, opts: Options, state: PartitionState, spec: int | dict[int, int], *, timestamp: bool
) -> int:
    """One partition's offset from a spec (or from ``startingTimestamp`` when ``timestamp``)."""
    if timestamp and opts.starting_timestamp is not None:
        page = client.read_page(opts.topic, state.id, from_timestamp=opts.starting_timestamp, limit=1)
        data = page["data"]
        return int(data[0]["offset"]) if data else int(page["nextOffset"])
    offset = spec.get(state.id, EARLIEST if timestamp else LATEST) if isinstance(spec, dict) else spec
    if offset == EARLIEST:
        return state.earliest
    if offset == LATEST:
        return state.latest
    return max(state.earliest, offset)


def check_range(opts: Options, partition: int, start: int, end: int) -> None:
    if end < start:
        raise QueueCoreError(
            "INVALID_OPTION",
            f"Partition {partition} of '{opts.topic}': the ending offset {end} is before the start {start}.",
        )


@dataclass(frozen=True)
class WriteOptions:
    topic: str
    api_key: str
    base_url: str
    write_id: str | None  # 'writeId': a caller-chosen id, so a re-run of a whole job publishes nothing twice
    max_in_flight: int | None = None  # 'maxInFlight': requests in flight per task (default: the partitions)


def parse_write(options: Mapping[str, str]) -> WriteOptions:
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    read = parse({"topic": opts.get("topic", ""), **{k: v for k, v in opts.items() if k != "topic"}})
    write_id = opts.get("writeid")
    if write_id is not None and not write_id.strip():
        raise invalid_option("'writeId' must not be empty.")
    max_in_flight = _positive(opts, "maxinflight", "maxInFlight")
    return WriteOptions(read.topic, read.api_key, read.base_url, write_id, max_in_flight)
