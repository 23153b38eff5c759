"""Usage metering: one event per authenticated request, appended in batches to an internal topic.

Events are buffered in memory by the request middleware (a list append, nothing awaited on the request
path) and written every ``flush_interval`` seconds, or sooner when ``max_batch`` are waiting, as one
``LogEngine.append`` to the internal topic ``__usage`` (one partition, 7 days retention). The dashboard
and the Spark usage rollups read that topic. If the engine refuses a write the batch is kept and retried;
past ``max_buffer`` waiting events the oldest are dropped and counted, so metering can never take the
service down with it.

An event (JSON):
    at            server time the request finished, epoch ms
    acceptedAtUs  when the rate limiter accepted it, on the limiter's clock (Redis TIME, epoch µs), or null
    requestId, projectId, environment, keyId, category, method, route, status,
    bytesIn, bytesOut, messages, latencyMs
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson

from app.kit.clock import now_ms
from app.kit.tasks import cancel_and_wait
from app.stores.errors import StoreUnavailable
from app.stores.log.protocol import LogEngine, RecordIn, TopicLogConfig

logger = logging.getLogger("queuecore.usage")

USAGE_TOPIC_ID = "__usage"
USAGE_RETENTION_MS = 7 * 86_400_000


class UsageMeter:
    """Buffers usage events and appends them to the usage topic in batches."""

    def __init__(
        self,
        log: LogEngine,
        *,
        flush_interval: float = 0.25,
        max_batch: int = 5000,
        max_buffer: int = 200_000,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self._log = log
        self._interval = flush_interval
        self._max_batch = max_batch
        self._max_buffer = max_buffer
        self._buffer: list[bytes] = []
        self._stamps: list[int] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self._log_ready = False

    async def start(self) -> None:
        try:
            await self._ensure_log()
        except StoreUnavailable:
            # The engine is down at start (a JetStream cluster not up yet): flushes create it when it is back.
            logger.warning("usage log not created at start: the log engine is unavailable; retrying at flush")
        self._task = asyncio.create_task(self._flush_forever(), name="usage-flush")

    async def _ensure_log(self) -> None:
        await self._log.create_topic(USAGE_TOPIC_ID, 1, TopicLogConfig(retention_ms=USAGE_RETENTION_MS))
        self._log_ready = True

    def record(self, event: dict[str, Any]) -> None:
        """Queue one event; never blocks, never raises."""
        if not self.enabled:
            return
        at = event.setdefault("at", now_ms())
        self._buffer.append(orjson.dumps(event))
        self._stamps.append(at)
        if len(self._buffer) > self._max_buffer:
            excess = len(self._buffer) - self._max_buffer
            del self._buffer[:excess], self._stamps[:excess]
            self.dropped += excess
        if len(self._buffer) >= self._max_batch:
            self._wake.set()

    async def _flush_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)
            self._wake.clear()
            try:
                await self.flush()
            except Exception:
                logger.warning("could not write usage events; will retry", exc_info=True)

    async def flush(self) -> int:
        """Write what is buffered; returns how many events were written."""
        written = 0
        if self._buffer and not self._log_ready:
            await self._ensure_log()
        while self._buffer:
            values, stamps = self._buffer[: self._max_batch], self._stamps[: self._max_batch]
            del self._buffer[: len(values)], self._stamps[: len(values)]
            records = [RecordIn(value=v, timestamp_ms=t) for v, t in zip(values, stamps, strict=True)]
            try:
                await self._log.append(USAGE_TOPIC_ID, {0: records})
            except BaseException:
                self._buffer[:0], self._stamps[:0] = values, stamps
                raise
            written += len(values)
        return written

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
        try:
            await self.flush()
        except Exception:
            logger.warning("could not write %d usage events at shutdown", len(self._buffer), exc_info=True)


async def read_usage(
    log: LogEngine, from_offset: int = 0, batch: int = 1000
) -> AsyncIterator[dict[str, Any]]:
    """Every usage event from ``from_offset`` on, oldest first."""
    offset = from_offset
    while True:
        records = await log.read(USAGE_TOPIC_ID, 0, offset, max_records=batch, max_bytes=8 << 20)
        if not records:
            return
        for record in records:
            yield orjson.loads(record.value)
        offset = records[-1].offset + 1
