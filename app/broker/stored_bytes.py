"""What each project stores, for the ``storedBytes`` quota: measured off the publish path, read on it.

A project's stored bytes are the sizes the log engine reports for every partition of its topics, in all
three environments, and for its groups' dead-letter logs (``LogEngine.partition_info(...).size_bytes``:
the segment files on the local engine, the streams' bytes on JetStream).

Measuring walks every partition, so a publish never does it: ``StoredBytes.check`` compares the last
measurement with the limit (a dict lookup) and, when that measurement is older than ``refresh_seconds``,
starts one new measurement of the project in the background (one at a time per project, whatever the
number of publishers). A project is therefore refused within about ``refresh_seconds`` of reaching its
quota, may go over it by what it publishes meanwhile, and is let through again within as long of
falling back under it (retention, or topics deleted). Its very first publishes on a process, before the
first measurement finished, are let through.
"""

from __future__ import annotations

import asyncio
import logging
import time

from app.broker import dead_letter_logs
from app.broker.errors import QuotaExceeded
from app.broker.quotas import DESCRIPTIONS, Quota
from app.kit.tasks import cancel_and_wait
from app.stores.errors import StoreUnavailable
from app.stores.log.protocol import LogEngine, LogEngineError
from app.stores.metadata.protocol import MetadataStore

logger = logging.getLogger("queuecore.quotas")


class StoredBytes:
    """Each project's stored bytes, measured at most every ``refresh_seconds`` while it publishes."""

    def __init__(self, metadata: MetadataStore, log: LogEngine, *, refresh_seconds: float = 5.0) -> None:
        self._metadata = metadata
        self._log = log
        self._refresh = refresh_seconds
        # project id -> (monotonic time the measurement started, bytes)
        self._known: dict[str, tuple[float, int]] = {}
        # project id -> when the last measurement was started (also after a failed one)
        self._started: dict[str, float] = {}
        self._measuring: dict[str, asyncio.Task[None]] = {}

    def check(self, project_id: str, limit: int) -> None:
        """Refuse a publish (``QuotaExceeded``) while the project's last measured size is at or over
        ``limit``; start a new measurement when that one is stale. Never waits."""
        now = time.monotonic()
        if (
            now - self._started.get(project_id, -self._refresh) >= self._refresh
            and project_id not in self._measuring
        ):
            self._started[project_id] = now
            self._measuring[project_id] = asyncio.create_task(
                self._remeasure(project_id, now), name=f"stored-bytes-{project_id}"
            )
        known = self._known.get(project_id)
        if known is not None and known[1] >= limit:
            raise QuotaExceeded(
                Quota.stored_bytes.value, DESCRIPTIONS[Quota.stored_bytes], limit, known[1], 0
            )

    def last(self, project_id: str) -> int | None:
        """The project's last measured size in this process, if any."""
        known = self._known.get(project_id)
        return known[1] if known is not None else None

    async def measure(self, project_id: str) -> int:
        """The project's stored bytes now: every partition of its topics and its groups' dead-letter logs."""
        async with self._metadata.unit(readonly=True) as uow:
            partitions = await uow.topics.partitions_of_project(project_id)
            group_ids = await uow.groups.ids_of_project(project_id)
        logs = partitions + [(dead_letter_logs.log_id(g), 1) for g in group_ids]
        total = 0
        for log_id, count in logs:
            for partition in range(count):
                try:
                    total += (await self._log.partition_info(log_id, partition)).size_bytes
                except StoreUnavailable:
                    raise  # the engine is down (``EngineUnavailable``): keep the last measurement
                except LogEngineError:
                    continue  # not there: a DLQ log not made yet, a topic deleted meanwhile
        return total

    async def _remeasure(self, project_id: str, started: float) -> None:
        try:
            size = await self.measure(project_id)
        except StoreUnavailable:
            logger.warning("stored bytes of %s not measured: a store is unavailable", project_id)
        except Exception:
            logger.exception("stored bytes of %s not measured", project_id)
        else:
            self._known[project_id] = (started, size)
        finally:
            self._measuring.pop(project_id, None)

    async def close(self) -> None:
        """Stop measurements in progress."""
        tasks = list(self._measuring.values())
        await asyncio.gather(*(cancel_and_wait(task) for task in tasks))
