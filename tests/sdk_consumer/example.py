"""A customer's typed project using the queuecore wheel as the SDK's README does: type-checked (never run)
by ``mypy --strict`` and ``pyright`` in strict mode against the installed wheel
(``tests/test_outside_checkers.py``), so a hole in the SDK's types (a missing ``py.typed``, an untyped or
partly unknown public call) fails the build where a customer's checker would trip on it."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from queuecore import (
    AsyncQueueCore,
    BatchMessage,
    ConsumedMessage,
    DeadLetter,
    MessagePage,
    PublishResult,
    QueueCore,
    QueueCoreError,
    Topic,
    TopicDetail,
)


def topics(client: QueueCore) -> list[str]:
    topic: Topic = client.topics.create(
        "order.events", retention="30d", delivery="exactly-once", partitions=6
    )
    detail: TopicDetail = client.topics.describe(topic.name)
    sizes: list[int] = [partition.messages for partition in detail.partition_details]
    client.topics.update("order.events", partitions=8)
    client.topics.delete("scratch.events")
    print(sum(sizes))
    return [each.name for each in client.topics.list()]


def publish(client: QueueCore) -> int:
    result: PublishResult = client.publish(
        "order.events",
        {"type": "order.created", "orderId": "ord_92jf8x"},
        key="ord_92jf8x",
        headers={"a": "b"},
    )
    again = client.publish("order.events", {"orderId": "ord_p7q8r9"}, idempotency_key="order-ord_p7q8r9")
    batch = client.publish_batch(
        "order.events",
        [BatchMessage(data={"orderId": "ord_j1k2l3"}, key="ord_j1k2l3"), {"orderId": "ord_m4n5o6"}],
    )
    positions: list[tuple[int, int]] = [(m.partition, m.offset) for m in batch.messages]
    print(result.id, result.durability, again.replayed, positions)
    return result.offset


def read(client: QueueCore) -> int | None:
    page: MessagePage = client.messages.read("order.events", 0, from_offset=0, limit=100)
    for message in page.data:
        print(message.offset, message.key, message.headers, message.data)
    recent = client.messages.read(
        "order.events",
        0,
        from_timestamp=datetime.now(timezone.utc) - timedelta(hours=1),  # noqa: UP017 (Python 3.9)
    )
    print(len(recent.data))
    return page.next_offset


def groups_and_offsets(client: QueueCore) -> None:
    group = client.consumer_groups.update(
        "order.events",
        "order-processing",
        ack_timeout="30s",
        dead_letter=DeadLetter(max_retries=5, retry_delay="30s"),
    )
    print(group.config.ack_timeout)
    for summary in client.consumer_groups.list("order.events"):
        print(summary.name, summary.consumers, summary.lag)
    offset = client.offsets.get("order.events", group="order-processing", partition=0)
    print(offset.current, offset.latest, offset.lag)
    client.offsets.seek("order.events", group="order-processing", partition=0, offset=0)
    client.offsets.reset("order.events", group="order-processing", to="earliest")
    dead = client.dlq.inspect("order.events", group="order-processing", limit=10)
    for entry in dead.data:
        print(entry.message_id, entry.reason, entry.retry_count, entry.failed_at)


def consume(client: QueueCore) -> None:
    consumer = client.consume("order.events", group="typed-consumer", start_from="earliest")

    def handle(message: ConsumedMessage) -> None:
        print(message.partition, message.offset, message.attempt, message.data)
        message.ack()
        consumer.stop()

    consumer.on("message", handle)
    consumer.start()


async def consume_async() -> None:
    async with AsyncQueueCore() as client:
        result = await client.publish("order.events", {"type": "order.created"})
        print(result.offset)
        async for topic in client.topics.list():
            print(topic.name)
        consumer = client.consume("order.events", group="typed-async", start_from="earliest")
        async for message in consumer:
            print(message.offset, message.data)
            message.ack()
            break


def main() -> None:
    client = QueueCore(api_key="pq_test_sk_example", base_url="http://127.0.0.1:8080")
    try:
        topics(client)
        publish(client)
        read(client)
        groups_and_offsets(client)
        consume(client)
    except QueueCoreError as error:
        print("QueueCore refused:", error)
    asyncio.run(consume_async())
