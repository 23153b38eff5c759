"""Where the usage charts get their numbers: one small protocol, so the source can change.

Today ``MeteringUsageSource`` reads the usage-metering records (the internal ``__usage`` topic written by
``app/broker/usage.py``) from the first record of the window on and aggregates them in memory. The Spark
usage rollups will answer the same question from their tables behind the same protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from app.broker.usage import USAGE_TOPIC_ID, read_usage
from app.stores.log.protocol import LogEngine

WINDOWS: dict[str, tuple[int, int]] = {
    # window: (length ms, bucket ms)
    "hour": (3_600_000, 60_000),
    "day": (86_400_000, 3_600_000),
    "week": (7 * 86_400_000, 6 * 3_600_000),
}
CATEGORIES = ("publish", "consume", "admin")


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
    """Reads the usage-metering records straight from the log."""

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
        n = max(1, -(-(end_ms - start_ms) // bucket_ms))
        out = UsageSeries(start_ms, bucket_ms, [0] * n, [0] * n, [0] * n, [0] * n, [0] * n)
        per_second: dict[int, int] = {}
        first = await self._log.offset_for_time(USAGE_TOPIC_ID, 0, start_ms)
        async for event in read_usage(self._log, first):
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
            second = at // 1000
            per_second[second] = per_second.get(second, 0) + 1
        for second, count in per_second.items():
            i = (second * 1000 - start_ms) // bucket_ms
            if 0 <= i < n:
                out.peak_per_second[i] = max(out.peak_per_second[i], count)
        return out
