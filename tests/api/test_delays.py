"""Delayed delivery and TTL through the real app, on every backend (SQLite, Postgres, JetStream): publish
validation, the fields of answers and reads, messages held back until due without holding later ones
back, the committed offset that never passes an undelivered one, expiry with and without a DLQ, and the
group's ``expired`` count. Most scenarios inject time (the app's clock, which members' sessions are
decided on too, and the DLQ's ``now_ms``) so that "not before" and "expired" are checked without
sleeping; one long poll waits for a real due time."""

from __future__ import annotations

from datetime import datetime

import pytest

from app.kit import clock
from tests.api.test_dead_letters import current, frozen_clock, group_dead_letters_page, nack
from tests.api.test_errors import assert_envelope
from tests.api.test_pull import configure, join, make_topic
from tests.fixtures.clock import ManualClock

DAY_MS = 86_400_000


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch, deployment) -> ManualClock:
    """The app's and the DLQ's clock frozen (``test_dead_letters.frozen_clock``); members' sessions
    start and expire on the app's clock too, so an hour's jump past a member's leave sees no session of
    its end."""
    return frozen_clock(monkeypatch, deployment)


def ms(instant: str) -> int:
    return int(datetime.fromisoformat(instant).timestamp() * 1000)


async def publish_one(client, headers, topic, body, expect=201):
    r = await client.post(f"/v1/topics/{topic}/messages", json=body, headers=headers)
    assert r.status_code == expect, r.text
    return r.json()


async def describe(client, headers, topic, group):
    r = await client.get(f"/v1/topics/{topic}/groups/{group}", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
async def topic(client, prod):
    await make_topic(client, prod, name="later", partitions=1)
    return "later"


class TestPublishValidation:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"delay": "10s", "deliverAt": "2030-01-01T00:00:00Z"}, "deliverAt"),
            ({"delay": -1}, "delay"),
            ({"delay": "-5s"}, "delay"),
            ({"delay": "31d"}, "delay"),
            ({"delay": 30 * 86400 + 1}, "delay"),
            ({"delay": "soon"}, "delay"),
            ({"delay": True}, "delay"),
            ({"deliverAt": "tomorrow"}, "deliverAt"),
            ({"deliverAt": "2026-01-01T00:00:00"}, "deliverAt"),
            ({"ttl": "1h", "expiresAt": "2030-01-01T00:00:00Z"}, "expiresAt"),
            ({"ttl": 0}, "ttl"),
            ({"ttl": "-1s"}, "ttl"),
            ({"ttl": "366d"}, "ttl"),
            ({"delay": "1h", "ttl": "30m"}, "ttl"),
            ({"expiresAt": "2001-01-01T00:00:00Z"}, "expiresAt"),
        ],
    )
    async def test_refused_naming_the_field(self, client, prod, topic, body, field):
        r = await client.post(f"/v1/topics/{topic}/messages", json={"data": 1, **body}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        assert r.json()["error"]["details"][0]["field"] == field

    async def test_beyond_thirty_days_as_a_timestamp(self, client, prod, topic):
        at = clock.now_ms() + 31 * DAY_MS
        r = await client.post(f"/v1/topics/{topic}/messages", json={"data": 1, "deliverAt": at}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        assert r.json()["error"]["details"][0]["field"] == "deliverAt"

    async def test_a_batch_names_the_item_and_writes_nothing(self, client, prod, topic):
        items = [{"data": 0}, {"data": 1, "delay": "45d"}]
        r = await client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        assert r.json()["error"]["details"][0]["field"] == "messages[1].delay"
        items = [{"data": 0, "ttl": "1m", "expiresAt": clock.now_ms() + 60_000}]
        r = await client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items}, headers=prod)
        assert r.json()["error"]["details"][0]["field"] == "messages[0].expiresAt"
        r = await client.get(f"/v1/topics/{topic}", headers=prod)
        assert r.json()["partitionDetails"][0]["latestOffset"] == 0

    async def test_a_past_deliver_at_means_now(self, client, prod, topic):
        body = await publish_one(client, prod, topic, {"data": 1, "deliverAt": "2020-01-01T00:00:00.000Z"})
        assert body["deliverAt"] is None
        body = await publish_one(client, prod, topic, {"data": 1, "delay": 0})
        assert body["deliverAt"] is None


