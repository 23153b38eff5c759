"""The WebSocket protocol (``app.kit.websocket_protocol.WebSocketProtocol``) over a real uvicorn server
and real clients: the ``websockets`` library (which answers pings, as browsers do), and a raw socket
that completes the handshake and then says only what the test makes it say.

What must hold:

* silence, not one late pong, ends a connection: a peer silent for the silence limit is failed (close
  1011) and the app hears of it; a peer that answers pings, or that sends frames but never a pong, is
  kept well past the limit;
* the ``KEEPALIVE`` scope extension sets one connection's limit (far below the server's here);
* an upgrade the app refuses with an HTTP answer reaches the client with its status and body and logs no
  error; one the app leaves unanswered is still logged as an error;
* frames over the server's ``ws_max_size`` end the connection with 1009 (the bound on client frames).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import pytest
import uvicorn
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from app.kit.websocket_protocol import KEEPALIVE, WebSocketProtocol

HANG_GUARD = 15.0  # how long a test waits for the server to act before it fails (not a speed requirement)
MAX_FRAME = 4096


class App:
    """An ASGI app: accepts /echo (tuning its keepalive from ``?tune=``), refuses /refuse with 403, leaves
    /ignore unanswered; records each connection's disconnect."""

    def __init__(self) -> None:
        self.disconnects: list[int] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "websocket"
        path = scope["path"]
        if path == "/refuse":
            await send(
                {"type": "websocket.http.response.start", "status": 403, "headers": [(b"x-refused", b"yes")]}
            )
            await send({"type": "websocket.http.response.body", "body": b'{"error": "no"}'})
            return
        if path == "/ignore":
            return
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        tune = parse_qs(scope["query_string"].decode()).get("tune")
        if tune:
            scope["extensions"][KEEPALIVE]["tune"](float(tune[0]))
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                self.disconnects.append(message.get("code", 0))
                return
            await send({"type": "websocket.send", "text": message.get("text") or ""})


