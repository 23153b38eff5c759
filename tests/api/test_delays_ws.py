"""Delayed delivery and TTL on the WebSocket push path, against real ``queuecore-server`` processes (embedded
SQLite + local engine, and Postgres + JetStream): a delayed message reaches the connected member when due
and not before, later messages are not held back, the committed offset stops at it meanwhile, and an
expired message goes to the DLQ with reason ``expired`` (or counts as acked without one)."""

from __future__ import annotations

import asyncio
from datetime import datetime

from app.kit import clock
from tests.api.ws_client import Api, Consumer


def ms(instant: str) -> int:
    return int(datetime.fromisoformat(instant).timestamp() * 1000)


def publish(api: Api, topic: str, items: list[dict]) -> list[dict]:
    return api.ok("POST", f"/v1/topics/{topic}/messages/batch", {"messages": items})["messages"]


def current(api: Api, topic: str) -> int:
    return api.ok("GET", f"/v1/topics/{topic}/groups/g/offsets?partition=0")["current"]


class TestPushDelays:
    async def test_held_back_until_due_and_later_ones_go_first(self, api: Api) -> None:
        topic = api.topic(partitions=1, delivery="exactly-once")
        c = await Consumer.open(api, topic)
        delayed, plain = publish(api, topic, [{"data": "later", "delay": "1500ms"}, {"data": "now"}])
        got = await c.messages(1)
        assert [m["id"] for m in got] == [plain["id"]] and got[0]["deliverAt"] is None
        acked = await c.ack([plain["id"]])
        assert acked["ids"] == [plain["id"]]
        assert current(api, topic) == delayed["offset"]  # not past the undelivered one
        got = await c.messages(1, timeout=10)
        arrived = clock.now_ms()
        assert [m["id"] for m in got] == [delayed["id"]]
        assert got[0]["attempt"] == 1 and got[0]["deliverAt"] == delayed["deliverAt"]
        assert arrived >= ms(delayed["deliverAt"])
        await c.ack([delayed["id"]])
        assert current(api, topic) == plain["offset"] + 1
        assert await c.quiet(0.5) == []
        await c.close()

    async def test_many_due_messages_all_arrive_once(self, api: Api) -> None:
        topic = api.topic(partitions=2)
        c = await Consumer.open(api, topic, maxInFlight=500)
        items = [{"data": i, "delay": f"{500 + 10 * (i % 50)}ms"} for i in range(200)]
        placed = publish(api, topic, items)
        got = await c.messages(200, timeout=15)
        assert sorted(m["id"] for m in got) == sorted(p["id"] for p in placed)
        assert all(clock.now_ms() >= ms(m["deliverAt"]) for m in got)
        assert await c.quiet(0.5) == []
        await c.close()

    async def test_expired_goes_to_the_dlq_with_reason_expired(self, api: Api) -> None:
        topic = api.topic(partitions=1, deadLetter={"maxRetries": 2})  # type: ignore[arg-type]
        first, second = publish(
            api, topic, [{"data": "stale", "expiresAt": clock.now_ms() + 300}, {"data": "fresh"}]
        )
        await asyncio.sleep(0.6)
        c = await Consumer.open(api, topic)
        got = await c.messages(1)
        assert [m["id"] for m in got] == [second["id"]]
        await c.ack([second["id"]])
        page = api.ok("GET", f"/v1/topics/{topic}/groups/g/dlq")
        assert [(e["messageId"], e["reason"]) for e in page["data"]] == [(first["id"], "expired")]
        assert api.ok("GET", f"/v1/topics/{topic}/groups/g")["expired"] == 1
        await c.close()

    async def test_expired_without_a_dlq_counts_as_acked(self, api: Api) -> None:
        # Delivered at once and not acked: the ack timeout (1s) passes after the expiry (600 ms), so the
        # retry finds it expired and it is never delivered again.
        topic = api.topic(partitions=1, delivery="exactly-once", ackTimeout="1s")
        c = await Consumer.open(api, topic)
        (placed,) = publish(api, topic, [{"data": 1, "ttl": "600ms"}])
        got = await c.messages(1)
        assert got[0]["id"] == placed["id"] and got[0]["expiresAt"] == placed["expiresAt"]
        assert await c.quiet(2.5) == []
        assert api.ok("GET", f"/v1/topics/{topic}/groups/g")["expired"] == 1
        assert current(api, topic) == placed["offset"] + 1
        await c.close()
