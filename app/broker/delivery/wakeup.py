"""A loop's wake-up call without a task or an ``asyncio.Event`` per wait: the push member's delivery loop and
its beat each sleep on one."""

from __future__ import annotations

import asyncio


class Wakeup:
    """A loop's wake-up call: ``set`` ends the current ``wait``, or the next one at once if it comes
    while the loop is busy (``clear`` at the start of each round)."""

    __slots__ = ("_future", "_set")

    def __init__(self) -> None:
        self._set = False
        self._future: asyncio.Future[None] | None = None

    @property
    def is_set(self) -> bool:
        return self._set

    def clear(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Until ``set`` or ``timeout`` seconds."""
        if self._set:
            return
        loop = asyncio.get_running_loop()
        future = self._future = loop.create_future()
        timer = loop.call_later(timeout, self.set)
        try:
            await future
        finally:
            timer.cancel()
            self._future = None
