"""The sync ``Consumer``: the asyncio engine of ``_consumer.py`` (``AsyncConsumer``) run on an event loop of
its own in the thread that calls ``start()``, with sync handlers in worker threads and Ctrl-C as a graceful
stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading

from ._consumer import AsyncConsumer, Event, Handler

__all__ = ["Consumer"]


class Consumer:
    """A member of a consumer group for sync code. Build it with ``client.consume(...)``.

    ::

        consumer = client.consume("order.events", group="order-processing")
        consumer.on("message", handle)  # raise to nack
        consumer.start()  # blocks until consumer.stop() (from a handler or another thread)
    """

    def __init__(self, engine: AsyncConsumer) -> None:
        self._engine = engine
        engine._sync_handlers_in_threads = True

    @property
    def topic(self) -> str:
        return self._engine.topic

    @property
    def group(self) -> str:
        return self._engine.group

    @property
    def member_id(self) -> str | None:
        """The member id while joined (``csr_…``)."""
        return self._engine.member_id

    @property
    def assignments(self) -> list[int]:
        """The partitions this member holds now."""
        return self._engine.assignments

    def on(self, event: Event, handler: Handler) -> Consumer:
        """Register a handler (sync or async); see ``AsyncConsumer.on``."""
        self._engine.on(event, handler)
        return self

    def off(self, event: Event, handler: Handler) -> Consumer:
        """Remove a handler registered with ``on``."""
        self._engine.off(event, handler)
        return self

    def start(self) -> None:
        """Join the group and consume until ``stop()``; blocks the calling thread. In the main thread,
        Ctrl-C (SIGINT) stops gracefully, as ``stop()`` does, and ``start()`` returns; a second Ctrl-C
        aborts at once (``KeyboardInterrupt``)."""

        # Decided before asyncio.run, which puts a handler of its own over Python's default one.
        ours = (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        )

        async def run() -> None:
            client = self._engine._client
            interruptible = ours and self._stop_on_interrupt(asyncio.get_running_loop())
            try:
                await self._engine.start()
            finally:
                if interruptible:
                    with contextlib.suppress(RuntimeError):
                        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
                await client.close()

        asyncio.run(run())

    def _stop_on_interrupt(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Route SIGINT to a graceful stop while ``start()`` runs (main thread only, where signals are
        delivered, and only over Python's default handler: one the application installed, such as the
        CLI's, is left alone). The first SIGINT also removes the route, so a second one is Python's
        KeyboardInterrupt."""

        def on_interrupt() -> None:
            loop.remove_signal_handler(signal.SIGINT)
            self._engine._log.info("consumer %s/%s: interrupted, stopping", self.topic, self.group)
            self._engine.stop()

        try:
            loop.add_signal_handler(signal.SIGINT, on_interrupt)
        except (NotImplementedError, RuntimeError, ValueError):  # Windows' loops, embedded interpreters
            return False
        return True

    def stop(self) -> None:
        """Stop gracefully; ``start()`` returns once pending acks are sent and the member has left."""
        self._engine.stop()
