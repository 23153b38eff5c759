"""Pause, nack to the DLQ, dead-letter history, the DLQ breaker and what counts as a failed attempt
(PRODUCT.md "Time and flow"), through the real app on every deployment (SQLite, Postgres, JetStream).

Pull members here; WebSocket members and the SDK in ``test_pause_ws.py``, two API processes in
``tests/system/test_pause_nodes.py``. Waits are real (a pause's end, a session's expiry, the breaker's
flushes) but for an ack timeout, passed by advancing the deployment's clock; the bounds are correctness
bounds, not speed claims."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.api.test_errors import assert_envelope
from tests.api.test_pull import configure, join, make_topic, publish
from tests.fixtures.webhooks import Receiver


async def describe(client, headers, topic="orders", group="workers"):
    r = await client.get(f"/v1/topics/{topic}/groups/{group}", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def pause(client, headers, topic="orders", group="workers", **body):
    return await client.post(f"/v1/topics/{topic}/groups/{group}/pause", json=body, headers=headers)


async def resume(client, headers, topic="orders", group="workers"):
    return await client.post(f"/v1/topics/{topic}/groups/{group}/resume", headers=headers)


async def nack(member, message_id, expect=200, **extra):
    r = await member.client.post(
        f"{member.base}/nack", json={**member.ident(), "id": message_id, **extra}, headers=member.headers
    )
    assert r.status_code == expect, r.text
    return r


async def dlq_entries(client, headers, topic="orders", group="workers"):
    r = await client.get(f"/v1/topics/{topic}/groups/{group}/dlq", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["data"]


async def eventually(check, seconds=5.0):
    """``check()`` (async) until truthy, within ``seconds``; its last value."""
    deadline = time.monotonic() + seconds
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.05)


class TestPause:
    async def test_a_paused_group_delivers_nothing_until_resumed(self, client, prod):
        await make_topic(client, prod, partitions=1)
        member = await join(client, prod, startFrom="earliest")
        await publish(client, prod, count=2)
        r = await pause(client, prod)
        assert r.status_code == 200, r.text
        assert r.json() == {"paused": True, "until": None}
        group = await describe(client, prod)
        assert (group["paused"], group["pausedUntil"], group["pausedReason"]) == (True, None, "user")
        assert await member.poll() == []
        assert await member.poll(wait=1) == []  # a long poll waits it out, empty
        r = await resume(client, prod)
        assert r.status_code == 200 and r.json() == {"paused": False}
        got = await member.poll()
        assert [m["data"] for m in got] == [{"n": 0}, {"n": 1}]
        group = await describe(client, prod)
        assert (group["paused"], group["pausedUntil"], group["pausedReason"]) == (False, None, None)

    async def test_a_long_poll_waiting_while_paused_gets_messages_once_resumed(self, client, prod):
        await make_topic(client, prod, partitions=1)
        member = await join(client, prod, startFrom="earliest")
        await publish(client, prod, count=1)
        assert (await pause(client, prod)).status_code == 200
        waiting = asyncio.ensure_future(member.poll(wait=10))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        assert (await resume(client, prod)).status_code == 200
        got = await asyncio.wait_for(waiting, 5)
        assert [m["data"] for m in got] == [{"n": 0}]

    async def test_acks_nacks_and_extends_work_while_paused(self, client, prod):
        await make_topic(client, prod, partitions=1)
        member = await join(client, prod, startFrom="earliest")
        ids = await publish(client, prod, count=3)
        assert [m["id"] for m in await member.poll()] == ids
        assert (await pause(client, prod)).status_code == 200
        assert await member.ack([ids[0]]) == {"ids": [ids[0]], "failed": []}
        r = await member.client.post(
            f"{member.base}/extend", json={**member.ident(), "ids": [ids[1]], "seconds": 60}, headers=prod
        )
        assert r.status_code == 200 and r.json() == {"ids": [ids[1]], "failed": []}
        r = await nack(member, ids[2])
        assert r.json() == {"ids": [ids[2]], "failed": []}
        assert await member.poll() == []  # the nacked one is due, but the group is paused
        assert (await resume(client, prod)).status_code == 200
        again = await member.poll()
        assert [(m["id"], m["attempt"]) for m in again] == [(ids[2], 2)]

    async def test_a_pause_with_until_ends_by_itself(self, client, prod):
        await make_topic(client, prod, partitions=1)
        member = await join(client, prod, startFrom="earliest")
        await publish(client, prod, count=1)
        until = datetime.now(UTC) + timedelta(seconds=1.5)
        text = until.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        r = await pause(client, prod, until=text)
        assert r.status_code == 200 and r.json() == {"paused": True, "until": text}
        group = await describe(client, prod)
        assert (group["paused"], group["pausedUntil"], group["pausedReason"]) == (True, text, "user")
        assert await member.poll() == []
        got = await member.poll(wait=10)  # answered once the pause ends, not before
        assert datetime.now(UTC) >= until
        assert [m["data"] for m in got] == [{"n": 0}]
        assert (await describe(client, prod))["paused"] is False

    async def test_until_as_epoch_milliseconds(self, client, prod):
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers")
        at = int(time.time() * 1000) + 60_000
        r = await pause(client, prod, until=at)
        assert r.status_code == 200
        assert datetime.fromisoformat(r.json()["until"]) == datetime.fromtimestamp(at / 1000, UTC)

    @pytest.mark.parametrize("until", ["tomorrow", "2026-01-01T00:00:00Z", "2099-01-01T00:00:00", True, [1]])
    async def test_a_bad_until_is_400_naming_it(self, client, prod, until):
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers")
        error = assert_envelope(await pause(client, prod, until=until), 400, "INVALID_REQUEST")
        assert [d["field"] for d in error["details"]] == ["until"]
        assert (await describe(client, prod))["paused"] is False

    async def test_unknown_topic_or_group_is_404(self, client, prod):
        await make_topic(client, prod, partitions=1)
        assert_envelope(await pause(client, prod, group="nobody"), 404, "GROUP_NOT_FOUND")
        assert_envelope(await resume(client, prod, group="nobody"), 404, "GROUP_NOT_FOUND")
        assert_envelope(await pause(client, prod, topic="nothing"), 404, "TOPIC_NOT_FOUND")
        assert_envelope(await resume(client, prod, topic="nothing"), 404, "TOPIC_NOT_FOUND")


class TestNackToTheDlq:
    async def test_dead_letter_true_moves_the_message_at_once(self, client, prod):
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers", deadLetter={"maxRetries": 5, "retryDelay": "0s"})
        member = await join(client, prod, startFrom="earliest")
        [message_id] = await publish(client, prod, count=1)
        await member.poll()
        r = await nack(member, message_id, reason="poison", deadLetter=True)
        assert r.json() == {"ids": [message_id], "failed": []}
        assert await member.poll() == []
        [entry] = await dlq_entries(client, prod)
        assert (entry["messageId"], entry["reason"], entry["retryCount"]) == (message_id, "poison", 0)
        assert [a["reason"] for a in entry["attempts"]] == ["poison"]
        assert entry["firstFailedAt"] == entry["failedAt"] == entry["attempts"][0]["at"]

    async def test_without_a_dlq_it_is_400_and_the_message_stays_held(self, client, prod):
        await make_topic(client, prod, partitions=1)
        member = await join(client, prod, startFrom="earliest")
        [message_id] = await publish(client, prod, count=1)
        await member.poll()
        error = assert_envelope(
            await nack(member, message_id, expect=400, deadLetter=True), 400, "INVALID_REQUEST"
        )
        assert [d["field"] for d in error["details"]] == ["deadLetter"]
        assert (await member.ack([message_id])) == {"ids": [message_id], "failed": []}


class TestDeadLetterHistory:
    async def test_timeouts_and_nacks_oldest_first(self, client, prod, clock):
        await make_topic(client, prod, partitions=1)
        await configure(
            client,
            prod,
            "orders",
            "workers",
            ackTimeout="1s",
            deadLetter={"maxRetries": 2, "retryDelay": "0s"},
        )
        member = await join(client, prod, startFrom="earliest")
        [message_id] = await publish(client, prod, count=1)
        [first] = await member.poll()
        assert first["attempt"] == 1
        assert await member.poll() == []  # its deadline holds
        clock.advance(1.1)
        [second] = await member.poll()  # after the 1 s ack timeout
        assert second["attempt"] == 2
        await nack(member, message_id, reason="bad")
        [third] = await member.poll(wait=5)
        assert third["attempt"] == 3
        await nack(member, message_id, reason="worse")
        [entry] = await dlq_entries(client, prod)
        assert [a["reason"] for a in entry["attempts"]] == ["ack timeout", "bad", "worse"]
        ats = [datetime.fromisoformat(a["at"]) for a in entry["attempts"]]
        assert ats == sorted(ats)
        # The timeout's time is its ack deadline.
        assert entry["attempts"][0]["at"] == first["ackDeadline"]
        assert entry["firstFailedAt"] == first["ackDeadline"]
        assert (entry["retryCount"], entry["reason"]) == (2, "worse")

    async def test_a_nack_delay_is_a_failed_attempt_too(self, client, prod):
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers", deadLetter={"maxRetries": 1, "retryDelay": "0s"})
        member = await join(client, prod, startFrom="earliest")
        [message_id] = await publish(client, prod, count=1)
        await member.poll()
        await nack(member, message_id, reason="later", delay="0s")
        [again] = await member.poll(wait=5)
        assert again["attempt"] == 2
        await nack(member, message_id, reason="never")
        [entry] = await dlq_entries(client, prod)
        assert [a["reason"] for a in entry["attempts"]] == ["later", "never"]


class TestBreaker:
    async def _tripping_group(self, client, prod, breaker):
        await make_topic(client, prod, partitions=1)
        dead_letter = {"maxRetries": 5, "retryDelay": "0s", "breaker": breaker}
        group = await configure(client, prod, "orders", "workers", deadLetter=dead_letter)
        member = await join(client, prod, startFrom="earliest")
        ids = await publish(client, prod, count=6)
        got = await member.poll()
        assert [m["id"] for m in got] == ids
        await member.ack([ids[0]])
        for message_id in ids[1:]:  # 5 of 6 ended in failure: over 0.5
            await nack(member, message_id, reason="down")
        return group, member, ids

    async def test_too_many_failures_pause_the_group_and_alert(self, client, prod, receiver: Receiver):
        r = await client.put("/v1/alerts/endpoint", json={"url": receiver.url}, headers=prod)
        assert r.status_code == 200, r.text
        breaker = {"minAttempts": 6, "failureRate": 0.5, "window": "60s"}
        group, member, ids = await self._tripping_group(client, prod, breaker)
        assert group["config"]["deadLetter"]["breaker"] == breaker

        async def tripped():
            group = await describe(client, prod)
            return group if group["paused"] else None

        group = await eventually(tripped)
        assert group, "the breaker did not trip"
        assert (group["pausedReason"], group["pausedUntil"]) == ("dlq-breaker", None)
        [alert] = await receiver.arrival("dlq.breaker_tripped")
        event = json.loads(alert.body)
        assert event["data"]["topic"] == "orders" and event["data"]["group"] == "workers"
        assert (event["data"]["failed"], event["data"]["attempts"]) == (5, 6)
        assert event["data"]["threshold"] == 0.5
        assert await member.poll() == []  # the nacked messages are due, but the group is paused
        assert (await resume(client, prod)).status_code == 200
        again = await member.poll()
        assert sorted(m["id"] for m in again) == sorted(ids[1:])
        assert {m["attempt"] for m in again} == {2}
        assert (await describe(client, prod))["paused"] is False

    async def test_below_min_attempts_or_turned_off_it_does_not_trip(self, client, prod):
        await self._tripping_group(client, prod, {"minAttempts": 7})
        await asyncio.sleep(1.0)  # four breaker flushes
        assert (await describe(client, prod))["paused"] is False

    async def test_a_null_breaker_never_trips(self, client, prod):
        group, _, _ = await self._tripping_group(client, prod, None)
        assert group["config"]["deadLetter"]["breaker"] is None
        await asyncio.sleep(1.0)
        assert (await describe(client, prod))["paused"] is False

    @pytest.mark.parametrize(
        ("breaker", "field"),
        [
            ({"failureRate": 1.5}, "deadLetter.breaker.failureRate"),
            ({"minAttempts": 0}, "deadLetter.breaker.minAttempts"),
            ({"window": "forever"}, "deadLetter.breaker.window"),
        ],
    )
    async def test_bad_breaker_config_is_400_naming_the_field(self, client, prod, breaker, field):
        await make_topic(client, prod, partitions=1)
        r = await client.put(
            "/v1/topics/orders/groups/workers", json={"deadLetter": {"breaker": breaker}}, headers=prod
        )
        error = assert_envelope(r, 400, "INVALID_REQUEST")
        assert [d["field"] for d in error["details"]] == [field]


class TestWhatCountsAsAFailedAttempt:
    async def test_a_clean_leave_spends_no_retry(self, client, prod):
        """The repro: maxRetries=1; A acks one message and leaves; B's first nack of the next one used
        to dead-letter it with retryCount 1."""
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers", deadLetter={"maxRetries": 1, "retryDelay": "0s"})
        a = await join(client, prod, startFrom="earliest")
        ids = await publish(client, prod, count=2)
        assert [m["id"] for m in await a.poll()] == ids
        await a.ack([ids[0]])
        assert (await client.delete(f"{a.base}/members/{a.member_id}", headers=prod)).status_code == 204
        b = await join(client, prod, startFrom="earliest")
        [given_back] = await b.poll()
        assert (given_back["id"], given_back["attempt"]) == (ids[1], 1)
        await nack(b, ids[1])
        assert await dlq_entries(client, prod) == []
        [retried] = await b.poll(wait=5)
        assert (retried["id"], retried["attempt"]) == (ids[1], 2)
        await nack(b, ids[1])
        [entry] = await dlq_entries(client, prod)
        assert entry["retryCount"] == 1 and len(entry["attempts"]) == 2

    async def test_a_session_expiry_is_an_ack_timeout(self, client, prod, clock):
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers", deadLetter={"maxRetries": 0})
        a = await join(client, prod, startFrom="earliest", sessionTimeout="2s")
        [message_id] = await publish(client, prod, count=1)
        [held] = await a.poll()
        assert held["attempt"] == 1
        b = await join(client, prod, startFrom="earliest", sessionTimeout="30s")
        clock.advance(2.2)  # A stops heartbeating: its session ends, its lease is a timeout
        assert (await b.poll(expect=409)).json()["error"]["code"] == "STALE_GENERATION"  # A expired
        await b.rejoin()
        assert b.assignments == [0]
        assert await b.poll(wait=1) == []  # dead-lettered, not redelivered

        async def dead():
            return await dlq_entries(client, prod)

        [entry] = await eventually(dead)
        assert (entry["messageId"], entry["reason"], entry["retryCount"]) == (message_id, "ack timeout", 0)
