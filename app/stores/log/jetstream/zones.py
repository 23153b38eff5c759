"""Which availability zone each NATS server is in, from the servers' tags (``server_tags: ["az:zone-a"]``).

JetStream's stream info names the servers holding a stream (``cluster.leader``, ``cluster.replicas[].name``)
but not their tags, and nothing under ``$JS.API`` says them. Every ``$SYS`` answer does, in its ``server``
block (``name``, ``tags``). The engine connects as an ordinary account, not the system account, so the
JetStream report (``$SYS.REQ.SERVER.PING.JSZ``) and the plain server ping answer it "no responders". A few
``$SYS`` requests are imported by the server into every account, though, and answer any client:
``$SYS.REQ.ACCOUNT.PING.STATZ`` (the asking account's statistics, from every server; with ``include_unused``
a server without a connection of the account answers too) is the smallest of them. One request, one answer
per server it reaches, each naming the server and its tags. Checked with nats-py against nats-server 2.15
(``make install``'s, 3 nodes tagged ``az:zone-a``/``-b``/``-c``, no system-account user): three answers.

How many servers answer is not said: answers are taken until every server asked about has answered, or the
wait (``wait_seconds``) is over. Where the request is refused (a user whose permissions leave out
``$SYS.>``), nothing answers and zones are None: describe still shows the servers.

Zones change only with a server's config, so answers are kept. The servers are asked again when a server
not known yet turns up, at most once per ``REFRESH_SECONDS`` (a server that is down answers nothing, and a
describe must not wait for it every time), and in any case once the answers are ``MAX_AGE_SECONDS`` old.
A server that did not answer keeps the zone it had (a zone that lost its servers still shows where the
stopped copies are).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import nats.errors
import orjson
from nats.aio.client import Client

from app.stores.log.protocol import EngineUnavailable

logger = logging.getLogger(__name__)

SUBJECT = "$SYS.REQ.ACCOUNT.PING.STATZ"
_BODY = orjson.dumps({"include_unused": True})
REFRESH_SECONDS = 10.0
MAX_AGE_SECONDS = 300.0
_NO_RESPONDERS = "503"


class Zones:
    """Server name -> zone, learnt from the servers' tags (see the module docstring). ``nc`` answers the
    engine's connection (``EngineUnavailable`` before it has one)."""

    def __init__(self, nc: Callable[[], Client], tag: str, wait_seconds: float) -> None:
        self._nc = nc
        self._prefix = tag + ":"
        self._wait = wait_seconds
        self._zones: dict[str, str | None] = {}
        self._asked_at = -math.inf  # time.monotonic() of the last request
        self._asking = asyncio.Lock()

    def known(self, server: str) -> str | None:
        """The zone of ``server`` as last heard (no request); None when not known or not tagged."""
        return self._zones.get(server)

    async def of(self, servers: Iterable[str]) -> dict[str, str | None]:
        """The zones of ``servers`` (None for one untagged or not heard from), asking the servers first
        when the answers kept do not cover them (or are old)."""
        wanted = set(servers)
        if self._stale(wanted):
            async with self._asking:  # concurrent describes share one request
                if self._stale(wanted):
                    await self._ask(wanted)
        return {server: self._zones.get(server) for server in wanted}

    def _stale(self, wanted: set[str]) -> bool:
        age = time.monotonic() - self._asked_at
        return age > MAX_AGE_SECONDS or (age > REFRESH_SECONDS and not wanted <= self._zones.keys())

    async def _ask(self, wanted: set[str]) -> None:
        try:
            nc = self._nc()
        except EngineUnavailable:
            return
        found: dict[str, str | None] = {}
        self._asked_at = time.monotonic()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait
        try:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            try:
                await nc.publish(SUBJECT, _BODY, reply=inbox)
                while not wanted <= found.keys() and (remaining := deadline - loop.time()) > 0:
                    try:
                        msg = await sub.next_msg(timeout=remaining)
                    except nats.errors.TimeoutError:
                        break
                    if msg.headers and msg.headers.get("Status") == _NO_RESPONDERS:
                        break  # nothing will answer (refused, or no such import)
                    server = _server(msg.data)
                    if server is not None:
                        found[str(server.get("name"))] = self._zone(server.get("tags") or [])
            finally:
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()
        except nats.errors.Error as exc:
            logger.debug("asking the NATS servers for their zones failed: %s", exc)
        self._zones.update(found)

    def _zone(self, tags: list[Any]) -> str | None:
        for tag in tags:
            if isinstance(tag, str) and tag.startswith(self._prefix):
                return tag[len(self._prefix) :] or None
        return None


def _server(data: bytes) -> dict[str, Any] | None:
    """The ``server`` block of a ``$SYS`` answer; None for anything else."""
    try:
        answer = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    server = answer.get("server") if isinstance(answer, dict) else None
    return server if isinstance(server, dict) and server.get("name") else None
