"""uvicorn's server with a drain step before its graceful shutdown.

The first SIGTERM runs the app's ``drain`` coroutine (which may keep serving for a while) and only then
asks uvicorn to stop, as it would have at once; uvicorn then stops accepting, waits for the requests in
flight (``timeout_graceful_shutdown``) and runs the lifespan's shutdown. A second SIGTERM, or SIGINT
(Ctrl-C at a terminal), stops at once, as before.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

import uvicorn

logger = logging.getLogger("queuecore.serving")


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` that drains on the first SIGTERM."""

    def __init__(self, config: uvicorn.Config, drain: Callable[[], Awaitable[None]]) -> None:
        super().__init__(config)
        self._drain = drain
        self._draining: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self._draining is None and self._loop is not None and self.started:
            # Called from the signal handler: hand the work to the loop.
            self._loop.call_soon_threadsafe(self._start_draining)
            return
        super().handle_exit(sig, frame)

    def _start_draining(self) -> None:
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self._drain()
        except Exception:  # a failed drain must not keep the process from stopping
            logger.exception("draining failed; stopping anyway")
        self.should_exit = True
