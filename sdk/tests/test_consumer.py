"""Consumers against a real server, over the three transports (WebSocket push, REST pull, Server-Sent
Events): order, acks,
redelivery, graceful stop, group sharing, restarts."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time

import pytest
from sdk_support import free_port, unique

import queuecore

pytestmark = pytest.mark.integration


@pytest.fixture(params=["websocket", "pull", "sse"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run_sync(consumer: queuecore.Consumer, until, timeout: float = 30.0) -> None:
    """Run ``consumer.start()`` in a thread until ``until()`` holds, then stop it and wait."""
    thread = threading.Thread(target=consumer.start)
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        while not until() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        consumer.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert until(), "the consumer did not get there in time"


def publish(client, topic, per_partition):
    for partition, count in enumerate(per_partition):
        if count:
            batch = [queuecore.BatchMessage(data={"n": i}, partition=partition) for i in range(count)]
            client.publish_batch(topic, batch)


class TestSync:
    def test_in_order_per_partition_and_acked(self, client, topic, transport):
        publish(client, topic, [5, 4, 3])
        group = unique("g")
        seen: list[tuple[int, int, int]] = []
        consumer = client.consume(topic, transport=transport, group=group, start_from="earliest")

        def handle(msg: queuecore.ConsumedMessage) -> None:
            seen.append((msg.partition, msg.offset, msg.attempt))
            msg.ack()

        consumer.on("message", handle)
        run_sync(consumer, lambda: len(seen) >= 12)
        for partition, count in enumerate([5, 4, 3]):
            assert [o for p, o, _ in seen if p == partition] == list(range(count)), repr(seen)
        assert all(attempt == 1 for *_, attempt in seen)
        # graceful stop: acks flushed, member gone
        described = client.consumer_groups.describe(topic, group)
        assert described.consumers == 0
        assert [p.offset for p in described.partitions] == [5, 4, 3]

        again: list[int] = []
        second = client.consume(topic, transport=transport, group=group, start_from="earliest")
        second.on("message", lambda m: again.append(m.offset))
        started = time.monotonic()
        run_sync(second, lambda: time.monotonic() - started > 1.5)
        assert again == []

    def test_a_raising_handler_leads_to_redelivery(self, client, topic, transport):
        publish(client, topic, [1, 0, 0])
        attempts: list[int] = []
        errors: list[BaseException] = []
        consumer = client.consume(topic, transport=transport, group=unique("g"), start_from="earliest")

        def handle(msg: queuecore.ConsumedMessage) -> None:
            attempts.append(msg.attempt)
            if msg.attempt == 1:
                raise RuntimeError("boom")
            msg.ack()

        consumer.on("message", handle).on("error", errors.append)
        run_sync(consumer, lambda: attempts[-2:] == [1, 2] or attempts == [1, 2])
        assert attempts[:2] == [1, 2]
        assert any(isinstance(e, RuntimeError) for e in errors)

    def test_dead_letter_is_set_before_joining(self, client, topic, transport):
        group = unique("g")
        consumer = client.consume(
            topic, transport=transport, group=group, dead_letter={"max_retries": 2, "retry_delay": "1s"}
        )
        joined: list[str] = []
        run_sync(consumer, lambda: joined or (consumer.member_id and joined.append(consumer.member_id)))
        config = client.consumer_groups.describe(topic, group).config
        assert config.dead_letter is not None and config.dead_letter.max_retries == 2

    def test_two_consumers_split_partitions(self, client, topic, transport):
        group = unique("g")
        publish(client, topic, [3, 3, 3])
        got: dict[str, set[int]] = {"a": set(), "b": set()}
        offsets: list[tuple[int, int]] = []
        lock = threading.Lock()

        def handler(name):
            def handle(msg):
                with lock:
                    got[name].add(msg.partition)
                    offsets.append((msg.partition, msg.offset))
                msg.ack()

            return handle

        a = client.consume(topic, transport=transport, group=group, start_from="earliest").on(
            "message", handler("a")
        )
        b = client.consume(topic, transport=transport, group=group, start_from="earliest").on(
            "message", handler("b")
        )
        ta, tb = threading.Thread(target=a.start), threading.Thread(target=b.start)
        ta.start()
        time.sleep(0.5)
        tb.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            described = client.consumer_groups.describe(topic, group)
            members = {p.consumer for p in described.partitions}
            if described.consumers == 2 and len(members) == 2 and None not in members:
                break
            time.sleep(0.1)
        assert len({p.consumer for p in client.consumer_groups.describe(topic, group).partitions}) == 2
        publish(client, topic, [3, 3, 3])
        deadline = time.monotonic() + 30
        while len(set(offsets)) < 18 and time.monotonic() < deadline:
            time.sleep(0.05)
        a.stop()
        b.stop()
        ta.join(30)
        tb.join(30)
        assert len(set(offsets)) == 18
        assert got["a"] and got["b"]
        assert client.consumer_groups.describe(topic, group).consumers == 0

    def test_stop_from_a_handler_starts_no_other_handler_and_releases_the_rest(
        self, client, topic, transport
    ):
        # Ten messages on one partition, all received at once; the handler acks the first and stops.
        publish(client, topic, [10, 0, 0])
        group = unique("g")
        handled: list[int] = []
        consumer = client.consume(topic, transport=transport, group=group, start_from="earliest")

        def handle(msg: queuecore.ConsumedMessage) -> None:
            handled.append(msg.offset)
            msg.ack()
            consumer.stop()

        consumer.on("message", handle)
        thread = threading.Thread(target=consumer.start)
        thread.start()
        thread.join(30)
        assert not thread.is_alive()
        assert handled == [0]  # no handler call started after stop()
        described = client.consumer_groups.describe(topic, group)
        assert described.consumers == 0 and described.partitions[0].offset == 1  # only that ack
        # Received but not handled: neither acked nor lost, the next member gets them.
        rest: list[int] = []
        second = client.consume(topic, transport=transport, group=group, start_from="earliest")

        def take(msg: queuecore.ConsumedMessage) -> None:
            rest.append(msg.offset)
            msg.ack()

        second.on("message", take)
        run_sync(second, lambda: len(rest) >= 9)
        assert sorted(set(rest)) == list(range(1, 10))

    def test_unknown_transport(self, client, topic):
        with pytest.raises(ValueError):
            client.consume(topic, group="g", transport="carrier-pigeon")  # type: ignore[arg-type]


class TestAsync:
    async def test_start_stop_and_async_handlers(self, client, async_client, topic, transport):
        publish(client, topic, [2, 2, 2])
        group = unique("g")
        consumer = async_client.consume(topic, transport=transport, group=group, start_from="earliest")
        seen: list[tuple[int, int]] = []

        async def handle(msg: queuecore.ConsumedMessage) -> None:
            seen.append((msg.partition, msg.offset))
            msg.ack()
            if len(seen) == 6:
                consumer.stop()

        consumer.on("message", handle)
        await asyncio.wait_for(consumer.start(), 30)
        assert sorted(seen) == [(p, o) for p in range(3) for o in range(2)]
        described = await async_client.consumer_groups.describe(topic, group)
        assert described.consumers == 0 and [p.offset for p in described.partitions] == [2, 2, 2]

    async def test_async_iteration(self, client, async_client, topic, transport):
        publish(client, topic, [3, 0, 0])
        consumer = async_client.consume(topic, transport=transport, group=unique("g"), start_from="earliest")
        offsets = []

        async def consume() -> None:
            async for msg in consumer:
                offsets.append(msg.offset)
                msg.ack()
                if len(offsets) == 3:
                    break

        await asyncio.wait_for(consume(), 30)
        assert offsets == [0, 1, 2]
        # leaving the loop closes the iterator: the consumer stops, flushes its acks and leaves
        current = 0
        for _ in range(100):
            current = (await async_client.offsets.get(topic, group=consumer.group, partition=0)).current
            if current == 3:
                break
            await asyncio.sleep(0.05)
        assert current == 3


class TestRestart:
    def test_survives_a_restart_without_redelivering_acked_messages(self, server, client, transport):
        topic = unique("eo")
        client.topics.create(topic, partitions=2, delivery="exactly-once")
        publish(client, topic, [5, 5])
        group = unique("g")
        seen: list[tuple[int, int]] = []
        errors: list[BaseException] = []
        consumer = client.consume(topic, transport=transport, group=group, start_from="earliest")

        def handle(msg):
            seen.append((msg.partition, msg.offset))
            msg.ack()

        consumer.on("message", handle).on("error", errors.append)
        thread = threading.Thread(target=consumer.start)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while len(seen) < 10 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(seen) == 10
            time.sleep(0.5)  # the acks go out
            server.stop()
            time.sleep(1.0)
            server.start()
            publish(client, topic, [5, 5])
            deadline = time.monotonic() + 60
            while len(seen) < 20 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)
        finally:
            consumer.stop()
            thread.join(60)
        assert not thread.is_alive()
        assert len(seen) == len(set(seen)) == 20, seen
        assert errors  # the outage was reported
        assert [p.offset for p in client.consumer_groups.describe(topic, group).partitions] == [10, 10]


class TestRefusals:
    def test_a_bad_key_ends_start_with_authentication_error(self, server, topic, transport):
        with queuecore.QueueCore(api_key="pq_live_sk_" + "x" * 32, base_url=server.url, max_retries=0) as bad:
            consumer = bad.consume(topic, transport=transport, group=unique("g"))
            errors: list[BaseException] = []
            consumer.on("error", errors.append)
            with pytest.raises(queuecore.AuthenticationError) as refused:
                consumer.start()
        assert refused.value.code == "INVALID_API_KEY" and refused.value.status == 401
        assert refused.value.request_id and refused.value.request_id.startswith("req_")

    async def test_a_missing_topic_is_not_found(self, async_client, transport):
        consumer = async_client.consume(unique("nope"), transport=transport, group=unique("g"))
        with pytest.raises(queuecore.NotFoundError) as refused:
            await asyncio.wait_for(consumer.start(), 30)
        assert refused.value.code == "TOPIC_NOT_FOUND"


CTRL_C_SCRIPT = """
import asyncio
import faulthandler
import signal
import sys

