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


class WebSocketProtocol(_UvicornProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.close_timeout = CLOSE_TIMEOUT_SECONDS
