"""Push groups through the real app on every deployment (sqlite, postgres, jetstream): config and secrets,
each delivery's headers and signature, retries into the DLQ, Retry-After, redirects, timeouts, ordered,
maxConcurrency, GROUP_ACTIVE, the attempts API and bad input. Receivers are real HTTP servers on loopback.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_http_event
from queuecore import WebhookVerificationError, webhooks
from standardwebhooks import Webhook

from tests.api.test_errors import assert_envelope
from tests.api.test_pull import join, make_topic
from tests.fixtures.push_receivers import Answer, PushReceiver


async def put_push(client, headers, topic, group, expect=200, **config):
    r = await client.put(f"/v1/topics/{topic}/groups/{group}", json=config, headers=headers)
    assert r.status_code == expect, r.text
    return r.json() if expect == 200 else r


async def publish(client, headers, topic, body):
    r = await client.post(f"/v1/topics/{topic}/messages", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


async def attempts(client, headers, topic, group, limit=50):
    r = await client.get(f"/v1/topics/{topic}/groups/{group}/push/attempts?limit={limit}", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["data"]


async def eventually(check, seconds=20.0):
    deadline = time.monotonic() + seconds
    while True:
        got = await check()
        if got or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.1)


async def push_group(
    client, headers, receiver: PushReceiver, topic="orders", group="hooks", partitions=3, **push
):
    await make_topic(client, headers, topic, partitions=partitions)
    extra = push.pop("config", {})
    body = await put_push(client, headers, topic, group, push={"url": receiver.url, **push}, **extra)
    return body["config"]["push"]["secret"]


class TestConfig:
    async def test_the_first_put_reveals_the_secret_once_and_describe_masks_it(
        self, client, prod, push_receiver
    ):
        await make_topic(client, prod, "orders")
        body = await put_push(client, prod, "orders", "hooks", push={"url": push_receiver.url})
        push = body["config"]["push"]
        assert push["secret"].startswith("whsec_") and len(push["secret"]) > 30
        assert {k: v for k, v in push.items() if k not in ("secret", "breaker")} == {
            "url": push_receiver.url,
            "maxConcurrency": 16,
            "rate": None,
            "timeout": "10s",
            "ordered": False,
            "mode": "binary",
        }
        described = (await client.get("/v1/topics/orders/groups/hooks", headers=prod)).json()["config"][
            "push"
        ]
        assert described["secret"] == f"whsec_…{push['secret'][-4:]}"
        again = await put_push(client, prod, "orders", "hooks", push={"maxConcurrency": 4, "ordered": True})
        assert again["config"]["push"]["secret"] == described["secret"]  # no second reveal
        assert (again["config"]["push"]["maxConcurrency"], again["config"]["push"]["url"]) == (
            4,
            push_receiver.url,
        )

    async def test_push_null_turns_it_off_and_plain_groups_show_null(self, client, prod, push_receiver):
        await make_topic(client, prod, "orders")
        assert (await put_push(client, prod, "orders", "plain", ackTimeout="30s"))["config"]["push"] is None
        await put_push(client, prod, "orders", "hooks", push={"url": push_receiver.url})
        assert (await put_push(client, prod, "orders", "hooks", push=None))["config"]["push"] is None
        r = await client.get("/v1/topics/orders/groups/hooks/push/attempts", headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")

    async def test_rotate_secret_answers_a_new_one_and_both_sign(self, client, prod, push_receiver):
        old = await push_group(client, prod, push_receiver)
        r = await client.post("/v1/topics/orders/groups/hooks/push/rotate-secret", headers=prod)
        assert r.status_code == 200, r.text
        new = r.json()["secret"]
        assert new.startswith("whsec_") and new != old
        await asyncio.sleep(1.5)  # the workers pick the new secret up within push_refresh_seconds
        await publish(client, prod, "orders", {"data": {"n": 1}})
        got = (await push_receiver.arrival(1))[0]
        assert len(got.headers["webhook-signature"].split(" ")) == 2
        assert (
            webhooks.verify(got.body, got.headers, old)
            == webhooks.verify(got.body, got.headers, new)
            == {"n": 1}
        )

    @pytest.mark.parametrize(
        ("push", "field"),
        [
            ({"url": "ftp://example.com/x"}, "push.url"),
            ({"url": "http://user:pw@127.0.0.1/x"}, "push.url"),
            ({"url": "not a url"}, "push.url"),
            ({"maxConcurrency": 4}, "push.url"),  # first set: url required
            ({"url": "http://127.0.0.1/x", "mode": "json"}, "push.mode"),
            ({"url": "http://127.0.0.1/x", "rate": 0}, "push.rate"),
            ({"url": "http://127.0.0.1/x", "rate": -1.5}, "push.rate"),
            ({"url": "http://127.0.0.1/x", "maxConcurrency": 0}, "push.maxConcurrency"),
            ({"url": "http://127.0.0.1/x", "timeout": "10 s"}, "push.timeout"),
            ({"url": "http://127.0.0.1/x", "secret": "whsec_x"}, "push.secret"),
        ],
    )
    async def test_bad_input_is_400_naming_the_field(self, client, prod, push, field):
        await make_topic(client, prod, "orders")
        r = await put_push(client, prod, "orders", "hooks", expect=400, push=push)
        error = assert_envelope(r, 400, "INVALID_REQUEST")
        assert field in {d["field"] for d in error["details"]}, error
        # nothing was set
        described = await client.get("/v1/topics/orders/groups/hooks", headers=prod)
        assert described.status_code == 404 or described.json()["config"]["push"] is None


class TestGroupActive:
    async def test_joining_a_push_group_is_409(self, client, prod, push_receiver):
        await push_group(client, prod, push_receiver)
        r = await client.post("/v1/topics/orders/groups/hooks/members", json={}, headers=prod)
        assert_envelope(r, 409, "GROUP_ACTIVE")

    async def test_setting_push_on_a_group_with_members_is_409(self, client, prod, push_receiver):
        await make_topic(client, prod, "orders")
        await join(client, prod, "orders", "workers")
        r = await put_push(client, prod, "orders", "workers", expect=409, push={"url": push_receiver.url})
        assert_envelope(r, 409, "GROUP_ACTIVE")

    async def test_a_push_group_can_be_deleted_while_its_workers_run(self, client, prod, push_receiver):
        await push_group(client, prod, push_receiver)
        await eventually(lambda: _consumers(client, prod))
        r = await client.delete("/v1/topics/orders/groups/hooks", headers=prod)
        assert r.status_code == 204, r.text


class TestLostLog:
    async def test_a_log_gone_under_its_topic_is_logged_once_not_at_every_retry(
        self, client, prod, push_receiver, deployment, caplog
    ):
        # The topic's row stays while its log is gone (a deletion half done, a log lost): the worker
        # meets TOPIC_NOT_FOUND at every pass until the manager stops it, which it does not here.
        await push_group(client, prod, push_receiver, partitions=1)
        await eventually(lambda: _consumers(client, prod))
        topic_id = (await client.get("/v1/topics/orders", headers=prod)).json()["id"]
        async with deployment.store.unit(readonly=True) as uow:
            (group_id,) = [t.group_id for t in await uow.push.targets() if t.topic_id == topic_id]
        caplog.set_level("WARNING", logger="queuecore.push")
        await deployment.app.state.services.log.delete_topic(topic_id)
        try:

            async def lines():
                return [
                    r
                    for r in caplog.records
                    if group_id in r.getMessage() and "TOPIC_NOT_FOUND" in r.getMessage()
                ]

            assert await eventually(lines, seconds=10)
            await asyncio.sleep(4.0)  # four retries at the former one a second, each logged
            assert len(await lines()) == 1, [r.getMessage() for r in await lines()]
        finally:
            assert (await client.delete("/v1/topics/orders", headers=prod)).status_code == 204


async def _consumers(client, headers, topic="orders", group="hooks"):
    r = await client.get(f"/v1/topics/{topic}/groups/{group}", headers=headers)
    return r.status_code == 200 and r.json()["consumers"] > 0


class TestDelivery:
    async def test_binary_mode_headers_and_signature(self, client, prod, push_receiver):
        secret = await push_group(client, prod, push_receiver)
        sent = await publish(
            client,
            prod,
            "orders",
            {"data": {"type": "order.created", "n": 7}, "key": "cust-1", "headers": {"a": "b"}},
        )
        got = (await push_receiver.arrival(1))[0]
        h = got.headers
        assert json.loads(got.body) == {"type": "order.created", "n": 7}
        assert h["content-type"] == "application/json"
        assert (h["ce-specversion"], h["ce-id"], h["ce-type"]) == ("1.0", sent["id"], "queuecore.message")
        assert h["ce-source"] == "/v1/topics/orders"
        assert h["ce-subject"] == f"{sent['partition']}/{sent['offset']}"
        assert h["ce-partitionkey"] == "cust-1"
        assert h["ce-time"] == sent["timestamp"]
        assert h["queuecore-attempt"] == "1"
        assert h["webhook-id"] == sent["id"]
        assert abs(int(h["webhook-timestamp"]) - time.time()) < 60
        # the SDK helper, the reference library and the CloudEvents SDK all read it the same
        assert webhooks.verify(got.body, h, secret) == {"type": "order.created", "n": 7}
        assert Webhook(secret).verify(got.body, h) == {"type": "order.created", "n": 7}
        event = from_http_event(HTTPMessage(h, got.body))
        assert (event.get_id(), event.get_source(), event.get_type()) == (
            sent["id"],
            "/v1/topics/orders",
            "queuecore.message",
        )
        assert event.get_subject() == f"{sent['partition']}/{sent['offset']}"
        assert event.get_extension("partitionkey") == "cust-1"
        assert event.get_data() == {"type": "order.created", "n": 7}
        with pytest.raises(WebhookVerificationError):
            webhooks.verify(got.body + b" ", h, secret)
        acked = await eventually(lambda: _lag_zero(client, prod))
        assert acked

    async def test_structured_mode(self, client, prod, push_receiver):
        secret = await push_group(client, prod, push_receiver, mode="structured")
        sent = await publish(client, prod, "orders", {"data": [1, "two", None]})
        got = (await push_receiver.arrival(1))[0]
        assert got.headers["content-type"] == "application/cloudevents+json"
        assert "ce-id" not in got.headers and "ce-partitionkey" not in got.headers
        envelope = json.loads(got.body)
        assert envelope["id"] == sent["id"] and envelope["data"] == [1, "two", None]
        assert envelope["specversion"] == "1.0" and envelope["datacontenttype"] == "application/json"
        event = from_http_event(HTTPMessage(got.headers, got.body))
        assert (event.get_id(), event.get_data()) == (sent["id"], [1, "two", None])
        assert webhooks.verify(got.body, got.headers, secret)["id"] == sent["id"]

    async def test_failures_retry_with_attempt_numbers_then_dead_letter(self, client, prod, push_receiver):
        push_receiver.default = Answer(500, body=b"upstream broke")
        await push_group(
            client,
            prod,
            push_receiver,
            partitions=1,
            config={"deadLetter": {"maxRetries": 2, "retryDelay": "0s"}},
        )
        sent = await publish(client, prod, "orders", {"data": {"n": 1}})
        got = await push_receiver.arrival(3)
        assert [d.headers["queuecore-attempt"] for d in got[:3]] == ["1", "2", "3"]

        async def dead():
            r = await client.get("/v1/topics/orders/groups/hooks/dlq", headers=prod)
            return r.json()["data"]

        letters = await eventually(dead)
        assert [(x["messageId"], x["retryCount"]) for x in letters] == [(sent["id"], 2)]
        assert letters[0]["reason"].startswith("HTTP 500")
        await asyncio.sleep(1.0)
        assert len(push_receiver.deliveries()) == 3  # nothing after the DLQ took it
        rows = await eventually(lambda: _attempts_at_least(client, prod, 3))
        assert [(r["attempt"], r["status"]) for r in rows[:3]] == [(3, 500), (2, 500), (1, 500)]
        assert rows[0]["error"] == "HTTP 500: upstream broke" and rows[0]["messageId"] == sent["id"]

    async def test_retry_after_on_429_sets_the_next_attempts_delay(self, client, prod, push_receiver):
        push_receiver.script = [Answer(429, {"Retry-After": "2"})]
        await push_group(client, prod, push_receiver, partitions=1)
        await publish(client, prod, "orders", {"data": {"n": 1}})
        first, second = (await push_receiver.arrival(2))[:2]
        assert second.at - first.at >= 1.9  # the rule acted: not before the server's Retry-After
        assert second.headers["queuecore-attempt"] == "2"
        rows = await eventually(lambda: _attempts_at_least(client, prod, 2))
        assert [r["status"] for r in rows[:2]] == [200, 429]

    async def test_redirects_are_not_followed(self, client, prod, push_receiver, second_receiver):
        push_receiver.script = [Answer(307, {"Location": second_receiver.url})]
        await push_group(client, prod, push_receiver, partitions=1)
        await publish(client, prod, "orders", {"data": {"n": 1}})
        await push_receiver.arrival(2)  # the redirect was a failed attempt; the retry came to the URL again
        assert second_receiver.deliveries() == []
        rows = await eventually(lambda: _attempts_at_least(client, prod, 2))
        assert [r["status"] for r in rows[:2]] == [200, 307]

    async def test_a_timeout_is_a_failed_attempt_without_status(self, client, prod, push_receiver):
        push_receiver.script = [Answer(200, delay=2.0)]
        await push_group(client, prod, push_receiver, partitions=1, timeout="300ms")
        await publish(client, prod, "orders", {"data": {"n": 1}})
        got = await push_receiver.arrival(2)
        assert [d.headers["queuecore-attempt"] for d in got[:2]] == ["1", "2"]
        rows = await eventually(lambda: _attempts_at_least(client, prod, 2))
        assert rows[-1]["status"] is None and "timed out" in rows[-1]["error"]
        assert rows[0]["status"] == 200

    async def test_a_connection_error_is_a_failed_attempt(self, client, prod, push_receiver):
        dead = PushReceiver()
        url = dead.url
        dead.server.server_close()  # nobody listens there now
        await make_topic(client, prod, "orders", partitions=1)
        await put_push(client, prod, "orders", "hooks", push={"url": url})
        await publish(client, prod, "orders", {"data": {"n": 1}})
        rows = await eventually(lambda: _attempts_at_least(client, prod, 1))
        assert rows[0]["status"] is None and rows[0]["error"]

    async def test_max_concurrency_is_what_the_receiver_sees(self, client, prod, push_receiver):
        push_receiver.default = Answer(200, delay=0.3)
        await push_group(client, prod, push_receiver, partitions=4, maxConcurrency=3)
        for n in range(24):
            await publish(client, prod, "orders", {"data": {"n": n}})
        await push_receiver.arrival(24, seconds=30)
        assert push_receiver.most_in_flight == 3  # reached, never passed

    async def test_ordered_delivers_one_at_a_time_per_partition_in_offset_order(
        self, client, prod, push_receiver
    ):
        push_receiver.default = Answer(200, delay=0.05)
        await push_group(client, prod, push_receiver, partitions=1, ordered=True, maxConcurrency=16)
        for n in range(15):
            await publish(client, prod, "orders", {"data": {"n": n}})
        got = await push_receiver.arrival(15, seconds=30)
        assert [json.loads(d.body)["n"] for d in got] == list(range(15))
        assert push_receiver.most_in_flight == 1

    async def test_a_post_longer_than_the_ack_timeout_is_not_sent_twice(self, client, prod, push_receiver):
        push_receiver.default = Answer(200, delay=2.5)
        await push_group(client, prod, push_receiver, partitions=1, timeout="5s", config={"ackTimeout": "1s"})
        await publish(client, prod, "orders", {"data": {"n": 1}})
        await push_receiver.arrival(1)
        assert await eventually(lambda: _lag_zero(client, prod))
        assert len(push_receiver.deliveries()) == 1  # the lease was extended while the POST ran

    async def test_push_null_stops_deliveries(self, client, prod, push_receiver):
        await push_group(client, prod, push_receiver)
        await publish(client, prod, "orders", {"data": {"n": 1}})
        await push_receiver.arrival(1)
        await put_push(client, prod, "orders", "hooks", push=None)
        await eventually(lambda: _no_consumers(client, prod))
        await publish(client, prod, "orders", {"data": {"n": 2}})
        await asyncio.sleep(1.5)
        assert len(push_receiver.deliveries()) == 1
        member = await join(client, prod, "orders", "hooks")  # an ordinary group again
        assert member.member_id.startswith("csr_")


class TestAttempts:
    async def test_newest_first_limited_and_checked(self, client, prod, push_receiver):
        await push_group(client, prod, push_receiver)
        ids = [(await publish(client, prod, "orders", {"data": {"n": n}}))["id"] for n in range(5)]
        await push_receiver.arrival(5)
        rows = await eventually(lambda: _attempts_at_least(client, prod, 5))
        assert {r["messageId"] for r in rows} == set(ids)
        assert set(rows[0]) == {"messageId", "attempt", "at", "status", "latencyMs", "error"}
        assert [r["at"] for r in rows] == sorted((r["at"] for r in rows), reverse=True)
        assert all(r["status"] == 200 and r["error"] is None and r["latencyMs"] >= 0 for r in rows)
        assert len(await attempts(client, prod, "orders", "hooks", limit=2)) == 2
        r = await client.get("/v1/topics/orders/groups/hooks/push/attempts?limit=0", headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        r = await client.get("/v1/topics/orders/groups/nope/push/attempts", headers=prod)
        assert_envelope(r, 404, "GROUP_NOT_FOUND")


async def _attempts_at_least(client, headers, count, topic="orders", group="hooks"):
    rows = await attempts(client, headers, topic, group)
    return rows if len(rows) >= count else None


async def _lag_zero(client, headers, topic="orders", group="hooks"):
    r = await client.get(f"/v1/topics/{topic}/groups/{group}", headers=headers)
    return all(p["lag"] == 0 for p in r.json()["partitions"])


async def _no_consumers(client, headers, topic="orders", group="hooks"):
    r = await client.get(f"/v1/topics/{topic}/groups/{group}", headers=headers)
    return r.json()["consumers"] == 0


class TestWebSocketOnAPushGroup:
    """Real servers (embedded and scale-out): a WebSocket consume of a push group is refused at the
    upgrade with 409 and the envelope, like a pull join."""

    async def test_the_upgrade_is_refused_with_409(self, api, push_receiver):
        import websockets
        from websockets.asyncio.client import connect

        topic = api.topic()
        api.ok("PUT", f"/v1/topics/{topic}/groups/g", {"push": {"url": push_receiver.url}})

        async def refused():
            try:
                ws = await connect(api.ws_url(topic), additional_headers=api.headers)
            except websockets.InvalidStatus as error:
                return error.response
            await ws.close()  # not yet seen by this node's refresh: try again
            return None

        response = await eventually(refused, seconds=10)
        assert response is not None and response.status_code == 409
        assert json.loads(response.body)["error"]["code"] == "GROUP_ACTIVE"
