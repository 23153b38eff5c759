"""A minimal keep-alive HTTP/1.1 client for benchmark load: a pool of asyncio connections writing prebuilt
requests and reading ``Content-Length`` answers. httpx spends ~1-2 ms of client CPU per request, which at
1,000 req/s from the same process as the consumer measures the client, not the server."""

from __future__ import annotations

import asyncio
from collections import deque


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def request(self, head: bytes, body: bytes) -> int:
        self.writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
        status_line = await self.reader.readuntil(b"\r\n")
        length = 0
        while True:
            line = await self.reader.readuntil(b"\r\n")
            if line == b"\r\n":
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length:
            await self.reader.readexactly(length)
        return int(status_line.split(b" ", 2)[1])


class Pool:
    """``post(path, body)`` over up to ``size`` keep-alive connections."""

    def __init__(self, host: str, port: int, headers: dict[str, str], size: int = 32) -> None:
        self.host, self.port, self.size = host, port, size
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._prefix = f"Host: {host}:{port}\r\n{extra}Content-Type: application/json\r\nContent-Length: "
        # Oldest first: every connection is used in turn, so none idles past the server's keep-alive
        # timeout (uvicorn's 5 s) at the bottom of a stack after a burst opened it.
        self._idle: deque[Connection] = deque()
        self._room = asyncio.Semaphore(size)

    async def post(self, path: str, body: bytes) -> int:
        head = f"POST {path} HTTP/1.1\r\n{self._prefix}".encode()
        async with self._room:
            if self._idle:
                conn = self._idle.popleft()
                try:
                    status = await conn.request(head, body)
                except (asyncio.IncompleteReadError, ConnectionResetError):
                    # The server closed it as idle just as it was taken: nothing reached the app. Once more.
                    conn.writer.close()
                    conn = Connection(*await asyncio.open_connection(self.host, self.port))
                    status = await conn.request(head, body)
            else:
                conn = Connection(*await asyncio.open_connection(self.host, self.port))
                status = await conn.request(head, body)
            self._idle.append(conn)
            return status

    async def close(self) -> None:
        for conn in self._idle:
            conn.writer.close()
        self._idle.clear()
