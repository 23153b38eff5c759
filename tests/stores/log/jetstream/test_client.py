"""The engine's NATS link when it drops (``app.stores.log.jetstream.client``), on a lone real server behind a
TCP link the test cuts and restores:

* a publish nats-py queued but had not written when the link dropped is forgotten
  (``drop_unsent_publishes``), not written on reconnecting, however late;
* a request made while the link is down (nothing buffered: ``pending_size=0``) is sent once the link is
  back, within its timeout, and stored once; past its timeout it fails unsent, and nothing of it is
  stored later.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client

from app.stores.log.jetstream.client import JetStreamClient, drop_unsent_publishes
from tests.system.faults.latency_proxy import LatencyProxy

GUARD = 30.0  # how long a wait may take before the test fails instead of hanging


class Link:
    """A TCP link to the lone server that the test cuts (every connection ends, none is accepted) and
    restores on the same port."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("nats://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.proxy = LatencyProxy(self.host, self.port)
        self.listen = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.listen}"

    async def start(self) -> None:
        await self.proxy.start()
        self.listen = self.proxy.port

    async def cut(self) -> None:
        await self.proxy.close()

    async def restore(self) -> None:
        self.proxy = LatencyProxy(self.host, self.port, listen_port=self.listen)
        await self.proxy.start()


@pytest.fixture
async def link(lone_nats: str) -> AsyncIterator[Link]:
    link = Link(lone_nats)
    await link.start()
    try:
        yield link
    finally:
        await link.proxy.close()


@pytest.fixture
async def asked(lone_nats: str) -> AsyncIterator[list[bytes]]:
    """What a responder on ``qc.test.ask`` was asked, in order (it answers "ok")."""
    responder = await nats.connect(lone_nats)
    asked: list[bytes] = []

    async def answer(msg) -> None:
        asked.append(msg.data)
        await msg.respond(b"ok")

    await responder.subscribe("qc.test.ask", cb=answer)
    await responder.flush()
    try:
        yield asked
    finally:
        await responder.close()


async def until(condition, what: str) -> None:
    async with asyncio.timeout(GUARD):
        while not condition():
            await asyncio.sleep(0.01)


async def connect(url: str, **options) -> Client:
    return await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.1, **options)


async def test_publishes_queued_when_the_link_dropped_are_dropped_not_sent_later(lone_nats, link) -> None:
    listener = await nats.connect(lone_nats)
    heard: list[bytes] = []

    async def hear(msg) -> None:
        heard.append(msg.data)

    await listener.subscribe("qc.test.link", cb=hear)
    await listener.flush()
    # nats-py's default: what is published while reconnecting is queued, to be written on reconnecting.
    cut_off = await connect(link.url)
    try:
        await link.cut()
        await until(lambda: cut_off.is_reconnecting, "the client sees the cut")
        await cut_off.publish("qc.test.link", b"stale")
        assert drop_unsent_publishes(cut_off) == 1
        await link.restore()
        await until(lambda: cut_off.is_connected, "the client is back")
        await cut_off.publish("qc.test.link", b"fresh")
        await cut_off.flush()
        await listener.flush()
        await until(lambda: heard, "the fresh publish is heard")
        assert heard == [b"fresh"]
    finally:
        await cut_off.close()
        await listener.close()


async def test_a_request_made_while_the_link_is_down_is_sent_once_it_is_back(link, asked) -> None:
    cut_off = await connect(link.url, pending_size=0)
    client = JetStreamClient(cut_off, timeout=5.0)
    try:
        await link.cut()
        await until(lambda: cut_off.is_reconnecting, "the client sees the cut")
        asking = asyncio.ensure_future(client._sent(lambda: cut_off.request("qc.test.ask", b"q", timeout=5)))
        await asyncio.sleep(0.3)
        assert not asking.done() and asked == []  # waiting for the link, nothing sent
        await link.restore()
        reply = await asyncio.wait_for(asking, GUARD)
        assert reply.data == b"ok" and asked == [b"q"]
    finally:
        await cut_off.close()


async def test_a_request_the_link_stays_down_for_fails_unsent(link, asked) -> None:
    cut_off = await connect(link.url, pending_size=0)
    client = JetStreamClient(cut_off, timeout=0.5)
    try:
        await link.cut()
        await until(lambda: cut_off.is_reconnecting, "the client sees the cut")
        with pytest.raises(nats.errors.OutboundBufferLimitError):
            await client._sent(lambda: cut_off.request("qc.test.ask", b"late", timeout=0.5))
        await link.restore()
        await until(lambda: cut_off.is_connected, "the client is back")
        await cut_off.request("qc.test.ask", b"now", timeout=5)
        assert asked == [b"now"]  # the refused one never went out
    finally:
        await cut_off.close()
