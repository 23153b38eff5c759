"""The HTTP/1.1 client of push-group deliveries: one POST per message, keep-alive connections per origin.

Written on asyncio streams rather than httpx because a delivery is the hot path of a push group: httpx
spent ~7 ms of CPU per POST on the loaded test machine (≈ 130 POSTs/s on a core; bench/rawhttp.py says
1-2 ms on a quiet one), this client a small fraction of that (bench/results/push_urls.md).

What it does, and no more:

- ``http`` and ``https`` (TLS verified against the URL's host name, SNI set), HTTP/1.1, keep-alive;
- the request goes in one write (head and body);
- the SSRF rule at connect time (``UrlRule.block_internal``): every new connection resolves its host,
  refuses internal addresses (``urls.check_public``) and connects to the very address approved, so a DNS
  answer that changed since the URL was set (rebinding) cannot reach inside;
- answers with ``content-length``, ``chunked`` or read-to-close bodies, of which at most ``cap`` bytes are
  kept; a connection whose answer was not read whole is closed, not reused;
- redirects are answers like any other (never followed);
- a reused connection the server had closed meanwhile (no byte of an answer came) is retried once on a
  new one, as other clients do.

Timeouts are the caller's (``asyncio.timeout`` around ``post``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from app.broker import urls
from app.broker.errors import InvalidRequest

_MAX_IDLE = 256  # idle connections kept per origin
_DRAIN_LIMIT = 64 << 10  # body bytes read (and dropped) past the cap to keep a connection reusable


class DeliveryError(Exception):
    """No answer: the address was refused, the connection failed or broke, or the answer was not HTTP."""


@dataclass(slots=True)
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased; the last of repeated ones
    body: bytes = b""  # at most the cap


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.used = False

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


class DeliveryClient:
    """POSTs to push URLs (see the module docstring). One per process; safe for concurrent use."""

    def __init__(self, rule: urls.UrlRule, ssl_context: ssl.SSLContext | None = None) -> None:
        self._rule = rule
        self._ssl = ssl_context or ssl.create_default_context()
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}

    async def aclose(self) -> None:
        for pool in self._idle.values():
            for connection in pool:
                connection.close()
        self._idle.clear()

    async def post(self, url: str, body: bytes, headers: dict[str, str], cap: int) -> Answer:
        """POST ``body`` to ``url``; the answer with at most ``cap`` bytes of its body."""
        parts = urlsplit(url)
        scheme, host = parts.scheme, (parts.hostname or "")
        port = parts.port or (443 if scheme == "https" else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {target} HTTP/1.1", f"host: {parts.netloc}"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise DeliveryError(f"header {name} holds a line break")
            lines.append(f"{name}: {value}")
        lines.append(f"content-length: {len(body)}")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        origin = (scheme, host, port)
        for _ in range(2):
            connection = await self._connection(origin)
            reused = connection.used
            connection.used = True
            try:
                connection.writer.write(request)
                answer, reusable = await self._read(connection, cap)
            except _NothingCame:
                connection.close()
                if reused:
                    continue  # the server closed an idle connection: once more on a new one
                raise DeliveryError("the connection closed before an answer came") from None
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as error:
                connection.close()
                raise DeliveryError(f"{type(error).__name__}: {error}") from None
            except BaseException:
                connection.close()  # a timeout or cancellation mid-answer: the connection is unusable
                raise
            if reusable:
                pool = self._idle.setdefault(origin, deque())
                if len(pool) < _MAX_IDLE:
                    pool.append(connection)
                else:
                    connection.close()
            else:
                connection.close()
            return answer
        raise DeliveryError("the connection closed before an answer came")

    async def _connection(self, origin: tuple[str, str, int]) -> _Connection:
        pool = self._idle.get(origin)
        while pool:
            connection = pool.pop()  # the most recently used: the least likely to have timed out
            if connection.usable():
                return connection
            connection.close()
        scheme, host, port = origin
        address = host
        if self._rule.block_internal:
            try:
                address = (await urls.check_public(self._rule, host, port))[0].split("%", 1)[0]
            except InvalidRequest as refused:
                raise DeliveryError(refused.message) from None
        try:
            reader, writer = await asyncio.open_connection(
                address,
                port,
                ssl=self._ssl if scheme == "https" else None,
                server_hostname=host if scheme == "https" else None,
                limit=_DRAIN_LIMIT,
            )
        except (OSError, ssl.SSLError) as error:
            raise DeliveryError(f"{type(error).__name__}: {error}") from None
        return _Connection(reader, writer)

    async def _read(self, connection: _Connection, cap: int) -> tuple[Answer, bool]:
        reader = connection.reader
        while True:
            try:
                status_line = await reader.readuntil(b"\r\n")
            except asyncio.IncompleteReadError as error:
                if not error.partial:
                    raise _NothingCame from None
                raise
            version, _, rest = status_line.decode("latin-1").partition(" ")
            if not version.startswith("HTTP/1."):
                raise ValueError("not an HTTP/1.x answer")
            status = int(rest[:3])
            headers: dict[str, str] = {}
            while True:
                line = await reader.readuntil(b"\r\n")
                if line == b"\r\n":
                    break
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if 100 <= status < 200:
                continue  # an interim answer (100 Continue): the real one follows
            break
        keep = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
        if status in (204, 304):
            return Answer(status, headers), keep
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body, whole = await _read_chunked(reader, cap)
            return Answer(status, headers, body), keep and whole
        length = headers.get("content-length")
        if length is not None:
            size = int(length)
            if size <= max(cap, _DRAIN_LIMIT):
                data = await reader.readexactly(size)
                return Answer(status, headers, data[:cap]), keep
            return Answer(status, headers, await reader.readexactly(cap)), False
        # Neither: the body runs to the end of the connection; read the cap and drop the connection.
        data = b""
        with contextlib.suppress(asyncio.IncompleteReadError):
            data = await reader.readexactly(cap)
        return Answer(status, headers, data), False


class _NothingCame(Exception):
    """The connection ended before the first byte of an answer."""


async def _read_chunked(reader: asyncio.StreamReader, cap: int) -> tuple[bytes, bool]:
    """A chunked body: its first ``cap`` bytes, and whether it was read whole (the connection reusable)."""
    kept = b""
    total = 0
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return kept, True
        total += size
        if total > _DRAIN_LIMIT:
            return kept, False
        chunk = await reader.readexactly(size + 2)
        if len(kept) < cap:
            kept += chunk[: min(size, cap - len(kept))]
