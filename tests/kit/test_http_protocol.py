"""The HTTP protocol's one-write answers: a sized response leaves in one ``write``, head and body together;
anything else is written as uvicorn writes it (the head first)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from app.kit.http_protocol import HttpProtocol


class RecordingTransport(asyncio.Transport):
    """A transport that keeps what is written to it (the protocol's peer, not a stand-in for a service)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:  # one gathered write: one entry
        self.writes.append(b"".join(list_of_data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def sized(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 201, "headers": [(b"content-length", b"7")]})
    await send({"type": "http.response.body", "body": b'{"a":1}'})


async def streamed(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"one", "more_body": True})
    await send({"type": "http.response.body", "body": b"two"})


async def sized_in_pieces(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"6")]})
    await send({"type": "http.response.body", "body": b"one", "more_body": True})
    await send({"type": "http.response.body", "body": b"two"})


async def exchange(app: Any, request: bytes) -> RecordingTransport:
    config = uvicorn.Config(app, http=HttpProtocol, log_config=None, lifespan="off")
    config.load()
    protocol = HttpProtocol(config=config, server_state=ServerState(), app_state={})
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(request)
    for _ in range(100):  # the cycle's task runs on the loop; a bounded number of turns
        if protocol.cycle is not None and protocol.cycle.response_complete:
            break
        await asyncio.sleep(0)
    protocol.connection_lost(None)
    return transport


GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.asyncio
async def test_a_sized_answer_is_one_write_of_head_and_body() -> None:
    transport = await exchange(sized, GET)
    assert len(transport.writes) == 1
    head, _, body = transport.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 201 Created\r\n") and b"content-length: 7" in head
    assert body == b'{"a":1}'


@pytest.mark.asyncio
async def test_a_streamed_answer_sends_its_head_first() -> None:
    transport = await exchange(streamed, GET)
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"\r\n\r\n") and b"transfer-encoding: chunked" in transport.writes[0]
    assert b"".join(transport.writes[1:]) == b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"


@pytest.mark.asyncio
async def test_a_sized_answer_in_pieces_sends_its_head_first() -> None:
    transport = await exchange(sized_in_pieces, GET)
    assert transport.writes[0].endswith(b"\r\n\r\n")
    assert transport.writes[1:] == [b"one", b"two"]


@pytest.mark.asyncio
async def test_a_head_request_gets_its_head() -> None:
    transport = await exchange(sized, b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 201") and transport.writes[0].endswith(b"\r\n\r\n")


@pytest.mark.asyncio
async def test_a_closing_answer_is_written_then_closed() -> None:
    transport = await exchange(sized, b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    assert len(transport.writes) == 1 and transport.writes[0].endswith(b'{"a":1}')
    assert b"connection: close" in transport.writes[0]
    assert transport.closed
