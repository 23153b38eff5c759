"""uvicorn's httptools HTTP/1.1 protocol with bounds on the request head.

uvicorn's httptools protocol reads a request head of any size (a 64 MB header was read, answered 200,
and its memory kept) and waits for one for ever (a client trickling header bytes, or sending nothing,
held its connection open indefinitely). Two bounds, checked as bytes arrive, before the app sees anything:

- **size**: the request line and headers together may be at most ``max_head_bytes``; past it the answer is
  431 with the error envelope, and the connection is closed;
- **time**: a request head must be complete within ``head_timeout`` seconds of its first byte (or of the
  connection, for the first request); past it the answer is 408, and the connection is closed.

A request body is bounded in time too (a client trickling one held a connection, and the app task waiting
for it, for minutes): it must be complete within ``body_timeout`` seconds of its head, or
``anonymous_body_timeout`` for a request without credentials (no ``Authorization`` or ``Cookie``
header: nobody gets to send a body slowly without saying who they are), and must keep coming at
``body_min_rate`` bytes a second at least, checked every ``body_check_seconds`` (or a third of the
time limit, if shorter). Past either the answer is
408 and the connection closed; the app sees the client gone (``http.disconnect``). A body still arriving
after the app has answered is no longer waited for at all.

A request the parser refuses (not HTTP/1.1) is answered 400 with the error envelope and a request id, like
every other answer, instead of uvicorn's text.

Each refusal is logged once, at WARNING, with the peer's address and a request id that the answer carries.
Idle keep-alive connections are uvicorn's business (``timeout_keep_alive``), as before.

It also writes a response's head and body with one ``write`` when the body comes whole (a
``content-length`` answer sent as one body message, as every JSON answer is): uvicorn writes them apart,
two syscalls and two loopback TCP segments per answer, about 5 % of a single publish's CPU (bench/README.md).
Streamed bodies (no length, or several body messages) get their head at once, as before.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from app.kit.ids import new_request_id

logger = logging.getLogger("queuecore.http")

MAX_HEAD_BYTES = 64 * 1024  # request line + headers; browsers and SDKs send a few KiB at most
HEAD_TIMEOUT_SECONDS = 10.0
BODY_TIMEOUT_SECONDS = 30.0
ANONYMOUS_BODY_TIMEOUT_SECONDS = 5.0
BODY_MIN_RATE = 1024  # bytes a second
BODY_CHECK_SECONDS = 5.0
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
_CREDENTIALS = (b"authorization", b"cookie")


class _HeadRefused(Exception):
    """Raised inside a parser callback to stop parsing a head that is too large."""


class HttpProtocol(HttpToolsProtocol):
    max_head_bytes = MAX_HEAD_BYTES
    head_timeout = HEAD_TIMEOUT_SECONDS
    body_timeout = BODY_TIMEOUT_SECONDS
    anonymous_body_timeout = ANONYMOUS_BODY_TIMEOUT_SECONDS
    body_min_rate = BODY_MIN_RATE
    body_check_seconds = BODY_CHECK_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refusal: tuple[int, str] | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_deadline = 0.0
        self._body_limit = 0.0
        self._body_bytes = 0
        self._body_bytes_checked = 0
        self._body_checked_at = 0.0
        self._body_interval = BODY_CHECK_SECONDS
        self._head_done_at = 0.0
        self._awaiting_body = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()  # a connection that never sends a request goes too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self._disarm_body_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm_head_timer()
        super().on_headers_complete()
        if self.cycle is not None and type(self.cycle) is RequestResponseCycle:
            # uvicorn builds the cycle itself; its task has not run yet, so every ``send`` is ours.
            self.cycle.__class__ = _OneWriteCycle
        # The body's clock starts now; a timer is armed only if the body is still incomplete once the
        # bytes at hand are parsed (``data_received``): a request that came whole costs no timer.
        self._head_done_at = self.loop.time()
        self._body_bytes = 0
        self._awaiting_body = True

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._awaiting_body = False
        self._disarm_body_timer()
        super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._awaiting_body and self._body_timer is None:
            self._arm_body_timer()

    def send_400_response(self, msg: str) -> None:
        if self._refusal is None:
            self._refuse(400, "The request is not valid HTTP/1.1.", level=logging.INFO)
            return
        status, message = self._refusal
        self._refuse(status, message)

    # -- the bounds ----------------------------------------------------------------------------------

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_head_bytes and self._refusal is None:
            limit_kib = self.max_head_bytes // 1024
            self._refusal = (431, f"The request line and headers exceed {limit_kib} KiB.")
            raise _HeadRefused  # httptools stops parsing; data_received answers via send_400_response

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_bytes == 0 and not self.url_started:
            self.transport.close()  # never began a request: nothing to answer
            logger.info("connection closed: no request within %g s", self.head_timeout, extra=self._peer())
            return
        self._refuse(408, f"The request head was not complete within {self.head_timeout:g} s.")

    def _arm_body_timer(self) -> None:
        """Start timing the body of the request whose head has ended, if it has one still to come."""
        self._awaiting_body = False
        length = b"0"
        credentials = chunked = False
        for name, value in self.headers:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                chunked = True
            elif name in _CREDENTIALS:
                credentials = True
        if not chunked and length.strip(b" 0") == b"":
            return  # no body to wait for
        if self.parser.should_upgrade():
            return  # a WebSocket handshake: no body, and the connection is the protocol's from here
        limit = self.body_timeout if credentials else self.anonymous_body_timeout
        started = self._head_done_at
        self._body_deadline = started + limit
        self._body_limit = limit
        self._body_checked_at = started
        self._body_bytes_checked = 0
        self._body_interval = min(self.body_check_seconds, limit / 3)
        wait = max(0.0, started + self._body_interval - self.loop.time())
        self._body_timer = self.loop.call_later(wait, self._check_body)

    def _disarm_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _check_body(self) -> None:
        self._body_timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and cycle.response_started:
            # Answered without the whole body (a refusal): nothing waits for the rest, and reading it
            # would only hold the connection; close it.
            if cycle.response_complete:
                self.transport.close()
            return
        now = self.loop.time()
        if now >= self._body_deadline - 1e-3:
            self._refuse(408, f"The request body was not complete within {self._body_limit:g} s.")
            return
        received = self._body_bytes - self._body_bytes_checked
        if received < self.body_min_rate * (now - self._body_checked_at):
            self._refuse(408, f"The request body arrived slower than {self.body_min_rate} bytes a second.")
            return
        self._body_bytes_checked, self._body_checked_at = self._body_bytes, now
        wait = min(self._body_interval, self._body_deadline - now)
        self._body_timer = self.loop.call_later(wait, self._check_body)

    @property
    def url_started(self) -> bool:
        return bool(getattr(self, "url", b""))

    def _refuse(self, status: int, message: str, *, level: int = logging.WARNING) -> None:
        request_id = new_request_id()
        body = orjson.dumps(
            {
                "error": {
                    "code": "INVALID_REQUEST",
                    "message": message,
                    "status": status,
                    "requestId": request_id,
                }
            }
        )
        head = [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"x-request-id: " + request_id.encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
        logger.log(level, "request refused: %s", message, extra={"requestId": request_id, **self._peer()})

    def _peer(self) -> dict[str, Any]:
        return {"client": f"{self.client[0]}:{self.client[1]}" if self.client else None}


class _OneWriteCycle(RequestResponseCycle):
    """uvicorn's request/response cycle, holding a sized response's head until its body."""

    _head: bytes | None = None

    async def send(self, message: Any) -> None:
        transport = self.transport
        if message["type"] == "http.response.start" and not self.response_started:
            held = _Held()
            self.transport = held  # type: ignore[assignment]
            try:
                await super().send(message)
            finally:
                self.transport = transport
            if self.chunked_encoding is False and self.scope["method"] != "HEAD":
                self._head = held.data  # a sized body follows: written with it
            elif held.data:
                transport.write(held.data)
            return
        head = self._head
        if head is not None:
            self._head = None
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self.transport = _Prefixed(transport, head)  # type: ignore[assignment]
                try:
                    await super().send(message)
                finally:
                    self.transport = transport
                return
            transport.write(head)  # the body comes in pieces: its head first, as uvicorn does
        await super().send(message)


class _Held:
    """Stands in for the transport while uvicorn renders a response head."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


class _Prefixed:
    """Stands in for the transport while uvicorn sends a whole body: the head goes out with it."""

    __slots__ = ("head", "transport")

    def __init__(self, transport: asyncio.Transport, head: bytes) -> None:
        self.transport = transport
        self.head = head

    def write(self, data: bytes) -> None:
        # One gathered write, without copying a large body behind the head.
        self.transport.writelines((self.head, data))
        self.head = b""

    def close(self) -> None:
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()
