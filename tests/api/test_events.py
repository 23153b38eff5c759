"""Server-Sent Events members (``GET …/groups/{group}/events``) on every backend, over a real socket:
welcome, messages with their ids, acks and nacks through the pull calls, flow control, keepalives,
rebalances, leaving on close, auth by key and token, live revocation and draining."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.broker import keys
from tests.api.sse_client import Stream, open_stream, served
from tests.api.test_errors import assert_envelope

pytestmark = pytest.mark.asyncio

BASE = "/v1/topics/orders/groups/workers"
MESSAGE_FIELDS = {
    "id",
    "topic",
    "partition",
    "offset",
    "key",
    "headers",
    "data",
    "timestamp",
    "attempt",
    "ackDeadline",
}


@pytest.fixture
async def http(deployment):
    async with served(deployment.app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


async def make_topic(http, headers, partitions=3, name="orders"):
    r = await http.post("/v1/topics", json={"name": name, "partitions": partitions}, headers=headers)
    assert r.status_code == 201, r.text


async def publish(http, headers, n, name="orders", key=None):
    ids = []
    for i in range(n):
        body = {"data": {"n": i}, **({"key": key} if key else {})}
        r = await http.post(f"/v1/topics/{name}/messages", json=body, headers=headers)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


async def settle(http, headers, welcome, call, **body):
    ident = {"memberId": welcome["memberId"], "generationId": welcome["generationId"]}
    r = await http.post(f"{BASE}/{call}", json={**ident, **body}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def welcome_of(stream: Stream) -> dict:
    first = await stream.next()
    assert first.event == "welcome"
    assert first.retry is not None
    return first.json()


class TestStreaming:
    async def test_welcome_then_messages_with_their_ids_as_a_poll_renders_them(self, http, prod):
        await make_topic(http, prod)
        async with open_stream(http, f"{BASE}/events", prod, startFrom="earliest") as stream:
            assert stream.response.headers["access-control-allow-origin"] == "*"
            assert stream.response.headers["cache-control"] == "no-cache"
            assert stream.response.headers["x-request-id"].startswith("req_")
            assert "ratelimit-limit" in stream.response.headers
            welcome = await welcome_of(stream)
            assert set(welcome) == {"memberId", "generationId", "assignments"}
            assert welcome["memberId"].startswith("csr_") and welcome["assignments"] == [0, 1, 2]
            published = await publish(http, prod, 3, key="same")  # one partition: in order
            got = await stream.messages(3)
        for event, message_id, n in zip(got, published, range(3), strict=True):
            message = event.json()
            assert event.id == message_id == message["id"]
            assert set(message) >= MESSAGE_FIELDS
            assert message["data"] == {"n": n} and message["attempt"] == 1 and message["key"] == "same"

    async def test_acks_go_through_the_pull_call_and_nothing_comes_again(self, http, prod, deployment):
        await make_topic(http, prod)
        async with open_stream(http, f"{BASE}/events", prod) as stream:
            welcome = await welcome_of(stream)
            ids = await publish(http, prod, 2)
            got = [e.id for e in await stream.messages(2)]
            assert sorted(got) == sorted(ids)
            acked = await settle(http, prod, welcome, "ack", ids=got)
            assert acked == {"ids": got, "failed": []}
        r = await http.get("/v1/topics/orders/groups/workers/offsets", headers=prod)
        assert r.status_code == 200, r.text
        assert sum(p["lag"] for p in r.json()["data"]) == 0

    async def test_a_nacked_message_is_delivered_again_with_the_next_attempt(self, http, prod):
        await make_topic(http, prod, partitions=1)
        async with open_stream(http, f"{BASE}/events", prod) as stream:
            welcome = await welcome_of(stream)
            (message_id,) = await publish(http, prod, 1)
            first = (await stream.messages(1))[0]
            assert first.id == message_id and first.json()["attempt"] == 1
            nacked = await settle(http, prod, welcome, "nack", id=message_id, reason="try later")
            assert nacked["ids"] == [message_id]
            again = (await stream.messages(1))[0]
        assert again.id == message_id and again.json()["attempt"] == 2

    async def test_the_stream_holds_at_most_max_in_flight_unacked(self, http, prod):
        await make_topic(http, prod, partitions=1)
        async with open_stream(http, f"{BASE}/events", prod, maxInFlight=2) as stream:
            welcome = await welcome_of(stream)
            ids = await publish(http, prod, 5)
            got = [e.id for e in await stream.messages(2)]
            assert got == ids[:2]
            # A correctness bound, not a speed claim: with the window full, nothing more is sent.
            with pytest.raises(TimeoutError):
                await stream.messages(1, timeout=2.5)
            await settle(http, prod, welcome, "ack", ids=[got[0]])
            assert [e.id for e in await stream.messages(1)] == [ids[2]]
            await settle(http, prod, welcome, "ack", ids=[got[1], ids[2]])
            assert [e.id for e in await stream.messages(2)] == ids[3:]

    async def test_keepalive_comments_while_idle(self, http, prod, deployment, monkeypatch):
        monkeypatch.setattr(deployment.settings, "sse_keepalive_seconds", 0.3)
        await make_topic(http, prod)
        async with open_stream(http, f"{BASE}/events", prod) as stream:
            await welcome_of(stream)
            comments = [await stream.next(5, comments=True) for _ in range(2)]
        assert [c.comment for c in comments] == ["keepalive", "keepalive"]


class TestMembership:
    async def test_closing_the_stream_leaves_and_its_partitions_go_to_another_member(self, http, prod):
        await make_topic(http, prod)
        async with open_stream(http, f"{BASE}/events", prod) as stream:
            welcome = await welcome_of(stream)
            r = await http.post(f"{BASE}/members", json={"startFrom": "earliest"}, headers=prod)
            other = r.json()
            assert r.status_code == 200 and len(other["assignments"]) < 3
            rebalance = await stream.until("rebalance")
            told = rebalance.json()
            assert told["memberId"] == welcome["memberId"]
            assert told["generationId"] > welcome["generationId"]
            assert sorted(told["assignments"] + other["assignments"]) == [0, 1, 2]
            # Acks carry the generation the stream told.
            ids = await publish(http, prod, 6)
            mine = [(await stream.messages(1))[0].id]
            assert mine[0] in ids
            ack = await settle(http, prod, told, "ack", ids=mine)
            assert ack["failed"] == []
        # The stream is closed: the member left, the other one owns every partition.
        for _ in range(100):
            r = await http.post(
                f"{BASE}/members/{other['memberId']}/heartbeat",
                json={"generationId": other["generationId"]},
                headers=prod,
            )
            assert r.status_code == 200, r.text
            if r.json()["assignments"] == [0, 1, 2]:
                break
            await asyncio.sleep(0.1)
        assert r.json() == {
            "generationId": r.json()["generationId"],
            "shouldRejoin": True,
            "assignments": [0, 1, 2],
        }
        r = await http.get("/v1/topics/orders/groups/workers", headers=prod)
        assert r.status_code == 200 and r.json()["consumers"] == 1, r.text

    async def test_a_member_that_leaves_by_the_call_ends_its_stream_and_never_joins_again(self, http, prod):
        # The SDKs' stop() closes the stream, then leaves by the call: that call may come before the
        # server has seen the stream close. Here the stream stays open: the leave alone must end it,
        # with no rebalance (a rejoin) and no member left in the group.
        await make_topic(http, prod)
        async with open_stream(http, f"{BASE}/events", prod) as stream:
            welcome = await welcome_of(stream)
            r = await http.delete(f"{BASE}/members/{welcome['memberId']}", headers=prod)
            assert r.status_code == 204, r.text
            await stream.ended(timeout=10)
        assert [e.event for e in stream.seen if e.event not in (None, "keepalive")] == ["welcome"]
        r = await http.get("/v1/topics/orders/groups/workers", headers=prod)
        assert r.status_code == 200 and r.json()["consumers"] == 0, r.text

    async def test_unacked_messages_of_a_closed_stream_go_to_the_next_member(self, http, prod):
        await make_topic(http, prod, partitions=1)
        async with open_stream(http, f"{BASE}/events", prod) as stream:
            await welcome_of(stream)
            (message_id,) = await publish(http, prod, 1)
            assert (await stream.messages(1))[0].id == message_id
        async with open_stream(http, f"{BASE}/events", prod) as stream:
            await welcome_of(stream)
            again = (await stream.messages(1))[0]
        assert again.id == message_id


class TestAuth:
    async def test_a_token_from_the_websocket_token_call_opens_a_stream(self, http, prod):
        await make_topic(http, prod)
        r = await http.post(
            "/v1/tokens/websocket", json={"topic": "orders", "group": "workers"}, headers=prod
        )
        assert r.status_code == 201, r.text
        async with open_stream(http, f"{BASE}/events", token=r.json()["token"]) as stream:
            assert (await welcome_of(stream))["assignments"] == [0, 1, 2]

    async def test_refusals_before_the_stream_are_envelopes(self, http, prod):
        await make_topic(http, prod)
        r = await http.post("/v1/tokens/websocket", json={"topic": "orders", "group": "other"}, headers=prod)
        other_group = r.json()["token"]
        cases = [
            ({}, {}, 401, "INVALID_API_KEY"),
            ({"Authorization": "Bearer pq_live_sk_" + "x" * 32}, {}, 401, "INVALID_API_KEY"),
            ({}, {"token": "not-a-token"}, 401, "INVALID_API_KEY"),
            ({}, {"token": other_group}, 401, "INVALID_API_KEY"),
            (prod, {"startFrom": "middle"}, 400, "INVALID_REQUEST"),
            (prod, {"maxInFlight": "0"}, 400, "INVALID_REQUEST"),
        ]
        for headers, params, status, code in cases:
            r = await http.get(
                f"{BASE}/events", headers={"Accept": "text/event-stream", **headers}, params=params
            )
            assert_envelope(r, status, code)
        r = await http.get("/v1/topics/missing/groups/workers/events", headers=prod)
        assert_envelope(r, 404, "TOPIC_NOT_FOUND")
        r = await http.get(f"{BASE}/events", headers=prod, params={"startFrom": "middle"})
        assert r.json()["error"]["details"][0]["field"] == "startFrom"

    async def test_streams_count_toward_the_keys_push_connection_cap(self, http, deployment):
        capped = await deployment.project(
            limits={"publish": 1000, "consume": 1000, "admin": 1000, "connections": 1}
        )
        headers = capped.headers("production")
        await make_topic(http, headers)
        async with open_stream(http, f"{BASE}/events", headers) as stream:
            await welcome_of(stream)
            r = await http.get(f"{BASE}/events", headers=headers)
            assert_envelope(r, 429, "RATE_LIMIT_EXCEEDED")
            assert r.headers["retry-after"] == "1"
        # Closed: the connection no longer counts.
        for _ in range(100):
            if deployment.app.state.services.connections.push_count(capped.key_ids["production"]) == 0:
                break
            await asyncio.sleep(0.05)
        async with open_stream(http, f"{BASE}/events", headers) as stream:
            await welcome_of(stream)


class TestEnding:
    async def test_a_revoked_key_gets_an_error_event_and_the_stream_ends(
        self, http, prod, tenant, deployment
    ):
        await make_topic(http, prod)
        async with open_stream(http, f"{BASE}/events", prod) as stream:
            await welcome_of(stream)
            async with deployment.store.unit() as uow:
                await keys.revoke_key(uow, tenant.key_ids["production"])
            error = await stream.until("error", timeout=5)
            await stream.ended(timeout=5)
        body = error.json()["error"]
        assert body["code"] == "INVALID_API_KEY" and body["status"] == 401

    async def test_draining_sends_draining_and_ends_the_stream(self, http, prod, deployment):
        await make_topic(http, prod)
        connections = deployment.app.state.services.connections
        try:
            async with open_stream(http, f"{BASE}/events", prod) as stream:
                await welcome_of(stream)
                assert connections.drain() >= 1
                drained = await stream.until("draining", timeout=5)
                await stream.ended(timeout=5)
        finally:
            # A real drain is the process's last act; this app serves the rest of the session's tests.
            connections.draining = False
        assert drained.json() == {}
        r = await http.get("/v1/topics/orders/groups/workers", headers=prod)
        assert r.status_code == 200 and r.json()["consumers"] == 0, r.text

    async def test_a_deleted_topic_ends_the_stream_with_an_error_event(self, http, prod):
        await make_topic(http, prod)
        async with open_stream(http, f"{BASE}/events", prod) as stream:
            await welcome_of(stream)
            assert (await http.delete("/v1/topics/orders", headers=prod)).status_code == 204
            error = await stream.until("error", timeout=10)
            await stream.ended(timeout=5)
        assert error.json()["error"]["code"] == "TOPIC_NOT_FOUND"
