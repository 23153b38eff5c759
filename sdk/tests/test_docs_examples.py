"""Every example of the customer docs, translated to Python names, on the sync and the async client."""

from __future__ import annotations

import threading
import time

import pytest

import queuecore
from queuecore import AsyncQueueCore, QueueCore

pytestmark = pytest.mark.integration

ORDERS = [
    {"type": "order.created", "orderId": "ord_a1b2c3", "amount": 4500},
    {"type": "order.created", "orderId": "ord_d4e5f6", "amount": 12000},
    {"type": "order.updated", "orderId": "ord_g7h8i9", "status": "shipped"},
]


def test_docs_sync(server):
    # Initialize the Client
    pq = QueueCore(api_key=server.keys["sdk-docs"]["development"], base_url=server.url)

    # Create a Topic
    topic = pq.topics.create(name="order.events", retention="30d", delivery="exactly-once", partitions=6)
    # { id: 'top_8xk2m9', name: 'order.events', partitions: 6, status: 'active' }
    assert topic.id.startswith("top_")
    assert (topic.name, topic.partitions, topic.status) == ("order.events", 6, "active")

    # List Topics
    pq.topics.create(name="user.signups")
    topics = list(pq.topics.list())
    # [{ name: 'order.events', ... }, { name: 'user.signups', ... }]
    assert [t.name for t in topics] == ["order.events", "user.signups"]

    # Publish a Message
    result = pq.publish(
        "order.events", {"type": "order.created", "orderId": "ord_92jf8x", "amount": 9900, "currency": "usd"}
    )
    # { offset: 14829, partition: 2, timestamp: '2026-03-28T10:42:18.003Z', latency: 12 }
    assert result.offset == 0
    assert 0 <= result.partition < 6
    assert result.to_wire()["timestamp"].endswith("Z") and len(result.to_wire()["timestamp"]) == 24
    assert isinstance(result.latency, int)

    # Batch Publishing
    results = pq.publish_batch("order.events", ORDERS)
    assert results.count == 3
    assert isinstance(results.latency, int)

    # Errors: the documented envelope, as an exception
    with pytest.raises(queuecore.NotFoundError) as info:
        pq.topics.describe("user.events")
    err = info.value
    assert (err.code, err.status) == ("TOPIC_NOT_FOUND", 404)
    assert err.message == "The topic 'user.events' does not exist in the current environment."
    assert err.request_id.startswith("req_")
    assert err.body["error"]["requestId"] == err.request_id

    with pytest.raises(queuecore.AuthenticationError) as info:
        QueueCore(api_key="pq_test_sk_" + "0" * 32, base_url=server.url).topics.list()
    assert (info.value.code, info.value.status) == ("INVALID_API_KEY", 401)

    # Health checks
    assert pq.health().status == "ok"

    # Configure a DLQ (as the group's config; test_docs_consumers configures it through consume())
    group = pq.consumer_groups.update(
        "order.events",
        "order-processing",
        dead_letter={"max_retries": 5, "retry_delay": "30s", "alert_threshold": 100},
    )
    assert group.config.dead_letter == queuecore.DeadLetter(
        max_retries=5,
        retry_delay="30s",
        alert_threshold=100,
        breaker=queuecore.Breaker(failure_rate=0.5, min_attempts=100, window="60s"),  # on by default
    )

    # List Consumer Groups
    groups = pq.consumer_groups.list("order.events")
    # [{ name: 'order-processing', consumers: 3, lag: 42 }, ...]
    assert [(g.name, g.consumers) for g in groups] == [("order-processing", 0)]

    # Describe a Group
    group = pq.consumer_groups.describe("order.events", "order-processing")
    # { name, topic, consumers, partitions: [{ id: 0, consumer: 'csr_a1', offset: 4821, lag: 12 }, ...] }
    assert (group.name, group.topic, len(group.partitions)) == ("order-processing", "order.events", 6)

    # Reset Group Offsets
    pq.consumer_groups.reset_offsets("order.events", "order-processing", to="earliest")

    # Get Current Offset
    offset = pq.offsets.get("order.events", group="order-processing", partition=0)
    # { current: 4821, latest: 4833, lag: 12 }
    assert offset.current == 0 and offset.lag == offset.latest

    # Seek to a Specific Offset
    pq.offsets.seek("order.events", group="order-processing", partition=0, offset=offset.latest)
    assert pq.offsets.get("order.events", group="order-processing", partition=0).lag == 0

    # Reset to Earliest or Latest
    pq.offsets.reset("order.events", group="order-processing", to="earliest")
    pq.offsets.reset("order.events", group="order-processing", to="latest")
    assert all(o.lag == 0 for o in pq.offsets.get("order.events", group="order-processing"))
    pq.close()


