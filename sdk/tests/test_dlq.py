"""``client.dlq`` against a real server: dead-lettering by a consumer, inspect, replay, replay_all, delete,
audit; sync and async."""

from __future__ import annotations

import threading
import time

import pytest
from sdk_support import unique

import queuecore

pytestmark = pytest.mark.integration


def fill_dlq(
    client: queuecore.QueueCore, count: int, transport: str = "websocket"
) -> tuple[str, str, list[str]]:
    """A topic whose group ``count`` messages were nacked into the DLQ (maxRetries 0), by a consumer that
    refuses everything; the topic, the group and the message ids."""
    topic, group = unique("dlq"), unique("g")
    client.topics.create(topic, partitions=1)
    ids = [client.publish(topic, {"n": i}, key=f"k{i}").id for i in range(count)]
    consumer = client.consume(
        topic,
        group=group,
        start_from="earliest",
        transport=transport,  # type: ignore[arg-type]
        dead_letter=queuecore.DeadLetter(max_retries=0, retry_delay="0s", alert_threshold=1000),
    )

    def refuse(msg: queuecore.ConsumedMessage) -> None:
        raise ValueError(f"cannot handle {msg.data}")

    consumer.on("message", refuse).on("error", lambda error: None)
    thread = threading.Thread(target=consumer.start)
    thread.start()

    def depth() -> int:
        try:
            return client.dlq.inspect(topic, group=group).total
        except queuecore.NotFoundError:  # the consumer has not created the group yet
            return 0

    try:
        deadline = time.monotonic() + 30
        while depth() < count and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        consumer.stop()
        thread.join(30)
    return topic, group, ids


class TestSync:
    @pytest.mark.parametrize("transport", ["websocket", "pull"])
    def test_inspect_a_dead_letter_from_a_raising_handler(self, client, transport):
        topic, group, [message_id] = fill_dlq(client, 1, transport)
        page = client.dlq.inspect(topic, group=group, limit=10)
        assert page.total == 1 and page.next_cursor is None
        [entry] = page.data
        assert isinstance(entry, queuecore.DeadLetterMessage)
        assert (entry.message_id, entry.data, entry.key, entry.partition, entry.offset) == (
            message_id,
            {"n": 0},
            "k0",
            0,
            0,
        )
        assert entry.reason.startswith("ValueError: cannot handle") and entry.retry_count == 0
        assert entry.failed_at.tzinfo is not None

    def test_replay_delete_replay_all_and_audit(self, client):
        topic, group, ids = fill_dlq(client, 4)
        first = client.dlq.inspect(topic, group=group, limit=3)
        assert first.total == 4 and len(first.data) == 3 and first.next_cursor
        rest = client.dlq.inspect(topic, group=group, limit=3, cursor=first.next_cursor)
        assert [e.message_id for e in first.data + rest.data] == ids

        replayed = client.dlq.replay(topic, group, message_id=ids[0])
        assert replayed.message_id == ids[0] and replayed.replayed is True
        client.dlq.delete(topic, group, message_id=ids[1])
        with pytest.raises(queuecore.NotFoundError) as missing:
            client.dlq.delete(topic, group, message_id=ids[1])
        assert missing.value.code == "MESSAGE_NOT_FOUND"
        assert client.dlq.replay_all(topic, group, rate=100).replayed == 2
        assert client.dlq.inspect(topic, group=group).total == 0

        audit = client.dlq.audit(topic, group)
        assert [(e.action, e.message_id, e.count) for e in audit.data] == [
            ("replay_all", None, 2),
            ("delete", ids[1], None),
            ("replay", ids[0], None),
        ]
        assert all(e.actor.type == "key" and e.actor.id.startswith("key_") for e in audit.data)

        # The replayed messages come back to the group, under their ids, attempt 1.
        seen: dict[str, int] = {}
        consumer = client.consume(topic, group=group)
        consumer.on("message", lambda m: (seen.__setitem__(m.id, m.attempt), m.ack()))
        thread = threading.Thread(target=consumer.start)
        thread.start()
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        consumer.stop()
        thread.join(30)
        assert seen == {ids[0]: 1, ids[2]: 1, ids[3]: 1}

    def test_an_unknown_group_is_not_found(self, client, topic):
        with pytest.raises(queuecore.NotFoundError) as missing:
            client.dlq.inspect(topic, group=unique("nobody"))
        assert missing.value.code == "GROUP_NOT_FOUND"


class TestAsync:
    async def test_the_async_resource(self, client, async_client):
        topic, group, [message_id] = fill_dlq(client, 1)
        page = await async_client.dlq.inspect(topic, group=group)
        assert [e.message_id for e in page.data] == [message_id]
        assert (await async_client.dlq.replay(topic, group, message_id=message_id)).replayed
        assert (await async_client.dlq.replay_all(topic, group)).replayed == 0
        assert [e.action for e in (await async_client.dlq.audit(topic, group)).data] == [
            "replay_all",
            "replay",
        ]


class TestNackToTheDlqAndHistory:
    @pytest.mark.parametrize("transport", ["websocket", "pull"])
    def test_nack_dead_letter_moves_at_once_with_its_history(self, client, transport):
        topic, group = unique("dlq"), unique("g")
        client.topics.create(topic, partitions=1)
        [message_id] = [client.publish(topic, {"n": 0}).id]
        consumer = client.consume(
            topic,
            group=group,
            start_from="earliest",
            transport=transport,  # type: ignore[arg-type]
            dead_letter=queuecore.DeadLetter(max_retries=5, retry_delay="0s"),
        )
        seen: list[int] = []

        def handle(msg: queuecore.ConsumedMessage) -> None:
            seen.append(msg.attempt)
            if msg.attempt == 1:
                msg.nack("flaky")  # a retry
            else:
                msg.nack("poison", dead_letter=True)  # 4 retries left, but it goes now

        consumer.on("message", handle)
        thread = threading.Thread(target=consumer.start)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if client.dlq.inspect(topic, group=group).total:
                        break
                except queuecore.NotFoundError:
                    pass
                time.sleep(0.1)
        finally:
            consumer.stop()
            thread.join(30)
        [entry] = client.dlq.inspect(topic, group=group).data
        assert (entry.message_id, entry.reason, entry.retry_count) == (message_id, "poison", 1)
        assert [a.reason for a in entry.attempts] == ["flaky", "poison"]
        assert isinstance(entry.attempts[0], queuecore.FailedAttempt)
        assert entry.first_failed_at == entry.attempts[0].at and entry.attempts[-1].at == entry.failed_at
        assert seen == [1, 2]