class TestFields:
    async def test_answers_and_reads_carry_deliver_at_and_expires_at(self, client, prod, topic):
        before = clock.now_ms()
        body = await publish_one(client, prod, topic, {"data": "x", "delay": "1h", "ttl": "2h"})
        assert before + 3_600_000 <= ms(body["deliverAt"]) <= clock.now_ms() + 3_600_000
        assert ms(body["expiresAt"]) - ms(body["deliverAt"]) == 3_600_000
        at = "2027-05-01T10:00:00.000Z"
        epoch = clock.now_ms() + 120_000
        r = await client.post(
            f"/v1/topics/{topic}/messages/batch",
            json={
                "messages": [
                    {"data": 1},
                    {"data": 2, "deliverAt": epoch, "expiresAt": at, "key": "k"},
                    {"data": 3, "delay": 90.5},
                ]
            },
            headers=prod,
        )
        assert r.status_code == 201, r.text
        items = r.json()["messages"]
        assert items[0]["deliverAt"] is None and items[0]["expiresAt"] is None
        assert ms(items[1]["deliverAt"]) == epoch and items[1]["expiresAt"] == at
        assert items[2]["expiresAt"] is None and items[2]["deliverAt"].endswith("Z")
        # Stored with its offset at once: a stream read shows every one of them.
        r = await client.get(f"/v1/topics/{topic}/partitions/0/messages", headers=prod)
        page = r.json()["data"]
        assert [m["offset"] for m in page] == [0, 1, 2, 3]
        assert page[0]["deliverAt"] == body["deliverAt"] and page[0]["expiresAt"] == body["expiresAt"]
        assert page[1]["deliverAt"] is None and page[2]["expiresAt"] == at and page[2]["key"] == "k"
        fetched = await client.get(f"/v1/topics/{topic}/messages/{items[1]['id']}", headers=prod)
        assert fetched.json()["deliverAt"] == items[1]["deliverAt"]

    async def test_an_idempotent_replay_answers_the_original_times(self, client, prod, topic):
        headers = {**prod, "Idempotency-Key": "delayed-once"}
        first = await client.post(
            f"/v1/topics/{topic}/messages", json={"data": 1, "delay": "10m"}, headers=headers
        )
        again = await client.post(
            f"/v1/topics/{topic}/messages", json={"data": 1, "delay": "20m"}, headers=headers
        )
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json()["deliverAt"] == first.json()["deliverAt"]


class TestHeldBack:
    async def test_due_later_not_before_and_later_messages_are_not_held_back(
        self, client, prod, topic, fake_clock
    ):
        member = await join(client, prod, topic, "g", startFrom="earliest", sessionTimeout="5m")
        delayed = await publish_one(client, prod, topic, {"data": "later", "delay": "60s"})
        plain = await publish_one(client, prod, topic, {"data": "now"})
        got = await member.poll()
        assert [m["id"] for m in got] == [plain["id"]] and got[0]["deliverAt"] is None
        await member.ack([plain["id"]])
        # The committed offset stops at the message not yet delivered.
        assert await current(client, prod, topic, "g") == delayed["offset"]
        fake_clock.move_to(ms(delayed["deliverAt"]) - 1000)
        assert await member.poll() == []
        fake_clock.move_to(ms(delayed["deliverAt"]) + 1000)
        got = await member.poll()
        assert [m["id"] for m in got] == [delayed["id"]]
        assert got[0]["attempt"] == 1 and got[0]["deliverAt"] == delayed["deliverAt"]
        await member.ack([delayed["id"]])
        assert await current(client, prod, topic, "g") == plain["offset"] + 1
        assert await member.poll() == []

    async def test_many_held_back_do_not_use_up_a_small_poll(self, client, prod, topic, fake_clock):
        member = await join(client, prod, topic, "g", startFrom="earliest", sessionTimeout="5m")
        items = [{"data": i, "delay": "4m"} for i in range(20)] + [{"data": "due"}]
        r = await client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items}, headers=prod)
        got = await member.poll(max_messages=5)
        assert [m["data"] for m in got] == ["due"]
        await member.ack([got[0]["id"]])
        fake_clock.move_to(max(ms(m["deliverAt"]) for m in r.json()["messages"][:20]) + 1000)
        got = await member.poll(max_messages=1000)
        assert [m["data"] for m in got] == list(range(20))
        assert {m["id"] for m in got} == {m["id"] for m in r.json()["messages"][:20]}

    async def test_a_long_poll_wakes_when_the_message_falls_due(self, client, prod, topic):
        member = await join(client, prod, topic, "g", startFrom="earliest", sessionTimeout="5m")
        assert await member.poll() == []
        body = await publish_one(client, prod, topic, {"data": 1, "delay": "1500ms"})
        got = await member.poll(wait=10)
        received = clock.now_ms()
        assert [m["id"] for m in got] == [body["id"]]
        assert received >= ms(body["deliverAt"])

    async def test_a_group_offline_meanwhile_gets_every_message_that_fell_due(
        self, client, prod, topic, fake_clock
    ):
        first = await join(client, prod, topic, "g", startFrom="earliest", sessionTimeout="5m")
        r = await client.post(
            f"/v1/topics/{topic}/messages/batch",
            json={"messages": [{"data": i, "delay": f"{i + 1}m"} for i in range(5)]},
            headers=prod,
        )
        assert r.status_code == 201
        assert await first.poll() == []  # read and held back: lease rows due later
        left = await client.delete(f"{first.base}/members/{first.member_id}", headers=prod)
        assert left.status_code == 204
        fake_clock.advance(3600)
        member = await join(client, prod, topic, "g", sessionTimeout="5m")
        got = await member.poll()
        assert [m["data"] for m in got] == list(range(5)) and {m["attempt"] for m in got} == {1}


