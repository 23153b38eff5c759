"""uvicorn's ``websockets-sansio`` protocol with a short closing handshake and per-connection keepalive.

The sans-I/O implementation parses frames synchronously as bytes arrive and answers pings from timers:
no reader task and no awaits per frame, which is most of what the older ``websockets`` implementation
cost per frame on the push path (``bench/README.md``). It answers refused upgrades with a body (the ASGI
``websocket.http.response`` extension), which the push endpoint needs for its error envelopes.

Two things are changed:

- ``close_timeout`` is one second, not ten: a connection that stopped answering pings would otherwise
  wait 10 s more for a closing handshake that never comes before the app hears of the disconnect, and
  its group member would hold its partitions that long. One second is plenty for a live peer.
- The ``KEEPALIVE`` scope extension lets the app make one connection's pings detect a silent peer
  sooner than the server-wide settings (a group's ``sessionTimeout`` may be shorter).
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

CLOSE_TIMEOUT_SECONDS = 1.0
# An ASGI scope extension: ``scope["extensions"][KEEPALIVE]["tune"](seconds)`` makes this connection's
# pings detect a silent peer within about ``seconds`` (a group's sessionTimeout may be shorter than the
# server-wide ping settings allow for).
KEEPALIVE = "queuecore.keepalive"


class WebSocketProtocol(WebSocketsSansIOProtocol):
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
        if self.handshake_complete and not self.close_sent:
            # Restart the timers: the pending ping was scheduled with the old interval.
            self.stop_keepalive()
            self.start_keepalive()
