"""Commit wake-ups across API nodes: every node learns within milliseconds that a partition grew, whoever
appended to it.

The node that appends publishes the partition's new end (``latest``, as decimal ASCII) on core NATS subject
``qc.hw.<stream>`` once the append is stored; every node subscribes to ``qc.hw.>`` once and keeps the
highest end it has seen per partition (its *watermark*), waking the watches that wait below it. No polling:
a watch is a callback in a dict. A notice is at-most-once (core NATS), so the watermark is also refreshed
from every stream info and append this node makes, and every watch is woken when the connection comes back
(anything may have been missed while it was down): a woken loop reads and finds out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

NOTICE_PREFIX = "qc.hw."


class Watermarks:
    """The highest end seen per stream, and the watches waiting for a stream to pass an offset."""

    def __init__(self) -> None:
        self._ends: dict[str, int] = {}
        self._watches: dict[str, dict[int, tuple[int, Callable[[], None]]]] = {}
        self._ids = 0

    def end(self, stream: str) -> int | None:
        return self._ends.get(stream)

    def advance(self, stream: str, latest: int) -> None:
        """``stream`` holds records below ``latest``: wake those waiting for one of them."""
        if latest <= self._ends.get(stream, -1):
            return
        self._ends[stream] = latest
        waiting = self._watches.get(stream)
        if not waiting:
            return
        for watch_id, (offset, wake) in list(waiting.items()):
            if offset < latest:
                del waiting[watch_id]
                wake()

    def forget(self, stream: str) -> None:
        """The stream was deleted: a re-created one starts again at 0."""
        self._ends.pop(stream, None)
        self.wake_all(stream)

    def forget_prefix(self, prefix: str) -> None:
        """Forget every stream whose name starts with ``prefix`` (a deleted topic's), watched or not."""
        for name in {*self._ends, *self._watches}:
            if name.startswith(prefix):
                self.forget(name)

    def watch(self, stream: str, offset: int, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake`` once when ``stream`` passes ``offset`` (now, if it already has)."""
        if self._ends.get(stream, -1) > offset:
            wake()
            return _nothing
        self._ids += 1
        watch_id = self._ids
        waiting = self._watches.setdefault(stream, {})
        waiting[watch_id] = (offset, wake)

        def cancel() -> None:
            entries = self._watches.get(stream)
            if entries is not None:
                entries.pop(watch_id, None)
                if not entries:
                    del self._watches[stream]

        return cancel

    def wake_all(self, stream: str | None = None) -> None:
        """Wake every watch (of one stream): after a reconnect, a deletion, or at close."""
        streams = [stream] if stream is not None else list(self._watches)
        for name in streams:
            for _, wake in self._watches.pop(name, {}).values():
                wake()

    async def listen(self, nc: Client) -> None:
        """Follow every node's notices."""
        await nc.subscribe(NOTICE_PREFIX + ">", cb=self._on_notice)

    async def _on_notice(self, msg: Msg) -> None:
        try:
            latest = int(msg.data)
        except ValueError:
            return
        self.advance(msg.subject[len(NOTICE_PREFIX) :], latest)

    async def announce(self, nc: Client, stream: str, latest: int) -> None:
        """Tell every node (this one included, at once) that ``stream`` now ends at ``latest``."""
        self.advance(stream, latest)
        # A lost notice is covered by the reconnect wake-up.
        with contextlib.suppress(Exception):
            await nc.publish(NOTICE_PREFIX + stream, str(latest).encode())


def _nothing() -> None:
    return None