import queuecore


def dump(*_):  # what it waits on, if it does not stop (the test asks with SIGUSR1 before it kills it)
    faulthandler.dump_traceback(all_threads=True)
    loop = asyncio._get_running_loop()
    for task in asyncio.all_tasks(loop) if loop is not None else ():
        task.print_stack(file=sys.stderr)
    sys.stderr.flush()


signal.signal(signal.SIGUSR1, dump)
# As Python sets it when started from a terminal: a test run in the background of a non-interactive shell
# (a CI runner's, ``make test &``) ignores SIGINT, its children inherit that, and Python keeps it ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

client = queuecore.QueueCore()
consumer = client.consume(sys.argv[1], group=sys.argv[2], start_from="earliest")
consumer.on("message", lambda message: print("got", message.data["n"], flush=True))
consumer.start()
print("stopped cleanly", flush=True)
"""


class TestCtrlC:
    def test_a_blocking_start_stops_gracefully_on_sigint(self, client, topic, server):
        publish(client, topic, [1])
        group = unique("g")
        process = subprocess.Popen(
            [sys.executable, "-c", CTRL_C_SCRIPT, topic, group],
            env=server.client_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "got 0"
            process.send_signal(signal.SIGINT)
            try:
                out, err = process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGUSR1)
                time.sleep(1)
                process.kill()
                out, err = process.communicate()
                pytest.fail(f"still running 30 s after SIGINT; its output: {out!r}; where it waited:\n{err}")
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == 0, err
        assert "stopped cleanly" in out
        assert "Traceback" not in err and "KeyboardInterrupt" not in err
        assert client.consumer_groups.describe(topic, group).consumers == 0  # it left the group


class TestUnreachable:
    async def test_connection_errors_name_where_they_tried(self):
        port = free_port()
        client = queuecore.AsyncQueueCore(
            api_key="pq_test_sk_" + "0" * 32, base_url=f"http://127.0.0.1:{port}"
        )
        consumer = client.consume("nowhere", group="g")
        errors: list[str] = []

        async def on_error(error: Exception) -> None:
            errors.append(str(error))
            consumer.stop()

        consumer.on("error", on_error)
        await asyncio.wait_for(consumer.start(), 30)
        assert errors and f"127.0.0.1:{port}" in errors[0], errors
