"""Dead-letter queues through the real app, on SQLite and Postgres: retries with backoff, dead-lettering,
inspect, replay, replay-all, delete, audit. Time is injected (the app's clock, which the leases compare
with, and ``now_ms`` of the DLQ module), so the backoff schedule is checked without sleeping through it."""

from __future__ import annotations

import pytest

from app.broker import dead_letters
from app.kit import clock
from tests.api.test_errors import assert_envelope
from tests.api.test_pull import configure, join, make_topic
from tests.fixtures.clock import ManualClock


def frozen_clock(monkeypatch: pytest.MonkeyPatch, deployment) -> ManualClock:
    """A clock frozen at now, moved only when told, as the app's (``Services.clock``: pull leases and their
    deadlines) and the DLQ module's."""
    fake = ManualClock(start_ms=clock.now_ms())
    monkeypatch.setattr(deployment.app.state.services, "clock", fake)
    monkeypatch.setattr(dead_letters, "now_ms", fake.now_ms)
    return fake


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch, deployment) -> ManualClock:
    return frozen_clock(monkeypatch, deployment)


async def publish(client, headers, topic, items):
    r = await client.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items}, headers=headers)
    assert r.status_code == 201, r.text
    return [m["id"] for m in r.json()["messages"]]


async def nack(member, message_id, reason="boom", delay=None):
    body = {**member.ident(), "id": message_id, "reason": reason}
    if delay is not None:
        body["delay"] = delay
    r = await member.client.post(f"{member.base}/nack", json=body, headers=member.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"ids": [message_id], "failed": []}