class TestTtl:
    async def test_expired_before_delivery_counts_as_acked_without_a_dlq(
        self, client, prod, tenant, topic, fake_clock
    ):
        member = await join(client, prod, topic, "g", startFrom="earliest", sessionTimeout="5m")
        gone = await publish_one(client, prod, topic, {"data": "stale", "ttl": "30s"})
        kept = await publish_one(client, prod, topic, {"data": "fresh", "ttl": "1h"})
        fake_clock.move_to(ms(gone["expiresAt"]) + 1000)
        got = await member.poll()
        assert [m["id"] for m in got] == [kept["id"]]
        assert got[0]["expiresAt"] == kept["expiresAt"]
        await member.ack([kept["id"]])
        assert await current(client, prod, topic, "g") == gone["offset"] + 2
        assert (await describe(client, prod, topic, "g"))["expired"] == 1
        r = await client.get("/metrics")
        line = next(
            line
            for line in r.text.splitlines()
            if line.startswith("queuecore_group_expired_messages_total{") and tenant.project_id in line
        )
        assert 'group="g"' in line and line.endswith(" 1.0")

    async def test_a_retry_after_the_expiry_is_never_delivered(self, client, prod, topic, fake_clock):
        member = await join(client, prod, topic, "g", startFrom="earliest", sessionTimeout="5m")
        body = await publish_one(client, prod, topic, {"data": 1, "ttl": "1m"})
        got = await member.poll()
        assert got[0]["id"] == body["id"]
        await nack(member, body["id"], delay="2m")
        fake_clock.move_to(max(fake_clock.now_ms() + 121_000, ms(body["expiresAt"]) + 1000))
        assert await member.poll() == []
        assert await current(client, prod, topic, "g") == body["offset"] + 1
        assert (await describe(client, prod, topic, "g"))["expired"] == 1

    async def test_with_a_dlq_it_moves_there_with_reason_expired(self, client, prod, topic, fake_clock):
        await configure(client, prod, topic, "g", deadLetter={"maxRetries": 3})
        member = await join(client, prod, topic, "g", startFrom="earliest", sessionTimeout="5m")
        first = await publish_one(client, prod, topic, {"data": "a", "ttl": "10s"})
        second = await publish_one(client, prod, topic, {"data": "b", "delay": "20s", "ttl": "30s"})
        fake_clock.move_to(ms(second["expiresAt"]) + 1000)
        assert await member.poll() == []
        page = await group_dead_letters_page(client, prod, f"/v1/topics/{topic}/groups/g")
        assert page["total"] == 2
        assert {e["messageId"] for e in page["data"]} == {first["id"], second["id"]}
        assert {e["reason"] for e in page["data"]} == {"expired"}
        assert await current(client, prod, topic, "g") == second["offset"] + 1
        assert (await describe(client, prod, topic, "g"))["expired"] == 2

    async def test_a_fresh_group_counts_nothing(self, client, prod, topic):
        await configure(client, prod, topic, "g")
        assert (await describe(client, prod, topic, "g"))["expired"] == 0


class TestTimeIsReal:
    async def test_not_delivered_before_due(self, client, prod, topic):
        """No injected time: the message reaches a waiting member, and never before ``deliverAt``."""
        member = await join(client, prod, topic, "g", startFrom="earliest", sessionTimeout="5m")
        body = await publish_one(client, prod, topic, {"data": 1, "delay": 1})
        assert await member.poll(wait=0.3) == []
        got = await member.poll(wait=10)  # a long poll: answered when it falls due
        assert got and clock.now_ms() >= ms(body["deliverAt"])
