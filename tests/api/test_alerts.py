"""Alert webhooks through the real app, on SQLite and Postgres: the endpoint calls, a test event delivered
to a real local receiver by the app's own dispatcher, and the DLQ depth alert, once per crossing."""

from __future__ import annotations

import asyncio
import json

from tests.api.test_dead_letters import nack, publish
from tests.api.test_errors import assert_envelope
from tests.api.test_pull import configure, join, make_topic
from tests.broker.test_alerts import docs_verify
from tests.fixtures.webhooks import Receiver


class TestEndpointCalls:
    async def test_set_show_update_delete(self, client, prod):
        r = await client.get("/v1/alerts/endpoint", headers=prod)
        assert_envelope(r, 404, "ALERT_ENDPOINT_NOT_FOUND")
        r = await client.put("/v1/alerts/endpoint", json={"url": "https://example.com/h"}, headers=prod)
        assert r.status_code == 200, r.text
        created = r.json()
        secret = created.pop("secret")
        assert secret.startswith("whsec_") and created["secretHint"] == secret[-4:]
        assert created["state"] == "closed" and created["url"] == "https://example.com/h"
        r = await client.get("/v1/alerts/endpoint", headers=prod)
        assert r.json() == created  # never the secret again
        assert secret not in r.text
        r = await client.put(
            "/v1/alerts/endpoint",
            json={"url": "https://example.org/h", "secret": "my-own-secret-0123456789"},
            headers=prod,
        )
        assert "secret" not in r.json() and r.json()["secretHint"] == "6789"
        r = await client.delete("/v1/alerts/endpoint", headers=prod)
        assert r.status_code == 204
        r = await client.delete("/v1/alerts/endpoint", headers=prod)
        assert_envelope(r, 404, "ALERT_ENDPOINT_NOT_FOUND")
        r = await client.post("/v1/alerts/endpoint/test", headers=prod)
        assert_envelope(r, 404, "ALERT_ENDPOINT_NOT_FOUND")

    async def test_bad_urls_and_secrets_are_refused(self, client, prod):
        for body in (
            {"url": "ftp://example.com"},
            {"url": "not a url"},
            {"url": "https://example.com", "secret": "short"},
            {},
        ):
            r = await client.put("/v1/alerts/endpoint", json=body, headers=prod)
            assert_envelope(r, 400, "INVALID_REQUEST")

    async def test_a_test_event_reaches_the_receiver_signed(self, client, prod, tenant, receiver: Receiver):
        r = await client.put(
            "/v1/alerts/endpoint", json={"url": receiver.url, "secret": "x" * 20}, headers=prod
        )
        assert r.status_code == 200, r.text
        r = await client.post("/v1/alerts/endpoint/test", headers=prod)
        assert r.status_code == 202, r.text
        event_id = r.json()["eventId"]
        [got] = await receiver.arrival("test")
        assert json.loads(got.body)["id"] == event_id
        assert docs_verify()("x" * 20, got.headers["QueueCore-Signature"], got.body)
        for _ in range(50):  # the attempt is recorded right after the answer
            r = await client.get("/v1/alerts/deliveries", headers=prod)
            if r.json()["data"]:
                break
            await asyncio.sleep(0.05)
        [attempt] = r.json()["data"]
        assert attempt["eventId"] == event_id and attempt["ok"] and attempt["statusCode"] == 200
        assert attempt["eventType"] == "test" and r.json()["nextCursor"] is None


class TestDlqAlert:
    async def test_fires_once_per_crossing_of_the_threshold(self, client, prod, receiver: Receiver):
        r = await client.put("/v1/alerts/endpoint", json={"url": receiver.url}, headers=prod)
        assert r.status_code == 200
        await make_topic(client, prod, partitions=1)
        await configure(client, prod, "orders", "workers", deadLetter={"maxRetries": 0, "alertThreshold": 2})
        ids = await publish(client, prod, "orders", [{"data": i} for i in range(5)])
        member = await join(client, prod, startFrom="earliest")
        assert len(await member.poll()) == 5
        for message_id in ids[:3]:  # depth 1, 2 (alert), 3 (no second alert)
            await nack(member, message_id)
        [alert] = await receiver.arrival("dlq.threshold_reached")
        event = json.loads(alert.body)
        assert event["data"] == {"topic": "orders", "group": "workers", "depth": 2, "threshold": 2}
        # Below the threshold again (replays): re-armed; the next crossing alerts once more.
        for message_id in ids[:2]:
            r = await client.post(f"{member.base}/dlq/replay", json={"messageId": message_id}, headers=prod)
            assert r.status_code == 200
        await nack(member, ids[3])  # depth 2 again: a second crossing
        await nack(member, ids[4])  # depth 3: still the same crossing
        alerts = await receiver.arrival("dlq.threshold_reached", 2)
        await asyncio.sleep(1.2)  # a third would have been sent by now (the dispatcher polls every 0.5 s)
        assert len(receiver.of_type("dlq.threshold_reached")) == 2
        assert json.loads(alerts[1].body)["data"]["depth"] == 2
