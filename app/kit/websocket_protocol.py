"""uvicorn's ``websockets`` protocol with a short closing handshake.

uvicorn's ``websockets`` implementation is the one that answers refused upgrades with a body (the ASGI
``websocket.http.response`` extension), which the push endpoint needs for its error envelopes. It leaves
the library's ``close_timeout`` at 10 s, though: a connection that stopped answering pings would then wait
10 s more for a closing handshake that never comes before the app hears of the disconnect, and its group
member would hold its partitions that long. One second is plenty for a live peer to answer a close frame.
"""

from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():
    # uvicorn deprecates this implementation in favour of websockets-sansio, which cannot yet send a body
    # with a refused upgrade.
    warnings.simplefilter("ignore")
    from uvicorn.protocols.websockets.websockets_impl import WebSocketProtocol as _UvicornProtocol

CLOSE_TIMEOUT_SECONDS = 1.0
# An ASGI scope extension: ``scope["extensions"][KEEPALIVE]["tune"](seconds)`` makes this connection's
# pings detect a silent peer within about ``seconds`` (a group's sessionTimeout may be shorter than the
# server-wide ping settings allow for).
KEEPALIVE = "queuecore.keepalive"


class WebSocketProtocol(_UvicornProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.close_timeout = CLOSE_TIMEOUT_SECONDS

    async def run_asgi(self) -> None:
        self.scope["extensions"][KEEPALIVE] = {"tune": self.detect_silence_within}
        await super().run_asgi()

    def detect_silence_within(self, seconds: float) -> None:
        """Ping often enough that a peer silent for about ``seconds`` is dropped: a ping every quarter,
        a third to answer it, and the one-second closing handshake after."""
        interval = max(0.25, min(self.ping_interval or seconds, (seconds - CLOSE_TIMEOUT_SECONDS) / 3))
        timeout = max(0.25, min(self.ping_timeout or seconds, (seconds - CLOSE_TIMEOUT_SECONDS) / 3))
        if (interval, timeout) == (self.ping_interval, self.ping_timeout):
            return
        self.ping_interval, self.ping_timeout = interval, timeout
        task = getattr(self, "keepalive_ping_task", None)
        if task is not None and not task.done():  # restart: its current sleep is the old interval
            task.cancel()
            self.keepalive_ping_task = self.loop.create_task(self.keepalive_ping())