async def group_dead_letters_page(client, headers, base, **params):
    r = await client.get(f"{base}/dlq", params=params, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def current(client, headers, topic, group, partition=0):
    r = await client.get(
        f"/v1/topics/{topic}/groups/{group}/offsets", params={"partition": partition}, headers=headers
    )
    assert r.status_code == 200, r.text
    return r.json()["current"]


async def dead_letter_one(client, prod, retries=2, data=None):
    """A topic with one message nacked until it is dead-lettered; the member and the message id."""
    await make_topic(client, prod, partitions=1)
    await configure(client, prod, "orders", "workers", deadLetter={"maxRetries": retries, "retryDelay": "0s"})
    [message_id] = await publish(
        client, prod, "orders", [{"data": data or {"order": 7}, "key": "k7", "headers": {"h": "v"}}]
    )
    member = await join(client, prod, startFrom="earliest")
    for attempt in range(1, retries + 2):
        [message] = await member.poll()
        assert (message["id"], message["attempt"]) == (message_id, attempt)
        await nack(member, message_id, reason=f"failed #{attempt}")
    return member, message_id


class TestDeadLettering:
    async def test_after_max_retries_the_message_moves_to_the_dlq(self, client, prod):
        member, message_id = await dead_letter_one(client, prod, retries=2)
        assert await member.poll() == []
        page = await group_dead_letters_page(client, prod, member.base)
        assert page["total"] == 1 and page["nextCursor"] is None
        [entry] = page["data"]
        failed_at = entry.pop("failedAt")
        assert failed_at.endswith("Z")
        attempts = entry.pop("attempts")
        # Every failed attempt, oldest first; the last one is the dead-lettering itself.
        assert [a["reason"] for a in attempts] == ["failed #1", "failed #2", "failed #3"]
        assert [a["at"] for a in attempts] == sorted(a["at"] for a in attempts)
        assert attempts[-1]["at"] == failed_at
        assert entry.pop("firstFailedAt") == attempts[0]["at"]
        assert entry == {
            "messageId": message_id,
            "data": {"order": 7},
            "key": "k7",
            "headers": {"h": "v"},
            "partition": 0,
            "offset": 0,
            "reason": "failed #3",
            "retryCount": 2,
        }
        # The group's committed offset moved past it.
        assert await current(client, prod, "orders", "workers") == 1

    async def test_max_retries_zero_dead_letters_at_the_first_failure(self, client, prod):
        member, message_id = await dead_letter_one(client, prod, retries=0)
        [entry] = (await group_dead_letters_page(client, prod, member.base))["data"]
        assert (entry["messageId"], entry["retryCount"], entry["reason"]) == (message_id, 0, "failed #1")

    async def test_without_a_dlq_a_nacked_message_comes_back_without_limit(self, client, prod):
        await make_topic(client, prod, partitions=1)
        [message_id] = await publish(client, prod, "orders", [{"data": 1}])
        member = await join(client, prod, startFrom="earliest")
        for attempt in range(1, 9):
            [message] = await member.poll()
            assert message["attempt"] == attempt
            await nack(member, message_id)
        assert await group_dead_letters_page(client, prod, member.base) == {
            "data": [],
            "total": 0,
            "nextCursor": None,
        }

    async def test_a_poison_message_does_not_hold_up_the_healthy_ones(self, client, prod):
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers", deadLetter={"maxRetries": 3, "retryDelay": "0s"})
        ids = await publish(client, prod, "orders", [{"data": {"poison": i == 2, "n": i}} for i in range(10)])
        member = await join(client, prod, startFrom="earliest")
        healthy: list[int] = []
        for _ in range(20):
            batch = await member.poll(max_messages=3)
            if not batch:
                break
            good = [m["id"] for m in batch if not m["data"]["poison"]]
            healthy += [m["data"]["n"] for m in batch if not m["data"]["poison"]]
            for m in batch:
                if m["data"]["poison"]:
                    await nack(member, m["id"], reason="cannot parse")
            if good:
                assert (await member.ack(good))["failed"] == []
        assert sorted(healthy) == [n for n in range(10) if n != 2]
        page = await group_dead_letters_page(client, prod, member.base)
        assert [(e["messageId"], e["retryCount"]) for e in page["data"]] == [(ids[2], 3)]
        assert await current(client, prod, "orders", "workers") == 10

    async def test_an_ack_timeout_is_a_failed_attempt_with_its_reason(self, client, prod, fake_clock):
        await make_topic(client, prod, partitions=1)
        await configure(
            client,
            prod,
            "orders",
            "workers",
            ackTimeout="1s",
            deadLetter={"maxRetries": 1, "retryDelay": "0s"},
        )
        [message_id] = await publish(client, prod, "orders", [{"data": 1}])
        member = await join(client, prod, startFrom="earliest", sessionTimeout="5m")
        for attempt in (1, 2):
            [message] = await member.poll()
            assert message["attempt"] == attempt
            fake_clock.advance(1.5)  # the ack deadline passes
        assert await member.poll() == []
        [entry] = (await group_dead_letters_page(client, prod, member.base))["data"]
        assert (entry["messageId"], entry["reason"], entry["retryCount"]) == (message_id, "ack timeout", 1)


class TestBackoff:
    async def test_the_nth_retry_waits_retry_delay_times_two_to_the_n_minus_one(
        self, client, prod, fake_clock
    ):
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers", deadLetter={"maxRetries": 3, "retryDelay": "10s"})
        [message_id] = await publish(client, prod, "orders", [{"data": 1}])
        member = await join(client, prod, startFrom="earliest", sessionTimeout="5m")
        [message] = await member.poll()
        for retry in (1, 2, 3):
            await nack(member, message_id)
            wait = 10 * 2 ** (retry - 1)
            fake_clock.advance(wait * 0.89)  # before the earliest jittered time (−10 %)
            assert await member.poll() == [], f"retry {retry} came early"
            fake_clock.advance(wait * 0.22)  # past the latest (+10 %)
            [message] = await member.poll()
            assert (message["id"], message["attempt"]) == (message_id, retry + 1)
        await nack(member, message_id)
        assert (await group_dead_letters_page(client, prod, member.base))["total"] == 1

    async def test_an_ack_timeout_waits_its_backoff_from_the_deadline(self, client, prod, fake_clock):
        await make_topic(client, prod, partitions=1)
        await configure(
            client,
            prod,
            "orders",
            "workers",
            ackTimeout="2s",
            deadLetter={"maxRetries": 5, "retryDelay": "20s"},
        )
        await publish(client, prod, "orders", [{"data": 1}])
        member = await join(client, prod, startFrom="earliest", sessionTimeout="5m")
        assert len(await member.poll()) == 1
        fake_clock.advance(2 + 20 * 0.89)  # deadline, then most of the first backoff
        assert await member.poll() == []
        fake_clock.advance(20 * 0.22)
        [message] = await member.poll()
        assert message["attempt"] == 2

    async def test_a_nack_delay_overrides_the_schedule(self, client, prod, fake_clock):
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers", deadLetter={"retryDelay": "1h"})
        [message_id] = await publish(client, prod, "orders", [{"data": 1}])
        member = await join(client, prod, startFrom="earliest", sessionTimeout="5m")
        await member.poll()
        await nack(member, message_id, delay="5s")
        fake_clock.advance(5.01)
        [message] = await member.poll()
        assert message["attempt"] == 2

    def test_delays_double_with_jitter_and_stop_at_an_hour(self):
        policy = dead_letters.Policy(max_retries=20, retry_delay_ms=30_000, alert_threshold=100)
        assert dead_letters.retry_delay_ms(policy, 1, rng=lambda: 0.5) == 30_000
        assert dead_letters.retry_delay_ms(policy, 3, rng=lambda: 0.5) == 120_000
        assert dead_letters.retry_delay_ms(policy, 3, rng=lambda: 0.0) == 108_000
        assert dead_letters.retry_delay_ms(policy, 3, rng=lambda: 0.999999) == 132_000
        assert dead_letters.retry_delay_ms(policy, 10, rng=lambda: 0.999999) == 3_600_000
        assert dead_letters.retry_delay_ms(policy, 100, rng=lambda: 0.0) == 3_600_000


class TestReplay:
    async def test_replay_redelivers_under_the_original_id_with_a_fresh_budget(self, client, prod):
        member, message_id = await dead_letter_one(client, prod, retries=1)
        r = await client.post(f"{member.base}/dlq/replay", json={"messageId": message_id}, headers=prod)
        assert r.status_code == 200, r.text
        assert r.json() == {"messageId": message_id, "replayed": True}
        assert (await group_dead_letters_page(client, prod, member.base))["total"] == 0
        # A fresh budget: one more retry before it is dead-lettered again.
        [message] = await member.poll()
        assert (message["id"], message["attempt"], message["offset"]) == (message_id, 1, 0)
        assert message["data"] == {"order": 7} and message["key"] == "k7"
        await nack(member, message_id)
        [message] = await member.poll()
        assert message["attempt"] == 2
        await nack(member, message_id, reason="again")
        [entry] = (await group_dead_letters_page(client, prod, member.base))["data"]
        assert (entry["reason"], entry["retryCount"]) == ("again", 1)

    async def test_replay_goes_to_the_failing_group_only(self, client, prod):
        member, message_id = await dead_letter_one(client, prod, retries=0)
        other = await join(client, prod, group="auditors", startFrom="latest")
        r = await client.post(f"{member.base}/dlq/replay", json={"messageId": message_id}, headers=prod)
        assert r.status_code == 200
        assert await other.poll() == []
        [message] = await member.poll()
        assert message["id"] == message_id
        assert (await member.ack([message_id]))["failed"] == []
        assert await current(client, prod, "orders", "workers") == 1

    async def test_replay_all_streams_every_dead_letter_back(self, client, prod):
        await make_topic(client, prod, partitions=2)
        await configure(client, prod, "orders", "workers", deadLetter={"maxRetries": 0})
        ids = await publish(client, prod, "orders", [{"data": i, "partition": i % 2} for i in range(30)])
        member = await join(client, prod, startFrom="earliest")
        for m in await member.poll(max_messages=100):
            await nack(member, m["id"])
        page = await group_dead_letters_page(client, prod, member.base, limit=7)
        assert page["total"] == 30 and len(page["data"]) == 7
        seen = [e["messageId"] for e in page["data"]]
        while page["nextCursor"]:
            page = await group_dead_letters_page(
                client, prod, member.base, limit=7, cursor=page["nextCursor"]
            )
            seen += [e["messageId"] for e in page["data"]]
        assert sorted(seen) == sorted(ids)

        r = await client.post(f"{member.base}/dlq/replay-all", json={"rate": 1000}, headers=prod)
        assert r.status_code == 200, r.text
        assert r.json() == {"replayed": 30}
        again = await member.poll(max_messages=100)
        assert sorted(m["id"] for m in again) == sorted(ids) and {m["attempt"] for m in again} == {1}
        assert (await member.ack([m["id"] for m in again]))["failed"] == []
        assert await group_dead_letters_page(client, prod, member.base) == {
            "data": [],
            "total": 0,
            "nextCursor": None,
        }
        r = await client.post(f"{member.base}/dlq/replay-all", headers=prod)
        assert r.json() == {"replayed": 0}

    async def test_delete_and_the_audit_trail(self, client, prod, tenant):
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers", deadLetter={"maxRetries": 0})
        ids = await publish(client, prod, "orders", [{"data": i} for i in range(3)])
        member = await join(client, prod, startFrom="earliest")
        for m in await member.poll():
            await nack(member, m["id"])
        r = await client.delete(f"{member.base}/dlq/{ids[0]}", headers=prod)
        assert r.status_code == 204, r.text
        r = await client.delete(f"{member.base}/dlq/{ids[0]}", headers=prod)
        assert_envelope(r, 404, "MESSAGE_NOT_FOUND")
        r = await client.post(f"{member.base}/dlq/replay", json={"messageId": ids[1]}, headers=prod)
        assert r.status_code == 200
        r = await client.post(f"{member.base}/dlq/replay-all", json={}, headers=prod)
        assert r.json() == {"replayed": 1}
        assert (await group_dead_letters_page(client, prod, member.base))["total"] == 0

        r = await client.get(f"{member.base}/dlq/audit", headers=prod)
        assert r.status_code == 200, r.text
        entries = r.json()["data"]
        assert [e["action"] for e in entries] == ["replay_all", "replay", "delete"]
        key_id = tenant.key_ids["production"]
        assert all(e["actor"] == {"type": "key", "id": key_id} for e in entries)
        assert entries[0]["count"] == 1 and "messageId" not in entries[0]
        assert entries[1]["messageId"] == ids[1] and entries[2]["messageId"] == ids[0]
        assert all(e["at"].endswith("Z") and e["id"].startswith("aud_") for e in entries)
        r = await client.get(f"{member.base}/dlq/audit", params={"limit": 2}, headers=prod)
        first = r.json()
        r = await client.get(
            f"{member.base}/dlq/audit", params={"limit": 2, "cursor": first["nextCursor"]}, headers=prod
        )
        assert [e["id"] for e in first["data"] + r.json()["data"]] == [e["id"] for e in entries]
        assert r.json()["nextCursor"] is None


class TestErrors:
    async def test_unknown_group_topic_and_message(self, client, prod):
        member, _ = await dead_letter_one(client, prod, retries=0)
        r = await client.get("/v1/topics/orders/groups/nobody/dlq", headers=prod)
        assert_envelope(r, 404, "GROUP_NOT_FOUND")
        r = await client.get("/v1/topics/nothing/groups/workers/dlq", headers=prod)
        assert_envelope(r, 404, "TOPIC_NOT_FOUND")
        r = await client.post(f"{member.base}/dlq/replay", json={"messageId": "msg_nope"}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        r = await client.post(f"{member.base}/dlq/replay", json={}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        r = await client.post(f"{member.base}/dlq/replay-all", json={"rate": 0}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        r = await client.get(f"{member.base}/dlq", params={"cursor": "###"}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        r = await client.get(f"{member.base}/dlq", params={"limit": 0}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        # Acked (not dead-lettered) messages are not in the DLQ.
        [healthy] = await publish(client, prod, "orders", [{"data": 2}])
        [m] = await member.poll()
        await member.ack([m["id"]])
        r = await client.post(f"{member.base}/dlq/replay", json={"messageId": healthy}, headers=prod)
        assert_envelope(r, 404, "MESSAGE_NOT_FOUND")
        r = await client.get(f"{member.base}/dlq", headers={"Authorization": "Bearer pq_live_sk_nope"})
        assert_envelope(r, 401, "INVALID_API_KEY")

    async def test_a_group_without_a_dlq_lists_an_empty_one(self, client, prod):
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers", ackTimeout="30s")
        assert await group_dead_letters_page(client, prod, "/v1/topics/orders/groups/workers") == {
            "data": [],
            "total": 0,
            "nextCursor": None,
        }


class TestLifecycle:
    async def test_deleting_the_group_or_the_topic_removes_its_dlq_log(self, client, prod, deployment):
        log = deployment.app.state.services.log
        before = {t for t in await log.topic_ids() if t.startswith("dlq_")}
        member, _ = await dead_letter_one(client, prod, retries=0)
        [created] = {t for t in await log.topic_ids() if t.startswith("dlq_")} - before
        r = await client.delete(member.base, headers=prod)
        assert_envelope(r, 409, "GROUP_ACTIVE")
        r = await client.delete(f"{member.base}/members/{member.member_id}", headers=prod)
        assert r.status_code == 204, r.text
        r = await client.delete(member.base, headers=prod)
        assert r.status_code == 204, r.text
        assert created not in await log.topic_ids()

        # A topic's deletion takes its groups' DLQs with it.
        member = await join(client, prod, group="second", startFrom="earliest")
        await configure(client, prod, "orders", "second", deadLetter={"maxRetries": 0})
        [message] = await member.poll()
        await nack(member, message["id"])
        [created] = {t for t in await log.topic_ids() if t.startswith("dlq_")} - before
        r = await client.delete("/v1/topics/orders", headers=prod)
        assert r.status_code == 204, r.text
        assert created not in await log.topic_ids()

    async def test_metrics_export_the_dlq_depth(self, client, prod, tenant):
        await dead_letter_one(client, prod, retries=0)
        r = await client.get("/metrics")
        assert r.status_code == 200
        line = next(
            line
            for line in r.text.splitlines()
            if line.startswith("queuecore_group_dlq_depth_messages{") and tenant.project_id in line
        )
        assert 'group="workers"' in line and line.endswith(" 1.0")
