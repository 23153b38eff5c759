"""Where the usage charts get their numbers: one small protocol, two sources.

``MeteringUsageSource`` adds up the usage-metering events (the internal usage topic written by
``app/broker/usage.py``) of the window, in memory. ``RollupUsageSource``, the one the dashboard uses, reads
what the Spark usage job rolled up (``app/broker/usage_rollups.py``) and adds up from the topic only the
events after the rollups' offset: the same numbers, without reading a week of every project's events on
each page view.

The busiest second is per API key and category (rate limits are counted so): a bucket's is the busiest
second any one key had in one category, which is what the limit drawn beside it bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from app.broker import usage_rollups
from app.broker.usage import USAGE_TOPIC_ID, read_usage
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import MetadataStore

WINDOWS: dict[str, tuple[int, int]] = {
    # window: (length ms, bucket ms); a window ends at a bucket boundary (``window_bounds``), so that the
    # minute and hour rollups fall into exactly one bucket each
    "hour": (3_600_000, 60_000),
    "day": (86_400_000, 3_600_000),
    "week": (7 * 86_400_000, 6 * 3_600_000),
}
CATEGORIES = ("publish", "consume", "admin")


def window_bounds(window: str, now_ms: int) -> tuple[int, int, int]:
    """``(start_ms, end_ms, bucket_ms)`` of a window: its last bucket is the one ``now_ms`` is in."""
    length, bucket = WINDOWS[window]
    end = (now_ms // bucket + 1) * bucket
    return end - length, end, bucket


def _empty(start_ms: int, end_ms: int, bucket_ms: int) -> UsageSeries:
    n = max(1, -(-(end_ms - start_ms) // bucket_ms))
    return UsageSeries(start_ms, bucket_ms, [0] * n, [0] * n, [0] * n, [0] * n, [0] * n)


@dataclass
class UsageSeries:
    """Counts per bucket (oldest first) for one project environment, optionally one key and category."""

    start_ms: int
    bucket_ms: int
    requests: list[int]
    messages: list[int]
    bytes: list[int]
    throttled: list[int]
    peak_per_second: list[int]
    keys: set[str] = field(default_factory=set)

    @property
    def totals(self) -> dict[str, int]:
        return {
            "requests": sum(self.requests),
            "messages": sum(self.messages),
            "bytes": sum(self.bytes),
            "throttled": sum(self.throttled),
        }


class UsageSource(Protocol):
    """Usage of one project environment over a window, bucketed."""

    async def series(
        self,
        project_id: str,
        environment: str,
        *,
        start_ms: int,
        end_ms: int,
        bucket_ms: int,
        key_id: str | None = None,
        category: str | None = None,
    ) -> UsageSeries:
        """Requests, messages, bytes and 429s per bucket of ``[start_ms, end_ms)``, and the busiest
        second of each bucket (requests), for the given key and category (all when ``None``)."""
        ...


class MeteringUsageSource:
    """Adds up the usage-metering events of the window, straight from the log."""

    def __init__(self, log: LogEngine) -> None:
        self._log = log

    async def series(
        self,
        project_id: str,
        environment: str,
        *,
        start_ms: int,
        end_ms: int,
        bucket_ms: int,
        key_id: str | None = None,
        category: str | None = None,
    ) -> UsageSeries:
        out = _empty(start_ms, end_ms, bucket_ms)
        first = await self._log.offset_for_time(USAGE_TOPIC_ID, 0, start_ms)
        await add_events(self._log, first, out, project_id, environment, end_ms, key_id, category)
        return out


class RollupUsageSource:
    """The Spark usage rollups, and the events after them from the log."""

    def __init__(self, metadata: MetadataStore, log: LogEngine) -> None:
        self._metadata = metadata
        self._log = log

    async def series(
        self,
        project_id: str,
        environment: str,
        *,
        start_ms: int,
        end_ms: int,
        bucket_ms: int,
        key_id: str | None = None,
        category: str | None = None,
    ) -> UsageSeries:
        out = _empty(start_ms, end_ms, bucket_ms)
        # Hour rollups where a bucket is whole hours, else minutes (the window ends on a bucket boundary).
        granularity = "hour" if bucket_ms % 3_600_000 == 0 else "minute"
        rolled_up_to, rows = await usage_rollups.buckets(
            self._metadata, project_id, environment, granularity, start_ms, end_ms
        )
        for row in rows:
            out.keys.add(row.key_id)
            if (key_id and row.key_id != key_id) or (category and row.category != category):
                continue
            i = (int(row.bucket_start.timestamp() * 1000) - start_ms) // bucket_ms
            if not 0 <= i < len(out.requests):
                continue
            out.requests[i] += row.requests
            out.messages[i] += row.messages
            out.bytes[i] += row.bytes_in + row.bytes_out
            out.throttled[i] += row.rate_limited
            out.peak_per_second[i] = max(out.peak_per_second[i], row.peak_requests_per_second)
        first = await self._log.offset_for_time(USAGE_TOPIC_ID, 0, start_ms)
        await add_events(
            self._log, max(first, rolled_up_to), out, project_id, environment, end_ms, key_id, category
        )
        return out


async def add_events(
    log: LogEngine,
    from_offset: int,
    out: UsageSeries,
    project_id: str,
    environment: str,
    end_ms: int,
    key_id: str | None,
    category: str | None,
) -> None:
    """Add the events from ``from_offset`` on (up to ``end_ms``) to ``out``'s buckets."""
    start_ms, bucket_ms, n = out.start_ms, out.bucket_ms, len(out.requests)
    per_second: dict[tuple[str, str, int], int] = {}
    async for event in read_usage(log, from_offset):
        at = int(event.get("at", 0))
        if at >= end_ms:
            break
        if at < start_ms or event.get("projectId") != project_id:
            continue
        if event.get("environment") != environment:
            continue
        if event.get("keyId"):
            out.keys.add(str(event["keyId"]))
        if key_id and event.get("keyId") != key_id:
            continue
        if category and event.get("category") != category:
            continue
        i = (at - start_ms) // bucket_ms
        out.requests[i] += 1
        out.messages[i] += int(event.get("messages") or 0)
        out.bytes[i] += int(event.get("bytesIn") or 0) + int(event.get("bytesOut") or 0)
        if event.get("status") == 429:
            out.throttled[i] += 1
        slot = (str(event.get("keyId") or ""), str(event.get("category") or ""), at // 1000)
        per_second[slot] = per_second.get(slot, 0) + 1
    for (_, _, second), count in per_second.items():
        i = (second * 1000 - start_ms) // bucket_ms
        if 0 <= i < n:
            out.peak_per_second[i] = max(out.peak_per_second[i], count)
