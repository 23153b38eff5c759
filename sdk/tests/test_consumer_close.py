"""A graceful stop confirms the acks of every handled message, also when a periodic flush carrying some of
them is still on its way at that moment (pull and SSE consumers settle over REST in the background)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sdk_support import unique

import queuecore

pytestmark = pytest.mark.integration


class SlowFirstAck(httpx.AsyncBaseTransport):
    """The real transport to the real server, except that the first ack request waits before it goes."""

    def __init__(self, delay: float) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._delay = delay
        self.held = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/ack") and not self.held.is_set():
            self.held.set()
            await asyncio.sleep(self._delay)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.mark.parametrize("transport", ["pull", "sse"])
async def test_stop_confirms_acks_whose_flush_was_in_flight(server, client, transport):
    topic = unique("close")
    client.topics.create(topic, partitions=1)
    client.publish(topic, {"n": 1})
    slow = SlowFirstAck(delay=1.0)
    async with (
        httpx.AsyncClient(transport=slow) as http,
        queuecore.AsyncQueueCore(api_key=server.key, base_url=server.url, http_client=http) as c,
    ):
        consumer = c.consume(topic, transport=transport, group="g", start_from="earliest")
        consumer.on("message", lambda msg: msg.ack())
        running = asyncio.ensure_future(consumer.start())
        await asyncio.wait_for(slow.held.wait(), 30)
        consumer.stop()  # while the ack is on its way
        await asyncio.wait_for(running, 30)
    described = client.consumer_groups.describe(topic, "g")
    assert [p.offset for p in described.partitions] == [1], "the ack in flight at the stop was lost"
