"""Periodic work on the log engine, the same on every engine: retention.

Each engine knows how to apply a topic's retention (``LogEngine.enforce_retention``: whole segments past
it on the local engine, records older than it by timestamp on JetStream, where the stream's own
``max_age`` goes by the time JetStream stored a record instead); the broker decides when. On a cluster
every API process runs its own pass: a purge up to a sequence is idempotent, so two passes at once cut
no more than one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable

from app.kit.clock import now_ms
from app.stores.log.protocol import LogEngine

logger = logging.getLogger(__name__)


class LogMaintenance:
    """Applies every topic's retention every ``interval`` seconds (``QUEUECORE_RETENTION_CHECK_INTERVAL_MS``).

    ``clock`` answers the time retention is measured against (milliseconds since the epoch): a test hands
    one that runs ahead instead of waiting for records to age."""

    def __init__(self, log: LogEngine, *, interval: float, clock: Callable[[], int] = now_ms) -> None:
        if interval <= 0:
            raise ValueError("the retention interval must be positive")
        self.log = log
        self.interval = interval
        self.clock = clock
        self.passes = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run passes in the background until ``close``."""
        if self._task is None:
            self._task = asyncio.create_task(self._run_forever(), name="log-maintenance")

    async def close(self) -> None:
        """Stop between passes or in one (a pass is a sequence of idempotent cuts: stopping mid-way loses
        nothing, the next start's pass finishes it)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run_once(self) -> int:
        """One retention pass now; answers what the engine cut."""
        cut = await self.log.enforce_retention(self.clock())
        self.passes += 1
        if cut:
            logger.info("retention: %d log pieces past their topic's retention removed", cut)
        return cut

    async def _run_forever(self) -> None:
        # API processes started together would otherwise all pass at the same moments.
        await asyncio.sleep(self.interval * random.uniform(0.5, 1.0))
        while True:
            try:
                await self.run_once()
            except Exception:  # an outage of the engine: the next pass tries again
                logger.warning("retention pass failed; next in %.0f s", self.interval, exc_info=True)
            await asyncio.sleep(self.interval)
