"""Topic calls through the real app, on SQLite and on Postgres."""

from __future__ import annotations

import json
import secrets

import pytest

from app.broker.topics import sweep_orphan_logs
from app.stores.log.protocol import TopicLogConfig
from tests.fixtures.factories import ProjectKeys


def _error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert body["code"] == code
    assert body["status"] == status
    assert body["requestId"] == response.headers["x-request-id"]
    return body


class TestCreateTopic:
    async def test_defaults(self, client, prod, deployment):
        response = await client.post("/v1/topics", json={"name": "order.events"}, headers=prod)
        assert response.status_code == 201, response.text
        topic = response.json()
        assert topic["id"].startswith("top_")
        assert topic["name"] == "order.events"
        assert topic["partitions"] == 3
        assert topic["retention"] == "7d"
        assert topic["delivery"] == "exactly-once"
        assert topic["replicas"] == deployment.default_replicas  # 1 on the local engine, 3 on JetStream
        assert topic["status"] == "active"
        assert topic["createdAt"].endswith("Z") and len(topic["createdAt"]) == 24

    async def test_docs_example(self, client, prod):
        body = {"name": "order.events", "retention": "30d", "delivery": "exactly-once", "partitions": 6}
        response = await client.post("/v1/topics", json=body, headers=prod)
        assert response.status_code == 201
        assert {k: response.json()[k] for k in ("name", "partitions", "status")} == {
            "name": "order.events",
            "partitions": 6,
            "status": "active",
        }

    async def test_duplicate_name_is_409(self, client, prod):
        assert (await client.post("/v1/topics", json={"name": "dup"}, headers=prod)).status_code == 201
        response = await client.post("/v1/topics", json={"name": "dup", "partitions": 5}, headers=prod)
        _error(response, 409, "TOPIC_ALREADY_EXISTS")
        # The loser changed nothing.
        described = (await client.get("/v1/topics/dup", headers=prod)).json()
        assert described["partitions"] == 3

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"name": ""}, "name"),
            ({"name": "Upper"}, "name"),
            ({"name": ".leading-dot"}, "name"),
            ({"name": "a" * 250}, "name"),
            ({"name": "ünïcode"}, "name"),
            ({"name": "has space"}, "name"),
            ({"name": "t", "retention": "0d"}, "retention"),
            ({"name": "t", "retention": "366d"}, "retention"),
            ({"name": "t", "retention": "30s"}, "retention"),
            ({"name": "t", "retention": "7"}, "retention"),
            ({"name": "t", "delivery": "at-most-once"}, "delivery"),
            ({"name": "t", "partitions": 0}, "partitions"),
            ({"name": "t", "partitions": 257}, "partitions"),
            ({"name": "t", "partitions": "3"}, "partitions"),
            ({"name": "t", "partitions": 3.5}, "partitions"),
            ({"name": "t", "partitions": True}, "partitions"),
            ({"name": "t", "replicas": 2}, "replicas"),
            ({"name": "t", "replicas": 0}, "replicas"),
            ({"name": "t", "replicas": -1}, "replicas"),
            ({"name": "t", "replicas": 7}, "replicas"),
            ({"name": "t", "replicas": "3"}, "replicas"),
            ({"name": "t", "replicas": 3.0}, "replicas"),
            ({"name": "t", "replicas": True}, "replicas"),
            ({"name": "t", "replicas": [1]}, "replicas"),
            ({"name": 7}, "name"),
            ({"name": "t", "colour": "blue"}, "colour"),
            ({}, "name"),
        ],
    )
    async def test_invalid_input_is_400_with_details(self, client, prod, body, field):
        response = await client.post("/v1/topics", json=body, headers=prod)
        error = _error(response, 400, "INVALID_REQUEST")
        assert any(d["field"] == field for d in error["details"]), error
        listed = (await client.get("/v1/topics", headers=prod)).json()["data"]
        assert listed == []

    @pytest.mark.parametrize("replicas", [3, 5, 2, 0])
    async def test_any_count_but_one_on_the_local_engine_says_it_keeps_one_copy(
        self, client, prod, replicas, deployment
    ):
        if not deployment.local_engine:
            pytest.skip("the local engine's rule; JetStream's is tested below")
        response = await client.post("/v1/topics", json={"name": "r", "replicas": replicas}, headers=prod)
        error = _error(response, 400, "INVALID_REQUEST")
        assert "keeps one copy" in error["message"], error
        assert error["details"] == [
            {
                "field": "replicas",
                "issue": "this server's log engine keeps one copy of each message, so replicas must be 1",
            }
        ]
        assert (await client.get("/v1/topics", headers=prod)).json()["data"] == []

    async def test_on_jetstream_replicas_beyond_the_cluster_are_400(self, client, prod, deployment):
        if deployment.local_engine:
            pytest.skip("JetStream's rule")
        three = await client.post("/v1/topics", json={"name": "r3", "replicas": 3}, headers=prod)
        assert three.status_code == 201 and three.json()["replicas"] == 3
        published = await client.post("/v1/topics/r3/messages", json={"data": 1}, headers=prod)
        assert published.json()["durability"] == "replicated:3"
        # The test cluster has three servers: five copies cannot be placed, and nothing is created.
        error = _error(
            await client.post("/v1/topics", json={"name": "r5", "replicas": 5}, headers=prod),
            400,
            "INVALID_REQUEST",
        )
        assert error["details"][0]["field"] == "replicas" and "5 replicas" in error["details"][0]["issue"]
        _error(await client.get("/v1/topics/r5", headers=prod), 404, "TOPIC_NOT_FOUND")
        # A count outside 1, 3 and 5 is refused before the engine is asked.
        error = _error(
            await client.post("/v1/topics", json={"name": "r2", "replicas": 2}, headers=prod),
            400,
            "INVALID_REQUEST",
        )
        assert error["details"] == [{"field": "replicas", "issue": "must be 1, 3 or 5"}]

    async def test_one_replica_asked_for_is_shown_everywhere(self, client, prod, deployment):
        created = await client.post("/v1/topics", json={"name": "r1", "replicas": 1}, headers=prod)
        assert created.status_code == 201, created.text
        assert created.json()["replicas"] == 1
        assert (await client.get("/v1/topics/r1", headers=prod)).json()["replicas"] == 1
        [listed] = (await client.get("/v1/topics", headers=prod)).json()["data"]
        assert listed["replicas"] == 1
        patched = await client.patch("/v1/topics/r1", json={"retention": "1d"}, headers=prod)
        assert patched.json()["replicas"] == 1
        published = await client.post("/v1/topics/r1/messages", json={"data": 1}, headers=prod)
        assert published.json()["durability"] == deployment.durability(1)
        batch = await client.post(
            "/v1/topics/r1/messages/batch", json={"messages": [{"data": 1}]}, headers=prod
        )
        assert batch.json()["durability"] == deployment.durability(1)

    async def test_boundaries_accepted(self, client, prod):
        for body in (
            {"name": "a" * 249, "retention": "1m", "partitions": 1},
            {"name": "0-x_y.z", "retention": "365d", "partitions": 256, "delivery": "at-least-once"},
            {"name": "h", "retention": "24h"},
        ):
            response = await client.post("/v1/topics", json=body, headers=prod)
            assert response.status_code == 201, response.text


