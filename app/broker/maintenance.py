"""Periodic work on the log engine, the same on every engine: retention.

Each engine knows how to apply a topic's retention (``LogEngine.enforce_retention``: whole segments past
it on the local engine, records older than it by timestamp on JetStream, where the stream's own
``max_age`` goes by the time JetStream stored a record instead); the broker decides when. On a cluster
one API process at a time does it for all (``LogEngine.take_turn``: its turn lasts ``TURN_INTERVALS``
intervals and is renewed at each pass; if it dies, another takes over once the turn has run out), rather
than every process asking for every stream's state each interval. Two passes at once would still be safe
(a purge up to a sequence is idempotent), only wasteful.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import secrets
import socket
from collections.abc import Callable

from app.kit.clock import now_ms
from app.kit.tasks import cancel_and_wait
from app.stores.log.protocol import LogEngine

logger = logging.getLogger(__name__)

DUTY = "retention"
TURN_INTERVALS = 3  # a turn outlives two missed passes of its holder before another process takes over


class LogMaintenance:
    """Applies every topic's retention every ``interval`` seconds (``QUEUECORE_RETENTION_CHECK_INTERVAL_MS``).

    ``clock`` answers the time retention is measured against (milliseconds since the epoch): a test hands
    one that runs ahead instead of waiting for records to age."""

    def __init__(
        self,
        log: LogEngine,
        *,
        interval: float,
        clock: Callable[[], int] = now_ms,
        holder: str | None = None,
        duty: str = DUTY,
    ) -> None:
        if interval <= 0:
            raise ValueError("the retention interval must be positive")
        self.log = log
        self.interval = interval
        self.clock = clock
        # Who this process is, for the engine's turns: unique per process, readable in the bucket.
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.duty = duty  # the turn's name: one per deployment sharing the engine
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
            # A pass makes many wait_for calls, which can lose the cancellation (cancel_and_wait).
            await cancel_and_wait(self._task)
            self._task = None

    async def run_once(self) -> int:
        """One retention pass now; answers what the engine cut."""
        cut = await self.log.enforce_retention(self.clock())
        self.passes += 1
        if cut:
            logger.info("retention: %d log pieces past their topic's retention removed", cut)
        return cut

    async def run_if_turn(self) -> int | None:
        """A retention pass if this process has (or takes) the turn; None when another process has it."""
        ttl_ms = int(self.interval * TURN_INTERVALS * 1000)
        if not await self.log.take_turn(self.duty, self.holder, self.clock(), ttl_ms):
            return None
        return await self.run_once()

    async def _run_forever(self) -> None:
        # API processes started together would otherwise all ask for the turn at the same moments.
        await asyncio.sleep(self.interval * random.uniform(0.5, 1.0))
        while True:
            try:
                await self.run_if_turn()
            except Exception:  # an outage of the engine: the next pass tries again
                logger.warning("retention pass failed; next in %.0f s", self.interval, exc_info=True)
            await asyncio.sleep(self.interval)
