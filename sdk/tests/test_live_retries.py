"""Retries against a real server: a developer-tier key driven past its rate limit, a server restarted in
the middle of a call, and answers lost on the network (idempotency keys keep publishes single)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import httpx
import pytest
from sdk_support import LosingProxy, unique

import queuecore

pytestmark = pytest.mark.integration


def count_statuses(statuses: list[int]) -> httpx.Client:
    return httpx.Client(event_hooks={"response": [lambda response: statuses.append(response.status_code)]})


class TestRateLimit:
    def test_retries_honour_retry_after_past_the_admin_limit(self, server):
        """Developer tier: 10 admin requests per second. 15 quick list calls all succeed; the ones over the
        limit are answered 429 and retried after Retry-After."""
        statuses: list[int] = []
        key = server.keys["sdk-dev"]["development"]
        with queuecore.QueueCore(
            api_key=key, base_url=server.url, http_client=count_statuses(statuses)
        ) as client:
            started = time.monotonic()
            for _ in range(15):
                page = client.topics.list()
                assert isinstance(page.data, list)
            elapsed = time.monotonic() - started
        assert statuses.count(429) >= 1, statuses
        assert statuses.count(200) == 15
        assert elapsed >= 0.9  # at least one Retry-After wait (>= 1 s, less scheduling slack)

    def test_without_retries_the_429_surfaces(self, server):
        key = server.keys["sdk-dev"]["staging"]
        client = queuecore.QueueCore(api_key=key, base_url=server.url, max_retries=0)
        with client, pytest.raises(queuecore.RateLimitError) as info:
            for _ in range(15):
                client.topics.list()
        err = info.value
        assert err.code == "RATE_LIMIT_EXCEEDED"
        assert err.retry_after is not None and err.retry_after >= 1
        assert err.response.headers["RateLimit-Limit"] == "10"
        assert err.response.headers["RateLimit-Remaining"] == "0"

    async def test_async_concurrent_calls_past_the_limit(self, server):
        key = server.keys["sdk-dev"]["production"]
        async with queuecore.AsyncQueueCore(api_key=key, base_url=server.url) as client:
            pages = await asyncio.gather(*(client.topics.list() for _ in range(15)))
        assert len(pages) == 15


class TestServerRestart:
    def test_a_call_rides_over_a_restart(self, server, client, caplog):
        name = unique("restart")
        client.topics.create(name, partitions=1)
        client.publish(name, "before")

        server.stop()
        restarter = threading.Thread(target=lambda: (time.sleep(1.0), server.start()))
        restarter.start()
        caplog.set_level(logging.INFO, logger="queuecore")
        try:
            # Connection refused until the new process listens; 8 retries wait up to ~40 s in all.
            patient = client.with_options(max_retries=8)
            result = patient.publish(name, "during", partition=0)
            detail = patient.topics.describe(name)
        finally:
            restarter.join()
        retries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Retrying POST")]
        assert retries and all("connection error" in m for m in retries), retries
        assert result.offset == 1
        assert detail.partition_details[0].latest_offset == 2
        page = client.messages.read(name, 0)
        assert [m.data for m in page.data] == ["before", "during"]


class TestLostAnswers:
    def test_a_publish_whose_answer_was_lost_is_written_once(self, server, client, topic):
        proxy = LosingProxy(server.port, lose=1)
        try:
            with queuecore.QueueCore(api_key=server.key, base_url=proxy.url) as lossy:
                result = lossy.publish(topic, {"orderId": "ord_lost"}, partition=0)
        finally:
            proxy.close()
        assert proxy.lost == 1
        assert result.replayed is True  # the retry was answered from the idempotency record
        page = client.messages.read(topic, 0)
        assert [m.data for m in page.data] == [{"orderId": "ord_lost"}]
        assert page.data[0].id == result.id

    def test_a_batch_whose_answer_was_lost_is_written_once(self, server, client, topic):
        proxy = LosingProxy(server.port, lose=1)
        try:
            with queuecore.QueueCore(api_key=server.key, base_url=proxy.url) as lossy:
                results = lossy.publish_batch(
                    topic, [queuecore.BatchMessage(data=i, partition=1) for i in range(10)]
                )
        finally:
            proxy.close()
        assert results.count == 10
        assert all(m.replayed for m in results.messages)
        assert [m.data for m in client.messages.read(topic, 1).data] == list(range(10))

    async def test_async_publish_whose_answer_was_lost(self, server, client, topic):
        proxy = LosingProxy(server.port, lose=1)
        try:
            async with queuecore.AsyncQueueCore(api_key=server.key, base_url=proxy.url) as lossy:
                result = await lossy.publish(topic, "once", partition=2)
        finally:
            proxy.close()
        assert result.replayed is True
        assert [m.data for m in client.messages.read(topic, 2).data] == ["once"]

    def test_without_retries_the_loss_surfaces(self, server, topic):
        proxy = LosingProxy(server.port, lose=1)
        try:
            lossy = queuecore.QueueCore(api_key=server.key, base_url=proxy.url, max_retries=0)
            with lossy, pytest.raises(queuecore.APIConnectionError):
                lossy.publish(topic, "lost")
        finally:
            proxy.close()


class TestHealth:
    def test_health(self, client):
        health = client.health()
        assert isinstance(health, queuecore.Health)
        assert health.status == "ok" and health.ok
        assert set(health.checks) == {"database", "redis", "logEngine"}
        assert health.version

    async def test_async_health(self, async_client):
        assert (await async_client.health()).status == "ok"

    def test_a_bad_key(self, server):
        with queuecore.QueueCore(api_key="pq_test_sk_" + "x" * 32, base_url=server.url) as client:
            assert client.health().ok  # no key needed
            with pytest.raises(queuecore.AuthenticationError) as info:
                client.topics.list()
        assert info.value.code == "INVALID_API_KEY"
        assert info.value.status == 401