class TestListTopics:
    async def test_pages_with_cursor(self, client, prod):
        names = [f"t{i:02d}" for i in range(7)]
        for name in reversed(names):
            assert (await client.post("/v1/topics", json={"name": name}, headers=prod)).status_code == 201
        seen, cursor = [], None
        while True:
            params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
            page = (await client.get("/v1/topics", params=params, headers=prod)).json()
            seen += [t["name"] for t in page["data"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert seen == names

    async def test_bad_cursor_and_limit(self, client, prod):
        _error(await client.get("/v1/topics", params={"cursor": "!!!"}, headers=prod), 400, "INVALID_REQUEST")
        _error(await client.get("/v1/topics", params={"limit": 0}, headers=prod), 400, "INVALID_REQUEST")
        _error(await client.get("/v1/topics", params={"limit": "x"}, headers=prod), 400, "INVALID_REQUEST")

    async def test_environments_are_isolated(self, client, tenant: ProjectKeys, deployment):
        dev, prod = tenant.headers("development"), tenant.headers("production")
        assert (await client.post("/v1/topics", json={"name": "shared.name"}, headers=dev)).status_code == 201
        assert (await client.get("/v1/topics", headers=prod)).json()["data"] == []
        _error(await client.get("/v1/topics/shared.name", headers=prod), 404, "TOPIC_NOT_FOUND")
        # The same name in another environment is another topic.
        assert (
            await client.post("/v1/topics", json={"name": "shared.name"}, headers=prod)
        ).status_code == 201
        other = await deployment.project()
        assert (await client.get("/v1/topics", headers=other.headers("development"))).json()["data"] == []


class TestDescribeTopic:
    async def test_partition_details_from_engine(self, client, prod):
        await client.post("/v1/topics", json={"name": "d", "partitions": 4}, headers=prod)
        topic = (await client.get("/v1/topics/d", headers=prod)).json()
        assert [p["id"] for p in topic["partitionDetails"]] == [0, 1, 2, 3]
        for p in topic["partitionDetails"]:
            assert p["earliestOffset"] == 0 and p["latestOffset"] == 0 and p["messages"] == 0
            assert p["bytes"] >= 0

    async def test_where_each_partitions_copies_live(self, client, prod, deployment):
        await client.post("/v1/topics", json={"name": "placed", "partitions": 2}, headers=prod)
        topic = (await client.get("/v1/topics/placed", headers=prod)).json()
        for p in topic["partitionDetails"]:
            replicas = p["replicas"]
            assert len(replicas) == topic["replicas"]
            assert replicas[0]["leader"] and not any(r["leader"] for r in replicas[1:])
            assert len({r["server"] for r in replicas}) == len(replicas)  # one copy per server
            if deployment.backend == "jetstream":
                # The test cluster's nodes n0..n2, one per zone (tests/infra/test_nats_zones.py): a zone
                # each, from the servers' az:<zone> tags.
                assert {r["server"] for r in replicas} == {"n0", "n1", "n2"}
                assert sorted(r["zone"] for r in replicas) == ["zone-a", "zone-b", "zone-c"]
            else:
                # The local engine's one copy: no zone unless QUEUECORE_LOG__ZONE says one.
                assert [r["zone"] for r in replicas] == [None]
            assert all(r["current"] for r in replicas[:1])
            assert replicas[0]["lag"] == 0
            assert all(r["lag"] is None or r["lag"] >= 0 for r in replicas)

    async def test_missing_topic(self, client, prod):
        error = _error(await client.get("/v1/topics/user.events", headers=prod), 404, "TOPIC_NOT_FOUND")
        assert error["message"] == "The topic 'user.events' does not exist in the current environment."


class TestUpdateTopic:
    async def test_increase_partitions_and_retention(self, client, prod):
        await client.post("/v1/topics", json={"name": "u"}, headers=prod)
        response = await client.patch(
            "/v1/topics/u", json={"partitions": 5, "retention": "12h"}, headers=prod
        )
        assert response.status_code == 200, response.text
        assert response.json()["partitions"] == 5 and response.json()["retention"] == "12h"
        described = (await client.get("/v1/topics/u", headers=prod)).json()
        assert len(described["partitionDetails"]) == 5

    async def test_decrease_is_400(self, client, prod):
        await client.post("/v1/topics", json={"name": "u2", "partitions": 4}, headers=prod)
        _error(
            await client.patch("/v1/topics/u2", json={"partitions": 2}, headers=prod), 400, "INVALID_REQUEST"
        )
        assert (await client.get("/v1/topics/u2", headers=prod)).json()["partitions"] == 4

    async def test_bad_retention_changes_nothing(self, client, prod):
        await client.post("/v1/topics", json={"name": "u3"}, headers=prod)
        body = {"partitions": 6, "retention": "forever"}
        _error(await client.patch("/v1/topics/u3", json=body, headers=prod), 400, "INVALID_REQUEST")
        topic = (await client.get("/v1/topics/u3", headers=prod)).json()
        assert (topic["partitions"], topic["retention"]) == (3, "7d")

    async def test_unknown_field_and_missing_topic(self, client, prod):
        _error(
            await client.patch("/v1/topics/nope", json={"partitions": 5}, headers=prod),
            404,
            "TOPIC_NOT_FOUND",
        )
        await client.post("/v1/topics", json={"name": "u4"}, headers=prod)
        error = _error(
            await client.patch("/v1/topics/u4", json={"colour": "blue"}, headers=prod), 400, "INVALID_REQUEST"
        )
        assert error["details"] == [{"field": "colour", "issue": "unknown field"}]

    @pytest.mark.parametrize(
        ("body", "field", "says"),
        [
            ({"delivery": "at-least-once"}, "delivery", "cannot be changed after the topic is created"),
            ({"name": "renamed", "retention": "1d"}, "name", "cannot be renamed"),
            ({"replicas": 1}, "replicas", "cannot be changed after the topic is created"),
            ({"replicas": 3, "partitions": 6}, "replicas", "cannot be changed after the topic is created"),
        ],
    )
    async def test_fixed_fields_are_said_to_be_fixed(self, client, prod, body, field, says, deployment):
        await client.post("/v1/topics", json={"name": "u5"}, headers=prod)
        error = _error(await client.patch("/v1/topics/u5", json=body, headers=prod), 400, "INVALID_REQUEST")
        assert error["details"][0]["field"] == field and says in error["message"]
        topic = (await client.get("/v1/topics/u5", headers=prod)).json()
        # nothing changed
        assert (topic["delivery"], topic["retention"], topic["partitions"], topic["replicas"]) == (
            "exactly-once",
            "7d",
            3,
            deployment.default_replicas,
        )


class TestDeleteTopic:
    async def test_delete_removes_topic_and_files(self, client, prod, deployment):
        created = (await client.post("/v1/topics", json={"name": "gone"}, headers=prod)).json()
        log = deployment.app.state.services.log
        assert created["id"] in await log.topic_ids()
        if deployment.local_engine:
            assert any(p.name.startswith(created["id"]) for p in deployment.settings.log_dir.iterdir())
        response = await client.delete("/v1/topics/gone", headers=prod)
        assert response.status_code == 204 and response.content == b""
        _error(await client.get("/v1/topics/gone", headers=prod), 404, "TOPIC_NOT_FOUND")
        assert created["id"] not in await log.topic_ids()
        if deployment.local_engine:
            assert not any(p.name.startswith(created["id"]) for p in deployment.settings.log_dir.iterdir())
        _error(await client.delete("/v1/topics/gone", headers=prod), 404, "TOPIC_NOT_FOUND")
        # The name is free again, for a new, empty topic.
        again = (await client.post("/v1/topics", json={"name": "gone"}, headers=prod)).json()
        assert again["id"] != created["id"]


class TestOrphanSweep:
    async def test_startup_removes_logs_of_deleted_topics(self, deployment, tmp_path):

        log = deployment.app.state.services.log
        await log.create_topic("top_0000000000orphan", 2, TopicLogConfig())
        assert "top_0000000000orphan" in await log.topic_ids()
        async with deployment.store.unit() as uow:
            swept = await sweep_orphan_logs(uow, log, await log.topic_ids())
        assert swept >= 1
        assert "top_0000000000orphan" not in await log.topic_ids()
        assert "__usage" in await log.topic_ids()  # internal logs are never swept


class TestDurableBeforeTheAnswer:
    """A 2xx is sent only once its metadata write is committed: a client acting on the answer at once
    (create, then publish) must find what it created, on any connection of any node."""

    async def test_a_created_topic_is_committed_when_the_answer_starts(self, deployment, tenant):
        from app.broker.errors import TopicNotFound
        from app.broker.topics import Scope, get_topic

        name = f"durable.{secrets.token_hex(4)}"
        seen_at_answer: list[bool] = []
        body = json.dumps({"name": name}).encode()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/topics",
            "raw_path": b"/v1/topics",
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"authorization", f"Bearer {tenant.keys['production']}".encode()),
                (b"content-type", b"application/json"),
            ],
            "client": ("127.0.0.1", 1),
            "server": ("queuecore.test", 80),
            "state": {},
        }
        sent = False

        async def receive():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                assert message["status"] == 201
                async with deployment.store.unit(readonly=True) as uow:  # another connection
                    try:
                        await get_topic(uow, Scope(tenant.project_id, "production"), name)
                        seen_at_answer.append(True)
                    except TopicNotFound:
                        seen_at_answer.append(False)

        await deployment.app(scope, receive, send)
        assert seen_at_answer == [True]
