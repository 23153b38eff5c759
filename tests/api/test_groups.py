"""Consumer group admin calls: config upsert and merge, list, describe with lag, delete, reset-offsets."""

from __future__ import annotations

import pytest

from tests.api.test_errors import assert_envelope
from tests.api.test_pull import configure, join, make_topic, publish

# The flow-control fields of a group config, unset (tests/api/test_flow.py tests them).
NO_FLOW = {"maxInFlight": None, "rate": None, "filter": None}


@pytest.fixture
async def topic(client, prod):
    await make_topic(client, prod)
    return "orders"


class TestConfig:
    async def test_put_creates_with_defaults_and_merges(self, client, prod, topic):
        group = await configure(client, prod, topic, "workers")
        assert group["config"] == {
            "ackTimeout": "30s",
            "sessionTimeout": "10s",
            "deadLetter": None,
            **NO_FLOW,
            "push": None,
        }
        assert group["name"] == "workers" and group["topic"] == "orders" and group["consumers"] == 0
        group = await configure(client, prod, topic, "workers", ackTimeout="2m")
        assert group["config"]["ackTimeout"] == "2m" and group["config"]["sessionTimeout"] == "10s"
        group = await configure(client, prod, topic, "workers", deadLetter={"maxRetries": 3})
        assert group["config"]["deadLetter"] == {
            "maxRetries": 3,
            "retryDelay": "30s",
            "alertThreshold": 100,
            "breaker": {"failureRate": 0.5, "minAttempts": 100, "window": "60s"},
        }
        assert group["config"]["ackTimeout"] == "2m"
        group = await configure(client, prod, topic, "workers", sessionTimeout="3s")
        assert group["config"]["deadLetter"]["maxRetries"] == 3
        group = await configure(client, prod, topic, "workers", deadLetter=None)
        assert group["config"] == {
            "ackTimeout": "2m",
            "sessionTimeout": "3s",
            "deadLetter": None,
            **NO_FLOW,
            "push": None,
        }
        described = await client.get("/v1/topics/orders/groups/workers", headers=prod)
        assert described.json()["config"] == group["config"]

    @pytest.mark.parametrize(
        "body",
        [
            {"ackTimeout": "500ms"},
            {"ackTimeout": "13h"},
            {"ackTimeout": 30},
            {"sessionTimeout": "1s"},
            {"sessionTimeout": "6m"},
            {"deadLetter": {"retryDelay": "2h"}},
            {"deadLetter": {"maxRetries": -1}},
            {"deadLetter": {"other": 1}},
            {"unknown": True},
        ],
    )
    async def test_bad_config_is_400(self, client, prod, topic, body):
        r = await client.put("/v1/topics/orders/groups/workers", json=body, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        assert_envelope(
            await client.get("/v1/topics/orders/groups/workers", headers=prod), 404, "GROUP_NOT_FOUND"
        )

    async def test_bad_group_name(self, client, prod, topic):
        r = await client.put("/v1/topics/orders/groups/-bad", json={}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")


class TestDescribe:
    async def test_unknown_group_and_topic(self, client, prod, topic):
        assert_envelope(
            await client.get("/v1/topics/orders/groups/nope", headers=prod), 404, "GROUP_NOT_FOUND"
        )
        assert_envelope(await client.get("/v1/topics/none/groups", headers=prod), 404, "TOPIC_NOT_FOUND")

    async def test_list_and_describe_show_consumers_owners_offsets_and_lag(self, client, prod, topic):
        await publish(client, prod, count=4, partition=0)
        member = await join(client, prod, startFrom="earliest")
        messages = await member.poll(max_messages=2)
        await member.ack([m["id"] for m in messages])
        await configure(client, prod, topic, "idle")
        listed = (await client.get("/v1/topics/orders/groups", headers=prod)).json()
        assert listed == {
            "data": [
                {"name": "idle", "consumers": 0, "lag": 4},
                {"name": "workers", "consumers": 1, "lag": 2},
            ]
        }
        group = (await client.get("/v1/topics/orders/groups/workers", headers=prod)).json()
        assert group["consumers"] == 1
        assert group["partitions"] == [
            {"id": 0, "consumer": member.member_id, "offset": 2, "lag": 2},
            {"id": 1, "consumer": member.member_id, "offset": 0, "lag": 0},
            {"id": 2, "consumer": member.member_id, "offset": 0, "lag": 0},
        ]

    async def test_groups_of_other_environments_are_invisible(self, client, prod, tenant, topic):
        await configure(client, prod, topic, "workers")
        dev = tenant.headers("development")
        await make_topic(client, dev)
        assert (await client.get("/v1/topics/orders/groups", headers=dev)).json() == {"data": []}


class TestDelete:
    async def test_active_group_is_409_then_deleted_after_leave(self, client, prod, topic):
        member = await join(client, prod)
        r = await client.delete("/v1/topics/orders/groups/workers", headers=prod)
        assert_envelope(r, 409, "GROUP_ACTIVE")
        assert (
            await client.delete(f"{member.base}/members/{member.member_id}", headers=prod)
        ).status_code == 204
        assert (await client.delete("/v1/topics/orders/groups/workers", headers=prod)).status_code == 204
        assert_envelope(
            await client.get("/v1/topics/orders/groups/workers", headers=prod), 404, "GROUP_NOT_FOUND"
        )
        assert_envelope(
            await client.delete("/v1/topics/orders/groups/workers", headers=prod), 404, "GROUP_NOT_FOUND"
        )

    async def test_topic_delete_takes_its_groups(self, client, prod, topic):
        await join(client, prod)
        assert (await client.delete("/v1/topics/orders", headers=prod)).status_code == 204
        await make_topic(client, prod)
        assert (await client.get("/v1/topics/orders/groups", headers=prod)).json() == {"data": []}


class TestResetOffsets:
    async def test_stopped_group_reset_to_earliest_latest_and_a_clamped_number(self, client, prod, topic):
        await publish(client, prod, count=5, partition=1)
        await configure(client, prod, topic, "workers")
        url = "/v1/topics/orders/groups/workers/reset-offsets"
        r = await client.post(url, json={"to": "latest"}, headers=prod)
        assert r.status_code == 200
        assert r.json() == {
            "data": [
                {"partition": 0, "current": 0},
                {"partition": 1, "current": 5},
                {"partition": 2, "current": 0},
            ]
        }
        r = await client.post(url, json={"to": 3}, headers=prod)
        assert [d["current"] for d in r.json()["data"]] == [0, 3, 0]
        r = await client.post(url, json={"to": "earliest"}, headers=prod)
        assert [d["current"] for d in r.json()["data"]] == [0, 0, 0]
        member = await join(client, prod, startFrom="latest")  # committed offsets exist: startFrom ignored
        assert len(await member.poll()) == 5

    async def test_active_group_is_409(self, client, prod, topic):
        await join(client, prod)
        r = await client.post(
            "/v1/topics/orders/groups/workers/reset-offsets", json={"to": "earliest"}, headers=prod
        )
        assert_envelope(r, 409, "GROUP_ACTIVE")

    @pytest.mark.parametrize("to", ["middle", -1, None, 1.5])
    async def test_bad_target(self, client, prod, topic, to):
        await configure(client, prod, topic, "workers")
        r = await client.post("/v1/topics/orders/groups/workers/reset-offsets", json={"to": to}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")

    async def test_unknown_group(self, client, prod, topic):
        r = await client.post(
            "/v1/topics/orders/groups/nope/reset-offsets", json={"to": "earliest"}, headers=prod
        )
        assert_envelope(r, 404, "GROUP_NOT_FOUND")