Serve = Callable[..., Awaitable[tuple[App, int]]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Starts a uvicorn server with the protocol (``ping_interval``, ``ping_timeout``); its app and port."""
    servers: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    async def start(*, ping_interval: float, ping_timeout: float) -> tuple[App, int]:
        app = App()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            ws=WebSocketProtocol,
            ws_ping_interval=ping_interval,
            ws_ping_timeout=ping_timeout,
            ws_max_size=MAX_FRAME,
            lifespan="off",
            log_config=None,
            access_log=False,
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        servers.append((server, task))
        async with asyncio.timeout(HANG_GUARD):
            while not server.started:
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        return app, port

    yield start
    for server, task in servers:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, HANG_GUARD)


class RawPeer:
    """A WebSocket client on a plain socket: it never answers a ping unless the test sends a pong."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.received = b""

    @classmethod
    async def connect(cls, port: int, path: str = "/echo") -> RawPeer:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        return cls(reader, writer)

    def send_text(self, text: str) -> None:
        payload = text.encode()
        assert len(payload) < 126
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(struct.pack("!BB", 0x81, 0x80 | len(payload)) + mask + masked)

    async def closed_by_server(self, within: float) -> bool:
        """Whether the server closed the connection within ``within`` seconds (reading all it sent)."""
        try:
            async with asyncio.timeout(within):
                while chunk := await self.reader.read(4096):
                    self.received += chunk
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.writer.close()


CLOSE_1011 = re.compile(rb"\x88[\x02-\x7d]\x03\xf3")  # an unmasked close frame, code 1011 (and a reason)


class TestSilence:
    async def test_a_silent_peer_is_failed_once_the_silence_limit_passes(self, serve) -> None:
        app, port = await serve(ping_interval=0.2, ping_timeout=0.3)
        peer = await RawPeer.connect(port)
        try:
            assert await peer.closed_by_server(HANG_GUARD)
            assert CLOSE_1011.search(peer.received)
            assert b"\x89" in peer.received  # it was pinged first, and never answered
            async with asyncio.timeout(HANG_GUARD):
                while not app.disconnects:
                    await asyncio.sleep(0.02)
        finally:
            peer.close()

    async def test_a_peer_that_answers_pings_is_kept_well_past_the_limit(self, serve) -> None:
        app, port = await serve(ping_interval=0.5, ping_timeout=1.0)  # a silence limit of 1.5 s
        async with connect(f"ws://127.0.0.1:{port}/echo") as ws:
            await asyncio.sleep(6.0)  # four silence limits, quiet but for the pongs
            await ws.send("still here")
            assert await asyncio.wait_for(ws.recv(), HANG_GUARD) == "still here"
        assert app.disconnects == [1000]

    async def test_a_peer_that_sends_frames_but_never_a_pong_is_kept(self, serve) -> None:
        _, port = await serve(ping_interval=0.5, ping_timeout=1.0)  # a silence limit of 1.5 s
        peer = await RawPeer.connect(port)
        try:
            for i in range(20):  # 6 s: four silence limits, a frame every 0.3 s, no pong ever
                peer.send_text(f"ack {i}")
                assert not await peer.closed_by_server(0.3)
            assert not CLOSE_1011.search(peer.received)
            assert b"\x89" in peer.received  # it was pinged, and never answered
            assert b"ack 19" in peer.received  # the echoes arrived: the connection is live
        finally:
            peer.close()


class TestKeepaliveExtension:
    async def test_the_app_sets_one_connections_silence_limit(self, serve) -> None:
        # The server's limit is two minutes: only the connection's own can end it within the hang guard.
        _, port = await serve(ping_interval=60, ping_timeout=60)
        tuned = await RawPeer.connect(port, "/echo?tune=0.6")
        untuned = await RawPeer.connect(port, "/echo")
        try:
            assert await tuned.closed_by_server(HANG_GUARD)
            assert CLOSE_1011.search(tuned.received)
            assert not await untuned.closed_by_server(0.5)
        finally:
            tuned.close()
            untuned.close()

    async def test_a_tuned_connection_whose_peer_answers_pings_is_kept(self, serve) -> None:
        _, port = await serve(ping_interval=60, ping_timeout=60)
        async with connect(f"ws://127.0.0.1:{port}/echo?tune=1.5") as ws:
            await asyncio.sleep(6.0)  # four of its limits: pinged often enough to be heard from
            await ws.send("alive")
            assert await asyncio.wait_for(ws.recv(), HANG_GUARD) == "alive"


class TestRefusedUpgrades:
    async def test_a_refused_upgrade_reaches_the_client_with_its_body_and_logs_no_error(
        self, serve, caplog
    ) -> None:
        _, port = await serve(ping_interval=20, ping_timeout=20)
        with caplog.at_level(logging.INFO), pytest.raises(InvalidStatus) as refused:
            async with connect(f"ws://127.0.0.1:{port}/refuse"):
                pass
        response = refused.value.response
        assert response.status_code == 403
        assert response.body == b'{"error": "no"}'
        assert response.headers["x-refused"] == "yes"
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

    async def test_an_upgrade_left_unanswered_is_still_logged_as_an_error(self, serve, caplog) -> None:
        _, port = await serve(ping_interval=20, ping_timeout=20)
        with caplog.at_level(logging.INFO), pytest.raises(InvalidStatus) as refused:
            async with connect(f"ws://127.0.0.1:{port}/ignore"):
                pass
        assert refused.value.response.status_code == 500
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert "ASGI callable returned without completing handshake." in errors


class TestFrameBounds:
    async def test_a_frame_over_the_size_limit_ends_the_connection_with_1009(self, serve) -> None:
        app, port = await serve(ping_interval=20, ping_timeout=20)
        async with connect(f"ws://127.0.0.1:{port}/echo", max_size=None) as ws:
            await ws.send("x" * MAX_FRAME)  # at the limit: taken
            assert len(await asyncio.wait_for(ws.recv(), HANG_GUARD)) == MAX_FRAME
            await ws.send("x" * (MAX_FRAME + 1))
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), HANG_GUARD)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        async with asyncio.timeout(HANG_GUARD):
            while not app.disconnects:
                await asyncio.sleep(0.02)
        assert app.disconnects == [1009]
