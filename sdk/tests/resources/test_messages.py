"""Publishing and reading against a real server, sync and async."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest
from sdk_support import unique

import queuecore
from queuecore import BatchMessage

pytestmark = pytest.mark.integration


class TestPublish:
    def test_result(self, client, topic):
        result = client.publish(topic, {"type": "order.created", "orderId": "ord_92jf8x", "amount": 9900})
        assert isinstance(result, queuecore.PublishResult)
        assert result.id.startswith("msg_")
        assert result.offset == 0
        assert 0 <= result.partition < 3
        assert result.timestamp.tzinfo is not None
        assert result.latency >= 0
        assert result.durability == "fsync" or result.durability.startswith("replicated:")
        assert result.replayed is False

    def test_what_was_published_reads_back(self, client, topic):
        result = client.publish(topic, {"a": [1, "é", None]}, key="ord_1", headers={"source": "test"})
        message = client.messages.get(topic, result.id)
        assert isinstance(message, queuecore.Message)
        assert (message.id, message.topic, message.partition, message.offset) == (
            result.id,
            topic,
            result.partition,
            result.offset,
        )
        assert (message.key, message.headers, message.data) == (
            "ord_1",
            {"source": "test"},
            {"a": [1, "é", None]},
        )
        assert message.timestamp == result.timestamp

    def test_null_data_and_defaults(self, client, topic):
        result = client.publish(topic, None)
        message = client.messages.get(topic, result.id)
        assert (message.data, message.key, message.headers) == (None, None, {})

    def test_one_key_one_partition(self, client, topic):
        partitions = {client.publish(topic, i, key="customer-42").partition for i in range(5)}
        assert len(partitions) == 1

    def test_explicit_partition(self, client, topic):
        assert client.publish(topic, 1, partition=2).partition == 2

    def test_same_idempotency_key_answers_the_original(self, client, topic):
        first = client.publish(topic, {"n": 1}, idempotency_key="order-1")
        again = client.publish(topic, {"n": "different body"}, idempotency_key="order-1")
        assert again.replayed is True
        assert (again.id, again.offset, again.partition) == (first.id, first.offset, first.partition)
        assert sum(p.messages for p in client.topics.describe(topic).partition_details) == 1

    def test_missing_topic(self, client):
        with pytest.raises(queuecore.NotFoundError) as info:
            client.publish(unique("missing"), 1)
        assert info.value.code == "TOPIC_NOT_FOUND"

    def test_too_large_is_not_retried(self, server, topic):
        sent: list[httpx.Request] = []
        http = httpx.Client(event_hooks={"request": [sent.append]})
        client = queuecore.QueueCore(api_key=server.key, base_url=server.url, http_client=http)
        with client, pytest.raises(queuecore.PayloadTooLargeError) as info:
            client.publish(topic, "x" * (300 * 1024))
        http.close()
        assert info.value.code == "PAYLOAD_TOO_LARGE"
        assert len(sent) == 1

    def test_out_of_range_partition(self, client, topic):
        with pytest.raises(queuecore.BadRequestError):
            client.publish(topic, 1, partition=99)


class TestPublishBatch:
    def test_plain_values_are_data(self, client, topic):
        results = client.publish_batch(
            topic,
            [
                {"type": "order.created", "orderId": "ord_a1b2c3", "amount": 4500},
                {"type": "order.created", "orderId": "ord_d4e5f6", "amount": 12000},
                {"type": "order.updated", "orderId": "ord_g7h8i9", "status": "shipped"},
            ],
        )
        assert isinstance(results, queuecore.BatchResult)
        assert results.count == 3 and len(results.messages) == 3
        assert results.latency >= 0 and results.durability
        first = client.messages.get(topic, results.messages[0].id)
        assert first.data == {"type": "order.created", "orderId": "ord_a1b2c3", "amount": 4500}

    def test_batch_messages_carry_options(self, client, topic):
        results = client.publish_batch(
            topic,
            [
                BatchMessage(data=1, key="k", headers={"h": "v"}),
                BatchMessage(data=2, partition=2),
                "three",
            ],
        )
        one = client.messages.get(topic, results.messages[0].id)
        assert (one.data, one.key, one.headers) == (1, "k", {"h": "v"})
        assert results.messages[1].partition == 2

    def test_order_is_kept_within_a_partition(self, client, topic):
        results = client.publish_batch(topic, [BatchMessage(data=i, partition=0) for i in range(50)])
        assert [m.offset for m in results.messages] == list(range(50))
        page = client.messages.read(topic, 0, from_offset=0, limit=1000)
        assert [m.data for m in page.data] == list(range(50))

    def test_replayed_items(self, client, topic):
        client.publish_batch(topic, [BatchMessage(data="a", idempotency_key="batch-a")])
        results = client.publish_batch(
            topic, [BatchMessage(data="a", idempotency_key="batch-a"), BatchMessage(data="b")]
        )
        assert [m.replayed for m in results.messages] == [True, None]
        assert sum(p.messages for p in client.topics.describe(topic).partition_details) == 2

    def test_limits(self, client, topic):
        with pytest.raises(queuecore.BadRequestError):
            client.publish_batch(topic, [])
        with pytest.raises(queuecore.BadRequestError):
            client.publish_batch(topic, list(range(1001)))
        with pytest.raises(queuecore.PayloadTooLargeError):
            client.publish_batch(topic, ["small", "x" * (300 * 1024)])
        assert sum(p.messages for p in client.topics.describe(topic).partition_details) == 0

    def test_a_thousand(self, client, topic):
        assert client.publish_batch(topic, range(1000)).count == 1000


class TestRead:
    def test_by_offset(self, client, topic):
        for i in range(5):
            client.publish(topic, {"n": i}, partition=1)
        page = client.messages.read(topic, 1, from_offset=0)
        assert isinstance(page, queuecore.MessagePage)
        assert [m.data["n"] for m in page.data] == [0, 1, 2, 3, 4]
        assert [m.offset for m in page.data] == [0, 1, 2, 3, 4]
        assert (page.next_offset, page.earliest_offset) == (5, 0)
        assert all(m.topic == topic and m.partition == 1 for m in page.data)

        page = client.messages.read(topic, 1, from_offset=1, limit=2)
        assert [m.offset for m in page.data] == [1, 2]
        assert page.next_offset == 3
        assert client.messages.read(topic, 1, from_offset=5).data == []

    def test_by_timestamp(self, client, topic):
        before = datetime.now(timezone.utc) - timedelta(seconds=5)
        client.publish(topic, "a", partition=0)
        assert len(client.messages.read(topic, 0, from_timestamp=before).data) == 1
        assert len(client.messages.read(topic, 0, from_timestamp=int(before.timestamp() * 1000)).data) == 1
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        assert client.messages.read(topic, 0, from_timestamp=later).data == []

    def test_an_empty_partition(self, client, topic):
        page = client.messages.read(topic, 2)
        assert page.data == [] and page.next_offset == 0

    def test_bad_partition_and_topic(self, client, topic):
        with pytest.raises(queuecore.BadRequestError):
            client.messages.read(topic, 99)
        with pytest.raises(queuecore.NotFoundError):
            client.messages.read(unique("missing"), 0)


class TestGet:
    def test_malformed_id(self, client, topic):
        with pytest.raises(queuecore.BadRequestError) as info:
            client.messages.get(topic, "not-an-id")
        assert info.value.code == "INVALID_REQUEST"

    def test_an_id_of_a_deleted_topic(self, client, topic):
        result = client.publish(topic, 1)
        client.topics.delete(topic)
        client.topics.create(topic)
        with pytest.raises(queuecore.APIStatusError) as info:
            client.messages.get(topic, result.id)
        assert info.value.status in (400, 404)


class TestAsync:
    async def test_publish_get_read(self, async_client):
        name = unique("amsg")
        await async_client.topics.create(name, partitions=2)
        result = await async_client.publish(name, {"a": 1}, key="k", headers={"h": "v"}, partition=1)
        assert result.partition == 1 and result.offset == 0
        again = await async_client.publish(name, {"a": 1}, partition=1, idempotency_key="a-1")
        replay = await async_client.messages.publish(name, {"a": 2}, partition=1, idempotency_key="a-1")
        assert replay.replayed and replay.id == again.id
        batch = await async_client.publish_batch(name, [BatchMessage(data=i, partition=1) for i in range(3)])
        assert [m.offset for m in batch.messages] == [2, 3, 4]
        message = await async_client.messages.get(name, result.id)
        assert (message.data, message.key, message.headers) == ({"a": 1}, "k", {"h": "v"})
        page = await async_client.messages.read(name, 1, from_offset=0, limit=10)
        assert [m.offset for m in page.data] == [0, 1, 2, 3, 4]
        assert page.next_offset == 5

    async def test_errors(self, async_client):
        with pytest.raises(queuecore.NotFoundError):
            await async_client.publish(unique("missing"), 1)
