"""Large reads on links of their own, their replies parsed in bulk rather than one ``Msg`` at a time.

A batch direct get answers one NATS message per record. Through nats-py each one is matched by a regular
expression, made a ``Msg``, handed to a subscription's callback and queued: most of a JetStream bulk read's
CPU (``bench/results/spark.md``). ``BulkLink`` speaks the NATS client protocol itself on a few connections
of its own, only for the reads the engine asks of it (``Reads``, from ``bulk_read_min_records`` records
on): one ``PUB`` of the direct get, then the replies cut out of the socket's bytes by offsets - a record
is a ``MSG`` line and its payload, the end a ``HMSG`` status - with no object per record but its bytes.

It signs in as the engine's nats-py connection does (``NatsLink``: user and password, a creds file's JWT
and the nonce signed with its seed, TLS with the same context), to the configured servers in turn. It only
ever reads, and only the plain case: records ``seq``..``last`` with no headers (``no_hdr``), checked
against the end-of-batch status as ``JetStreamClient.direct_get`` checks them. Anything else - a status
other than the end or "not found", a protocol error, a link that fails - answers ``None``, and the caller
reads through nats-py as before, which knows every other case; a link that failed is dropped.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import nkeys  # type: ignore[import-untyped]  # nats-py[nkeys]: signs the server's nonce for a creds file
import orjson

from app.stores.log.jetstream.config import NatsLink

logger = logging.getLogger(__name__)

_READ_BYTES = 1 << 20
# Links open at most, kept between reads. A read finding them all busy goes through nats-py: many readers at
# once (push members of many partitions) never open and close a link per read.
_MAX_LINKS = 8
_END_OF_BATCH = b"NATS/1.0 204"
_NOT_FOUND = b"NATS/1.0 404"
_LAST = b"Nats-Last-Sequence:"


class BulkLink:
    """Batch direct gets over protocol links of its own (see the module docstring)."""

    def __init__(self, servers: Sequence[str], link: NatsLink, timeout: float) -> None:
        self.servers = [s.strip() for server in servers for s in server.split(",") if s.strip()]
        self.link = link
        self.timeout = timeout
        self._idle: list[_Link] = []
        self._open_links = 0  # idle and in use
        self._next_server = 0
        self._closed = False
        self._warned = False  # that no link could be opened: said once, as a warning (reads go on, slower)

    async def read(self, stream: str, seq: int, batch: int, max_bytes: int) -> list[bytes] | None:
        """The payloads of up to ``batch`` records from ``seq`` on (``seq``, ``seq`` + 1, …: consecutive);
        ``[]`` when there is none; None when the answer is anything else, or every link is busy (read it
        through nats-py)."""
        if self._idle:
            link = self._idle.pop()
        elif self._open_links >= _MAX_LINKS:
            return None
        else:
            self._open_links += 1  # counted while it opens: readers at once never open more than the cap
            try:
                link = await self._open()
            except (OSError, TimeoutError, _Refused) as exc:
                self._open_links -= 1
                if not self._warned:
                    self._warned = True
                    logger.warning("bulk read links unavailable (%s): large reads go through the client", exc)
                return None
            except BaseException:
                self._open_links -= 1
                raise
        try:
            found = await asyncio.wait_for(link.direct_get(stream, seq, batch, max_bytes), self.timeout)
        except (OSError, TimeoutError, _Refused, ValueError) as exc:
            logger.debug("bulk read link dropped (%s): reading through the client", exc)
            self._drop(link)
            return None
        except BaseException:
            self._drop(link)  # cancelled mid-answer: what is left of it would be read as the next answer
            raise
        if self._closed:
            self._drop(link)
        else:
            self._idle.append(link)  # (a None answer was read whole: the link is fine)
        return found

    async def close(self) -> None:
        self._closed = True
        for link in self._idle:
            self._drop(link)
        self._idle.clear()

    def _drop(self, link: _Link) -> None:
        link.close()
        self._open_links -= 1

    async def _open(self) -> _Link:
        last: Exception | None = None
        for _ in range(len(self.servers)):
            server = self.servers[self._next_server % len(self.servers)]
            self._next_server += 1
            try:
                return await asyncio.wait_for(_Link.open(server, self.link), self.timeout)
            except (OSError, TimeoutError, _Refused) as exc:
                last = exc
        raise last or OSError("no NATS server configured")


class _Refused(Exception):
    """The server said ``-ERR``, or answered what this link does not speak."""


class _Link:
    """One NATS protocol connection that sends direct gets and reads their replies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.inbox = b"_QCBULK." + secrets.token_hex(8).encode()
        self.buffer = b""

    @classmethod
    async def open(cls, server: str, link: NatsLink) -> _Link:
        url = urlsplit(server if "://" in server else "nats://" + server)
        host, port = url.hostname or "127.0.0.1", url.port or 4222
        reader, writer = await asyncio.open_connection(host, port, limit=_READ_BYTES * 4)
        self = cls(reader, writer)
        try:
            line = await reader.readuntil(b"\r\n")
            if not line.startswith(b"INFO "):
                raise _Refused(f"the server's greeting is not INFO: {line[:40]!r}")
            info = orjson.loads(line[5:])
            context = link.tls_context()
            if context is None and info.get("tls_required"):
                raise _Refused("the server requires TLS and the link has none configured")
            if context is not None:
                await writer.start_tls(context, server_hostname=link.tls_hostname or host)
            connect: dict[str, object] = {
                "verbose": False,
                "pedantic": False,
                "headers": True,
                "no_responders": True,
                "protocol": 1,
                "lang": "python-queuecore-bulk",
                "version": "1",
            }
            if link.user:
                connect |= {"user": link.user, "pass": link.password}
            if link.creds:
                jwt, seed = _creds(link.creds)
                signed = nkeys.from_seed(seed).sign(str(info.get("nonce", "")).encode())
                connect |= {"jwt": jwt, "sig": base64.b64encode(signed).decode()}
            writer.write(b"CONNECT " + orjson.dumps(connect) + b"\r\nPING\r\n")
            await writer.drain()
            while True:  # the PONG says the CONNECT was taken; an -ERR that it was not
                line = await self.reader.readuntil(b"\r\n")
                if line.startswith(b"PONG"):
                    break
                if line.startswith(b"-ERR"):
                    raise _Refused(line.decode(errors="replace").strip())
            writer.write(b"SUB " + self.inbox + b" 1\r\n")
            return self
        except BaseException:
            self.close()
            raise

    async def direct_get(self, stream: str, seq: int, batch: int, max_bytes: int) -> list[bytes] | None:
        body = orjson.dumps({"seq": seq, "batch": batch, "max_bytes": max_bytes, "no_hdr": True})
        self.writer.write(
            b"PUB $JS.API.DIRECT.GET.%s %s %d\r\n%s\r\n" % (stream.encode(), self.inbox, len(body), body)
        )
        await self.writer.drain()
        records: list[bytes] = []
        append = records.append
        buffer = self.buffer
        # Every record of an answer comes as "MSG <subject> <sid> " and its length: once one is read, the
        # next are found by that prefix, with one short find for the length.
        prefix = b"MSG \0"
        while True:
            at, size = 0, len(buffer)
            while True:
                if buffer.startswith(prefix, at):
                    digits = at + len(prefix)
                    end = buffer.find(b"\r\n", digits)
                    if end < 0:
                        break
                    start = end + 2
                    stop = start + int(buffer[digits:end])
                    if stop + 2 > size:
                        break
                    append(buffer[start:stop])
                    at = stop + 2
                    continue
                end = buffer.find(b"\r\n", at)
                if end < 0:
                    break
                if buffer.startswith(b"MSG ", at):  # a record: MSG <subject> <sid> <bytes>
                    prefix = buffer[at : buffer.rfind(b" ", at, end) + 1]  # then read as every next one
                elif buffer.startswith(b"HMSG ", at):  # a status: HMSG <subject> <sid> <head> <total>
                    start = end + 2
                    stop = start + int(buffer[buffer.rfind(b" ", at, end) + 1 : end])
                    if stop + 2 > size:
                        break
                    self.buffer = buffer[stop + 2 :]
                    return _settled(buffer[start:stop], records, seq)
                elif buffer.startswith(b"PING", at):
                    self.writer.write(b"PONG\r\n")
                    at = end + 2
                elif buffer.startswith(b"-ERR", at):
                    raise _Refused(buffer[at:end].decode(errors="replace"))
                else:  # +OK, PONG, INFO: nothing to do
                    at = end + 2
            chunk = await self.reader.read(_READ_BYTES)
            if not chunk:
                raise ConnectionResetError("the NATS server closed the bulk read link")
            buffer = buffer[at:] + chunk

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


def _settled(status: bytes, records: list[bytes], seq: int) -> list[bytes] | None:
    """The records, when the status ending them says they are ``seq``..its last sequence; [] when nothing
    is there; None for any other answer."""
    if status.startswith(_NOT_FOUND) and not records:
        return []
    if not status.startswith(_END_OF_BATCH):
        return None
    at = status.find(_LAST)
    if at < 0:
        return None
    last = int(status[at + len(_LAST) : status.find(b"\r\n", at)])
    return records if last - len(records) + 1 == seq else None


def _creds(path: str) -> tuple[str, bytes]:
    """A creds file's user JWT and nkey seed (``NatsLink.creds_problem`` has already vouched for it)."""
    lines = Path(path).read_text().splitlines()
    after = [lines[i + 1].strip() for i in range(len(lines) - 1) if "BEGIN" in lines[i]]
    jwt = next(value for value in after if value.count(".") == 2)
    seed = next(value for value in after if value.startswith("SU"))
    return jwt, seed.encode()
