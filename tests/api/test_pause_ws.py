"""Pause, nack to the DLQ and "a clean leave costs no retry" for WebSocket members and the Python SDK,
against real ``queuecore-server`` processes (embedded SQLite, and the scale-out shape on JetStream).

The quiet periods are correctness bounds (nothing may arrive while paused), not speed claims."""

from __future__ import annotations

import asyncio
import json

from queuecore import AsyncQueueCore

from tests.api.ws_client import Api, Consumer, unique_name


def dead_letter_topic(api: Api, **dead_letter: object) -> str:
    topic = unique_name("pause")
    api.ok("POST", "/v1/topics", {"name": topic, "partitions": 1, "delivery": "at-least-once"})
    api.ok("PUT", f"/v1/topics/{topic}/groups/g", {"deadLetter": {"retryDelay": "0s", **dead_letter}})
    return topic


async def nack(c: Consumer, message_id: str, **extra: object) -> dict:
    await c.ws.send(json.dumps({"type": "nack", "id": message_id, **extra}))
    frame = await c.until("acked")
    return frame


class TestPausedWebSocket:
    async def test_no_message_while_paused_and_delivery_again_on_resume(self, api: Api) -> None:
        topic = api.topic(partitions=2)
        c = await Consumer.open(api, topic)
        api.publish(topic, 2)
        assert len(await c.messages(2)) == 2
        assert api.ok("POST", f"/v1/topics/{topic}/groups/g/pause", {}) == {"paused": True, "until": None}
        await asyncio.sleep(1.0)  # the member's beat sees the pause within a second
        ids = api.publish(topic, 5, start=2)
        assert await c.quiet(1.5) == []
        assert api.ok("GET", f"/v1/topics/{topic}/groups/g")["pausedReason"] == "user"
        assert api.ok("POST", f"/v1/topics/{topic}/groups/g/resume") == {"paused": False}
        got = await c.messages(5)
        assert sorted(m["id"] for m in got) == sorted(ids)
        await c.close()

    async def test_a_member_joining_a_paused_group_receives_nothing(self, api: Api) -> None:
        topic = api.topic()
        api.ok("PUT", f"/v1/topics/{topic}/groups/g", {})
        api.ok("POST", f"/v1/topics/{topic}/groups/g/pause", {})
        ids = api.publish(topic, 2)
        c = await Consumer.open(api, topic)
        assert await c.quiet(1.5) == []
        api.ok("POST", f"/v1/topics/{topic}/groups/g/resume")
        assert sorted(m["id"] for m in await c.messages(2)) == sorted(ids)
        await c.close()

    async def test_acks_work_while_paused(self, api: Api) -> None:
        topic = api.topic()
        c = await Consumer.open(api, topic)
        ids = api.publish(topic, 3)
        got = await c.messages(3)
        api.ok("POST", f"/v1/topics/{topic}/groups/g/pause", {})
        acked = await c.ack([m["id"] for m in got])
        assert sorted(acked["ids"]) == sorted(ids) and acked["failed"] == []
        await c.close()


class TestNackDeadLetterFrame:
    async def test_moves_the_message_at_once(self, api: Api) -> None:
        topic = dead_letter_topic(api, maxRetries=5)
        c = await Consumer.open(api, topic)
        [message_id] = api.publish(topic, 1)
        await c.messages(1)
        answer = await nack(c, message_id, reason="poison", deadLetter=True)
        assert answer["ids"] == [message_id] and answer["failed"] == []
        assert await c.quiet(0.7) == []
        [entry] = api.ok("GET", f"/v1/topics/{topic}/groups/g/dlq")["data"]
        assert (entry["reason"], entry["retryCount"]) == ("poison", 0)
        assert [a["reason"] for a in entry["attempts"]] == ["poison"]
        await c.close()

    async def test_without_a_dlq_it_is_an_error_frame(self, api: Api) -> None:
        topic = api.topic()
        c = await Consumer.open(api, topic)
        [message_id] = api.publish(topic, 1)
        await c.messages(1)
        await c.ws.send(json.dumps({"type": "nack", "id": message_id, "deadLetter": True}))
        error = await c.until("error")
        assert error["error"]["code"] == "INVALID_REQUEST"
        assert error["error"]["details"][0]["field"] == "deadLetter"
        assert (await c.ack([message_id]))["ids"] == [message_id]  # still held
        await c.close()


class TestCleanLeave:
    async def test_a_closed_websocket_gives_messages_back_with_the_same_attempt(self, api: Api) -> None:
        """The repro: maxRetries=1; A acks one message and stops; B's first nack of the next one used
        to dead-letter it with retryCount 1."""
        topic = dead_letter_topic(api, maxRetries=1)
        a = await Consumer.open(api, topic)
        ids = api.publish(topic, 2)
        got = await a.messages(2)
        assert [m["attempt"] for m in got] == [1, 1]
        await a.ack([ids[0]])
        await a.close()
        b = await Consumer.open(api, topic)
        [again] = await b.messages(1)
        assert (again["id"], again["attempt"]) == (ids[1], 1)
        await nack(b, ids[1])
        assert api.ok("GET", f"/v1/topics/{topic}/groups/g/dlq")["data"] == []
        [retried] = await b.messages(1)
        assert (retried["id"], retried["attempt"]) == (ids[1], 2)
        await nack(b, ids[1])
        [entry] = api.ok("GET", f"/v1/topics/{topic}/groups/g/dlq")["data"]
        assert entry["retryCount"] == 1
        await b.close()

    async def test_sdk_stop_gives_messages_back_with_the_same_attempt(self, api: Api) -> None:
        topic = dead_letter_topic(api, maxRetries=1)
        ids = api.publish(topic, 2)
        for transport in ("websocket", "pull"):
            group = f"sdk-{transport}"
            api.ok(
                "PUT",
                f"/v1/topics/{topic}/groups/{group}",
                {"deadLetter": {"maxRetries": 1, "retryDelay": "0s"}},
            )
            async with AsyncQueueCore(api_key=api.key, base_url=api.server.url) as client:
                consumer = client.consume(
                    topic, group=group, start_from="earliest", transport=transport, max_in_flight=10
                )
                seen: list[tuple[str, int]] = []
                both = asyncio.Event()

                def hold(message, seen=seen, both=both) -> None:
                    seen.append((message.id, message.attempt))
                    if message.id == ids[0]:
                        message.ack()  # the second one is left unsettled: held at stop()
                    if len(seen) == 2:
                        both.set()

                consumer.on("message", hold)
                running = asyncio.ensure_future(consumer.start())
                await asyncio.wait_for(both.wait(), 10)
                await asyncio.sleep(0.3)  # the ack of the first is answered
                consumer.stop()  # leaves the group cleanly
                await asyncio.wait_for(running, 15)
            assert sorted(seen) == sorted([(ids[0], 1), (ids[1], 1)])
            pull = api.ok("POST", f"/v1/topics/{topic}/groups/{group}/members", {"startFrom": "earliest"})
            ident = {"memberId": pull["memberId"], "generationId": pull["generationId"]}
            polled = api.ok("POST", f"/v1/topics/{topic}/groups/{group}/poll", {**ident, "waitSeconds": 5})
            assert [(m["id"], m["attempt"]) for m in polled["messages"]] == [(ids[1], 1)], transport
            api.ok("DELETE", f"/v1/topics/{topic}/groups/{group}/members/{pull['memberId']}")
