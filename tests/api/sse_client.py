"""Test helpers for Server-Sent Events: the deployment's app served by a real uvicorn (httpx's ASGI
transport buffers a whole answer, so a stream that never ends needs a socket), and a reader of events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def served(app: FastAPI) -> AsyncIterator[str]:
    """``app`` (its lifespan already running) on a loopback port, with the server's own HTTP protocol."""
    port = _free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        lifespan="off",
        log_config=None,
        access_log=False,
        http="app.kit.http_protocol:HttpProtocol",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)


@dataclass
class Event:
    """One event as a client sees it (``comment`` holds a comment line's text instead)."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None
    comment: str | None = None

    def json(self) -> Any:
        return json.loads(self.data)


class Stream:
    """An open event stream. One task reads it into a queue (a read cancelled mid-way would break the
    connection: a timeout here only stops waiting)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.seen: list[Event] = []
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        current, fields = Event(), 0
        try:
            async for line in self.response.aiter_lines():
                if line == "":
                    if fields:
                        await self._queue.put(current)
                    current, fields = Event(), 0
                    continue
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                fields += 1
                if name == "":
                    current.comment = value
                elif name == "event":
                    current.event = value
                elif name == "data":
                    current.data = f"{current.data}\n{value}" if current.data else value
                elif name == "id":
                    current.id = value
                elif name == "retry":
                    current.retry = int(value)
        except httpx.HTTPError:
            pass
        finally:
            await self._queue.put(None)

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader
        await self.response.aclose()

    async def next(self, timeout: float = 10.0, *, comments: bool = False) -> Event:
        """The next event (comments skipped unless ``comments``); ``TimeoutError`` after ``timeout``;
        ``EOFError`` once the server ended the stream."""
        async with asyncio.timeout(timeout):
            while True:
                got = await self._queue.get()
                if got is None:
                    self._queue.put_nowait(None)
                    raise EOFError("the stream ended")
                self.seen.append(got)
                if got.comment is not None and not comments:
                    continue
                return got

    async def until(self, kind: str, timeout: float = 10.0) -> Event:
        """Skip to the next event named ``kind``."""
        async with asyncio.timeout(timeout):
            while True:
                got = await self.next(timeout)
                if got.event == kind:
                    return got

    async def messages(self, n: int, timeout: float = 10.0) -> list[Event]:
        """The next ``n`` ``message`` events (others skipped)."""
        out = []
        async with asyncio.timeout(timeout):
            while len(out) < n:
                got = await self.next(timeout)
                if got.event == "message":
                    out.append(got)
        return out

    async def ended(self, timeout: float = 10.0) -> None:
        """Until the server ends the stream (events left are read and kept in ``seen``)."""
        with contextlib.suppress(EOFError):
            while True:
                await self.next(timeout, comments=True)


@contextlib.asynccontextmanager
async def open_stream(
    http: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None, **params: Any
) -> AsyncIterator[Stream]:
    """``GET path`` as an event stream; fails unless it answers 200 ``text/event-stream``."""
    request = http.build_request(
        "GET", path, params=params, headers={"Accept": "text/event-stream", **(headers or {})}
    )
    response = await http.send(request, stream=True)
    try:
        assert response.status_code == 200, (await response.aread()).decode()
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = Stream(response)
    except BaseException:
        await response.aclose()
        raise
    try:
        yield stream
    finally:
        await stream.close()
