"""Delayed delivery and TTL from the SDK, against a real server: publish options (one message and batches,
sync and async), the typed ``deliver_at`` / ``expires_at`` fields of answers, reads and deliveries, the
group's ``expired`` count, and the CLI's ``publish --delay --ttl``."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from sdk_support import unique
from test_cli import run
from test_consumer import run_sync

import queuecore
from queuecore import BatchMessage

pytestmark = pytest.mark.integration


class TestPublishOptions:
    def test_delay_and_ttl_come_back_as_datetimes(self, client, topic):
        before = datetime.now(timezone.utc)
        result = client.publish(topic, {"n": 1}, delay="1h", ttl=timedelta(hours=2))
        assert result.deliver_at is not None and result.expires_at is not None
        assert before + timedelta(hours=1) - timedelta(seconds=1) <= result.deliver_at
        assert result.deliver_at <= datetime.now(timezone.utc) + timedelta(hours=1)
        assert result.expires_at - result.deliver_at == timedelta(hours=1)
        message = client.messages.get(topic, result.id)
        assert (message.deliver_at, message.expires_at) == (result.deliver_at, result.expires_at)
        plain = client.publish(topic, 2)
        assert plain.deliver_at is None and plain.expires_at is None

    def test_batch_items_take_deliver_at_and_expires_at(self, client, topic):
        at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=10)
        result = client.publish_batch(
            topic,
            [
                BatchMessage(data=1, deliver_at=at, expires_at=at + timedelta(minutes=5)),
                BatchMessage(data=2, delay=90),
                3,
            ],
        )
        first, second, third = result.messages
        assert first.deliver_at == at and first.expires_at == at + timedelta(minutes=5)
        assert second.deliver_at is not None and second.expires_at is None
        assert third.deliver_at is None

    def test_both_delay_and_deliver_at_is_a_bad_request_naming_the_field(self, client, topic):
        with pytest.raises(queuecore.BadRequestError) as info:
            client.publish(topic, 1, delay="1m", deliver_at=int(time.time() * 1000) + 60_000)
        assert info.value.code == "INVALID_REQUEST"
        assert "deliverAt" in str(info.value)

    async def test_async_publish(self, async_client, topic):
        result = await async_client.publish(topic, 1, deliver_at="2020-01-01T00:00:00Z", ttl="1m")
        assert result.deliver_at is None and result.expires_at is not None


class TestDelivery:
    @pytest.mark.parametrize("transport", ["websocket", "pull"])
    def test_delivered_when_due_with_typed_fields(self, client, topic, transport):
        group = unique("g")
        published = client.publish(topic, {"n": 1}, delay="1s", partition=0)
        seen: list[queuecore.ConsumedMessage] = []
        consumer = client.consume(topic, transport=transport, group=group, start_from="earliest")

        def handle(msg: queuecore.ConsumedMessage) -> None:
            seen.append(msg)
            msg.ack()

        consumer.on("message", handle)
        run_sync(consumer, lambda: len(seen) >= 1)
        assert seen[0].id == published.id and seen[0].deliver_at == published.deliver_at
        assert seen[0].deliver_at is not None and datetime.now(timezone.utc) >= seen[0].deliver_at
        assert seen[0].expires_at is None
        assert client.consumer_groups.describe(topic, group).expired == 0


class TestCli:
    def test_publish_with_delay_and_ttl(self, server, client, topic):
        env = server.client_env(server.key)
        result = run(env, "publish", topic, '{"a": 1}', "--delay", "15m", "--ttl", "1h")
        assert result.returncode == 0, result.stderr
        answer = json.loads(result.stdout)
        deliver_at = datetime.fromisoformat(answer["deliverAt"])
        expires_at = datetime.fromisoformat(answer["expiresAt"])
        assert expires_at - deliver_at == timedelta(minutes=45)
        lines = run(env, "publish", topic, "-", "--delay", "30", stdin="1\n2\n")
        assert lines.returncode == 0, lines.stderr
        items = [json.loads(line) for line in lines.stdout.splitlines()]
        assert len(items) == 2 and all(item["deliverAt"] for item in items)

    def test_a_refused_delay_names_the_field(self, server, topic):
        env = server.client_env(server.key)
        result = run(env, "publish", topic, "1", "--delay", "45d")
        assert result.returncode != 0 and "delay" in result.stderr