async def test_docs_async(server):
    async with AsyncQueueCore(api_key=server.keys["sdk-docs"]["staging"], base_url=server.url) as pq:
        topic = await pq.topics.create(
            name="order.events", retention="30d", delivery="exactly-once", partitions=6
        )
        assert (topic.name, topic.partitions, topic.status) == ("order.events", 6, "active")

        await pq.topics.create(name="user.signups")
        topics = [t async for t in pq.topics.list()]
        assert [t.name for t in topics] == ["order.events", "user.signups"]

        result = await pq.publish(
            "order.events",
            {"type": "order.created", "orderId": "ord_92jf8x", "amount": 9900, "currency": "usd"},
        )
        assert result.offset == 0 and 0 <= result.partition < 6

        results = await pq.publish_batch("order.events", ORDERS)
        assert results.count == 3 and isinstance(results.latency, int)

        with pytest.raises(queuecore.NotFoundError):
            await pq.topics.describe("user.events")
        assert (await pq.health()).status == "ok"

        await pq.consumer_groups.update(
            "order.events",
            "order-processing",
            dead_letter=queuecore.DeadLetter(max_retries=5, retry_delay="30s", alert_threshold=100),
        )
        groups = await pq.consumer_groups.list("order.events")
        assert [g.name for g in groups] == ["order-processing"]
        group = await pq.consumer_groups.describe("order.events", "order-processing")
        assert len(group.partitions) == 6
        await pq.consumer_groups.reset_offsets("order.events", "order-processing", to="earliest")
        offset = await pq.offsets.get("order.events", group="order-processing", partition=0)
        assert offset.current == 0 and offset.lag == offset.latest
        await pq.offsets.seek("order.events", group="order-processing", partition=0, offset=offset.latest)
        await pq.offsets.reset("order.events", group="order-processing", to="earliest")
        await pq.offsets.reset("order.events", group="order-processing", to="latest")
        assert all(o.lag == 0 for o in await pq.offsets.get("order.events", group="order-processing"))


def _run_until(consumer: queuecore.Consumer, done, timeout: float = 30) -> None:
    thread = threading.Thread(target=consumer.start)
    thread.start()
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)
    consumer.stop()
    thread.join(30)
    assert done()


def test_docs_consumers_and_dlq(server, capsys):
    pq = QueueCore(api_key=server.keys["sdk-docs"]["production"], base_url=server.url)
    pq.topics.create(name="order.events", retention="30d", delivery="exactly-once", partitions=6)

    # Create a Consumer
    consumer = pq.consume("order.events", group="order-processing", start_from="latest")
    processed: list[dict] = []

    async def process_order(data: dict) -> None:
        processed.append(data)

    async def on_message(msg: queuecore.ConsumedMessage) -> None:
        print(msg.data)  # { type: 'order.created', ... }
        print(msg.offset)  # 14829
        print(msg.topic)  # 'order.events'
        print(msg.partition)  # 2
        await process_order(msg.data)
        msg.ack()

    consumer.on("message", on_message)
    consumer.on("error", lambda err: print("Consumer error:", err))

    published: list[object] = []

    def published_after_join() -> bool:  # start_from="latest": publish once the consumer has joined
        if consumer.member_id is not None and not published:
            published.append(pq.publish_batch("order.events", ORDERS))
        return len(processed) == 3

    _run_until(consumer, published_after_join)
    assert sorted(o["orderId"] for o in processed) == sorted(o["orderId"] for o in ORDERS)
    assert "order.events" in capsys.readouterr().out
    assert all(o.lag == 0 for o in pq.offsets.get("order.events", group="order-processing"))

    # Configure a DLQ (here with no retries, so the failing message lands there at once)
    consumer = pq.consume(
        "order.events",
        group="order-processing",
        dead_letter={"max_retries": 0, "retry_delay": "30s", "alert_threshold": 100},
    )

    def failing(msg: queuecore.ConsumedMessage) -> None:
        raise RuntimeError("payment service unavailable")

    consumer.on("message", failing)
    consumer.on("error", lambda err: None)

    def dead_lettered() -> bool:
        if consumer.member_id is not None and not hasattr(consumer, "_published"):
            consumer._published = pq.publish(
                "order.events", {"type": "order.created", "orderId": "ord_x8k2n4"}
            )  # type: ignore[attr-defined]
        try:
            return pq.dlq.inspect("order.events", group="order-processing").total == 1
        except queuecore.NotFoundError:
            return False

    _run_until(consumer, dead_lettered)

    # Inspect the DLQ
    dead_messages = pq.dlq.inspect("order.events", group="order-processing", limit=10)
    # Returns messages with original data, error reason, retry count, and timestamp
    [dead] = dead_messages.data
    assert dead.data["orderId"] == "ord_x8k2n4" and dead.retry_count == 0
    assert dead.reason == "RuntimeError: payment service unavailable" and dead.failed_at

    # Replay a single message by ID
    pq.dlq.replay("order.events", "order-processing", message_id=dead.message_id)
    # Replay all messages in the DLQ
    assert pq.dlq.replay_all("order.events", "order-processing").replayed == 0
    pq.close()
