"""uvicorn's ``websockets-sansio`` protocol with a short closing handshake and per-connection keepalive.

The sans-I/O implementation parses frames synchronously as bytes arrive and answers pings from timers:
no reader task and no awaits per frame, which is most of what the older ``websockets`` implementation
cost per frame on the push path (``bench/README.md``). It answers refused upgrades with a body (the ASGI
``websocket.http.response`` extension), which the push endpoint needs for its error envelopes.

Two things are changed:

- ``close_timeout`` is one second, not ten: a connection that stopped answering pings would otherwise
  wait 10 s more for a closing handshake that never comes before the app hears of the disconnect, and
  its group member would hold its partitions that long. One second is plenty for a live peer.
- **Silence, not one late pong, ends a connection.** Every byte from the peer (a frame, a pong) counts
  as hearing from it; the connection is failed once nothing has been heard for the *silence limit*
  (by default the server-wide ``ping_interval + ping_timeout``). Pings only make a live but idle peer
  speak. The ``KEEPALIVE`` scope extension lets the app set one connection's limit (a push member's is
  its group's ``sessionTimeout``: a GC pause or a network hiccup shorter than that is not a death).

And one false alarm is dropped: uvicorn logs "ASGI callable returned without completing handshake" at
ERROR after an upgrade the app *refused* with an HTTP answer (401, 404, …). A refusal is a normal answer,
logged at INFO with its request id by the request log; only a handshake that really went unanswered
(uvicorn then sends a 500) is still an error.
"""

from __future__ import annotations

import logging
from asyncio import TimerHandle
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

CLOSE_TIMEOUT_SECONDS = 1.0
# An ASGI scope extension: ``scope["extensions"][KEEPALIVE]["tune"](seconds)`` fails this connection
# once its peer has been silent for ``seconds`` (and pings it often enough that a live peer never is).
KEEPALIVE = "queuecore.keepalive"
_MIN_PING_INTERVAL = 0.25
_PINGS_PER_LIMIT = 3  # a live peer answers about this many pings within the silence limit


_NO_HANDSHAKE = "ASGI callable returned without completing handshake."


class _RefusalAwareLogger:
    """uvicorn's logger for one connection, less the false alarm after a refused upgrade."""

    def __init__(self, logger: logging.Logger, protocol: WebSocketProtocol) -> None:
        self._logger = logger
        self._protocol = protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)

    def error(self, msg: object, *args: Any, **kwargs: Any) -> None:
        if msg == _NO_HANDSHAKE and self._protocol.initial_response is not None:
            return  # the app answered the upgrade with an HTTP response: a refusal, not a fault
        self._logger.error(msg, *args, **kwargs)


class WebSocketProtocol(WebSocketsSansIOProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.close_timeout = CLOSE_TIMEOUT_SECONDS
        self.server_ping_interval: float | None = self.ping_interval
        limit = (self.ping_interval or 0.0) + (self.ping_timeout or 0.0)
        self.silence_limit: float | None = limit if self.ping_interval else None
        # uvicorn's pong deadline would fail a peer after one late pong: silence decides instead.
        self.ping_timeout = None
        self.last_heard = 0.0
        self.silence_timer: TimerHandle | None = None
        self.logger = _RefusalAwareLogger(self.logger, self)  # type: ignore[assignment]

    async def run_asgi(self) -> None:
        self.scope["extensions"][KEEPALIVE] = {"tune": self.detect_silence_within}
        await super().run_asgi()

    def data_received(self, data: bytes) -> None:
        self.last_heard = self.loop.time()
        super().data_received(data)

    def start_keepalive(self) -> None:
        super().start_keepalive()
        if self.silence_limit is not None:
            self.last_heard = self.loop.time()
            self.silence_timer = self.loop.call_later(self.silence_limit, self.check_silence)

    def stop_keepalive(self) -> None:
        super().stop_keepalive()
        if self.silence_timer is not None:
            self.silence_timer.cancel()
            self.silence_timer = None

    def check_silence(self) -> None:
        """Fail the connection if the peer has been silent for the limit; else look again when it
        would have been."""
        self.silence_timer = None
        if self.silence_limit is None or self.close_sent or self.transport.is_closing():
            return
        quiet = self.loop.time() - self.last_heard
        if quiet < self.silence_limit:
            self.silence_timer = self.loop.call_later(self.silence_limit - quiet, self.check_silence)
            return
        self.keepalive_timeout()  # uvicorn's own failure path: close frame 1011, transport closed

    def detect_silence_within(self, seconds: float) -> None:
        """Fail this connection once its peer has been silent for ``seconds``, pinging it often enough
        (a few times within that) that a live peer is always heard from."""
        interval = max(_MIN_PING_INTERVAL, seconds / _PINGS_PER_LIMIT)
        if self.server_ping_interval:
            interval = min(interval, self.server_ping_interval)
        if (interval, seconds) == (self.ping_interval, self.silence_limit):
            return
        self.ping_interval, self.silence_limit = interval, seconds
        if self.handshake_complete and not self.close_sent:
            # Restart the timers: they were scheduled with the old settings.
            self.stop_keepalive()
            self.start_keepalive()
