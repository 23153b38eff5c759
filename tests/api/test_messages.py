"""Publishing and reading through the real app and the real log engine."""

from __future__ import annotations

import asyncio
import json

import pytest

from app.broker.partitioner import partition_for_key
from tests.api.test_errors import assert_envelope


@pytest.fixture
async def topic(client, prod):
    response = await client.post("/v1/topics", json={"name": "order.events", "partitions": 3}, headers=prod)
    assert response.status_code == 201
    return response.json()


async def read_all(client, headers, name, partition, **params):
    response = await client.get(
        f"/v1/topics/{name}/partitions/{partition}/messages", params=params, headers=headers
    )
    assert response.status_code == 200, response.text
    return response.json()


class TestPublish:
    async def test_docs_example(self, client, prod, topic, deployment):
        data = {"type": "order.created", "orderId": "ord_92jf8x", "amount": 9900, "currency": "usd"}
        response = await client.post("/v1/topics/order.events/messages", json={"data": data}, headers=prod)
        assert response.status_code == 201, response.text
        body = response.json()
        assert set(body) == {
            "id",
            "offset",
            "partition",
            "timestamp",
            "deliverAt",
            "expiresAt",
            "latency",
            "durability",
        }
        assert body["deliverAt"] is None and body["expiresAt"] is None
        assert body["id"].startswith("msg_") and body["durability"] == deployment.durability()
        assert body["offset"] == 0 and 0 <= body["partition"] < 3
        assert isinstance(body["latency"], int) and body["timestamp"].endswith("Z")
        assert "Idempotent-Replayed" not in response.headers
        fetched = await client.get(f"/v1/topics/order.events/messages/{body['id']}", headers=prod)
        assert fetched.status_code == 200
        assert fetched.json() == {
            "id": body["id"],
            "topic": "order.events",
            "partition": body["partition"],
            "offset": 0,
            "key": None,
            "headers": {},
            "data": data,
            "timestamp": body["timestamp"],
            "deliverAt": None,
            "expiresAt": None,
        }

    async def test_key_routes_like_kafka_and_keeps_order(self, client, prod, topic):
        offsets = []
        for i in range(5):
            r = await client.post(
                "/v1/topics/order.events/messages",
                json={"data": i, "key": "customer-7", "headers": {"h": "v"}},
                headers=prod,
            )
            assert r.json()["partition"] == partition_for_key(b"customer-7", 3)
            offsets.append(r.json()["offset"])
        assert offsets == sorted(offsets) == list(range(offsets[0], offsets[0] + 5))
        page = await read_all(client, prod, "order.events", partition_for_key(b"customer-7", 3))
        assert [m["data"] for m in page["data"]] == [0, 1, 2, 3, 4]
        assert page["data"][0]["key"] == "customer-7" and page["data"][0]["headers"] == {"h": "v"}

    async def test_explicit_partition_and_null_data(self, client, prod, topic):
        r = await client.post(
            "/v1/topics/order.events/messages", json={"data": None, "partition": 2}, headers=prod
        )
        assert r.status_code == 201 and r.json()["partition"] == 2
        page = await read_all(client, prod, "order.events", 2)
        assert page["data"][-1]["data"] is None

    async def test_keyless_spread_over_partitions(self, client, prod, topic):
        seen = set()
        for i in range(6):
            seen.add(
                (
                    await client.post("/v1/topics/order.events/messages", json={"data": i}, headers=prod)
                ).json()["partition"]
            )
        assert seen == {0, 1, 2}

    @pytest.mark.parametrize(
        "body",
        [
            {},
            {"key": "k"},
            {"data": 1, "partition": 3},
            {"data": 1, "partition": -1},
            {"data": 1, "partition": "1"},
            {"data": 1, "key": 5},
            {"data": 1, "headers": {"a": 1}},
            {"data": 1, "headers": ["x"]},
            {"data": 1, "extra": True},
            [1, 2],
            "text",
        ],
    )
    async def test_bad_message_is_400_and_appends_nothing(self, client, prod, topic, body):
        r = await client.post("/v1/topics/order.events/messages", json=body, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        described = (await client.get("/v1/topics/order.events", headers=prod)).json()
        assert all(p["latestOffset"] == 0 for p in described["partitionDetails"])

    @pytest.mark.parametrize("path", ["messages", "messages/batch"])
    async def test_the_bare_message_as_body_gets_a_hint_about_data(self, client, prod, topic, path):
        message = {"orderId": "ord_123", "amount": 99.99}  # the docs' message, without {"data": ...}
        body = message if path == "messages" else {"messages": [message]}
        r = await client.post(f"/v1/topics/order.events/{path}", json=body, headers=prod)
        error = assert_envelope(r, 400, "INVALID_REQUEST")
        assert error["details"][0]["field"].endswith("amount")
        assert '{"data": <your JSON>}' in error["message"]

    async def test_over_256_kib_is_413(self, client, prod, topic):
        r = await client.post(
            "/v1/topics/order.events/messages", json={"data": "x" * (256 * 1024)}, headers=prod
        )
        assert_envelope(r, 413, "PAYLOAD_TOO_LARGE")
        ok = await client.post(
            "/v1/topics/order.events/messages", json={"data": "x" * (256 * 1024 - 2)}, headers=prod
        )
        assert ok.status_code == 201

    async def test_unknown_topic(self, client, prod):
        r = await client.post("/v1/topics/user.events/messages", json={"data": 1}, headers=prod)
        assert_envelope(r, 404, "TOPIC_NOT_FOUND")


class TestBatch:
    async def test_docs_example(self, client, prod, topic, deployment):
        batch = [
            {"type": "order.created", "orderId": "ord_a1b2c3", "amount": 4500},
            {"type": "order.created", "orderId": "ord_d4e5f6", "amount": 12000},
            {"type": "order.updated", "orderId": "ord_g7h8i9", "status": "shipped"},
        ]
        r = await client.post(
            "/v1/topics/order.events/messages/batch",
            json={"messages": [{"data": d} for d in batch]},
            headers=prod,
        )
        assert r.status_code == 201, r.text
        body = r.json()
        assert (
            body["count"] == 3
            and isinstance(body["latency"], int)
            and body["durability"] == deployment.durability()
        )
        assert len({m["id"] for m in body["messages"]}) == 3

    async def test_one_bad_item_refuses_whole_batch(self, client, prod, topic):
        items = [{"data": i} for i in range(10)] + [{"data": "x" * (300 * 1024)}]
        r = await client.post(
            "/v1/topics/order.events/messages/batch", json={"messages": items}, headers=prod
        )
        assert_envelope(r, 413, "PAYLOAD_TOO_LARGE")
        items[-1] = {"data": 1, "partition": 9}
        r = await client.post(
            "/v1/topics/order.events/messages/batch", json={"messages": items}, headers=prod
        )
        assert any(
            d["field"] == "messages[10].partition"
            for d in assert_envelope(r, 400, "INVALID_REQUEST")["details"]
        )
        described = (await client.get("/v1/topics/order.events", headers=prod)).json()
        assert sum(p["messages"] for p in described["partitionDetails"]) == 0

    @pytest.mark.parametrize("count", [0, 1001])
    async def test_size_bounds(self, client, prod, topic, count):
        r = await client.post(
            "/v1/topics/order.events/messages/batch", json={"messages": [{"data": 1}] * count}, headers=prod
        )
        assert_envelope(r, 400, "INVALID_REQUEST")

    async def test_thousand_messages(self, client, prod, topic):
        r = await client.post(
            "/v1/topics/order.events/messages/batch",
            json={"messages": [{"data": {"n": i}, "key": f"k{i}"} for i in range(1000)]},
            headers=prod,
        )
        assert r.status_code == 201 and r.json()["count"] == 1000
        described = (await client.get("/v1/topics/order.events", headers=prod)).json()
        assert sum(p["messages"] for p in described["partitionDetails"]) == 1000

    async def test_batch_is_not_a_message_id(self, client, prod, topic):
        r = await client.get("/v1/topics/order.events/messages/batch", headers=prod)
        assert_envelope(r, 405, "METHOD_NOT_ALLOWED")


class TestIdempotency:
    async def test_header_replays_original(self, client, prod, topic):
        headers = prod | {"Idempotency-Key": "order-123"}
        first = await client.post("/v1/topics/order.events/messages", json={"data": 1}, headers=headers)
        again = await client.post("/v1/topics/order.events/messages", json={"data": "other"}, headers=headers)
        assert first.status_code == again.status_code == 201
        assert again.json() == first.json()
        assert again.headers["Idempotent-Replayed"] == "true"
        described = (await client.get("/v1/topics/order.events", headers=prod)).json()
        assert sum(p["messages"] for p in described["partitionDetails"]) == 1

    async def test_concurrent_duplicates_append_once(self, client, prod, topic):
        headers = prod | {"Idempotency-Key": "race"}
        answers = await asyncio.gather(
            *(
                client.post("/v1/topics/order.events/messages", json={"data": i}, headers=headers)
                for i in range(20)
            )
        )
        assert len({a.json()["id"] for a in answers}) == 1
        assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == 19

    async def test_batch_items_share_namespace_with_header(self, client, prod, topic):
        single = await client.post(
            "/v1/topics/order.events/messages", json={"data": 0}, headers=prod | {"Idempotency-Key": "a"}
        )
        batch = {
            "messages": [
                {"data": 1, "idempotencyKey": "a"},
                {"data": 2, "idempotencyKey": "b"},
                {"data": 3},
                {"data": 4, "idempotencyKey": "b"},
            ]
        }
        r = await client.post("/v1/topics/order.events/messages/batch", json=batch, headers=prod)
        assert r.status_code == 201 and "Idempotent-Replayed" not in r.headers
        items = r.json()["messages"]
        assert items[0]["id"] == single.json()["id"] and items[0]["replayed"] is True
        assert "replayed" not in items[1] and "replayed" not in items[2]
        assert items[3]["id"] == items[1]["id"] and items[3]["replayed"] is True
        again = await client.post(
            "/v1/topics/order.events/messages/batch",
            json={"messages": [{"data": 9, "idempotencyKey": "a"}, {"data": 9, "idempotencyKey": "b"}]},
            headers=prod,
        )
        assert again.headers["Idempotent-Replayed"] == "true"
        described = (await client.get("/v1/topics/order.events", headers=prod)).json()
        assert sum(p["messages"] for p in described["partitionDetails"]) == 3

    async def test_keys_are_per_topic(self, client, prod, topic):
        await client.post("/v1/topics", json={"name": "other"}, headers=prod)
        h = prod | {"Idempotency-Key": "same"}
        a = await client.post("/v1/topics/order.events/messages", json={"data": 1}, headers=h)
        b = await client.post("/v1/topics/other/messages", json={"data": 1}, headers=h)
        assert "Idempotent-Replayed" not in b.headers and a.json()["id"] != b.json()["id"]

    async def test_bad_key(self, client, prod, topic):
        r = await client.post(
            "/v1/topics/order.events/messages",
            json={"data": 1},
            headers=prod | {"Idempotency-Key": "k" * 300},
        )
        assert_envelope(r, 400, "INVALID_REQUEST")


class TestStreamRead:
    async def test_offsets_limit_and_next(self, client, prod, topic):
        await client.post(
            "/v1/topics/order.events/messages/batch",
            json={"messages": [{"data": i, "partition": 1} for i in range(10)]},
            headers=prod,
        )
        page = await read_all(client, prod, "order.events", 1, fromOffset=3, limit=4)
        assert [m["offset"] for m in page["data"]] == [3, 4, 5, 6]
        assert page["nextOffset"] == 7 and page["earliestOffset"] == 0
        rest = await read_all(client, prod, "order.events", 1, fromOffset=page["nextOffset"])
        assert [m["data"] for m in rest["data"]] == [7, 8, 9] and rest["nextOffset"] == 10
        empty = await read_all(client, prod, "order.events", 1, fromOffset=10)
        assert empty["data"] == [] and empty["nextOffset"] == 10

    async def test_past_the_end_is_refused_with_both_bounds_and_a_follower_never_skips(
        self, client, prod, topic
    ):
        await client.post(
            "/v1/topics/order.events/messages/batch",
            json={"messages": [{"data": i, "partition": 2} for i in range(3)]},
            headers=prod,
        )
        r = await client.get(
            "/v1/topics/order.events/partitions/2/messages", params={"fromOffset": 999999}, headers=prod
        )
        [detail] = assert_envelope(r, 400, "OFFSET_OUT_OF_RANGE")["details"]
        assert detail["field"] == "fromOffset"
        assert (detail["earliestOffset"], detail["latestOffset"]) == (0, 3)
        # At the end: empty, and nextOffset is the latest offset, where the next message will be.
        end = await read_all(client, prod, "order.events", 2, fromOffset=3)
        assert end["data"] == [] and end["nextOffset"] == 3
        await client.post(
            "/v1/topics/order.events/messages", json={"data": "next", "partition": 2}, headers=prod
        )
        after = await read_all(client, prod, "order.events", 2, fromOffset=end["nextOffset"])
        assert [m["data"] for m in after["data"]] == ["next"] and after["nextOffset"] == 4

    async def test_from_timestamp(self, client, prod, topic):
        await client.post(
            "/v1/topics/order.events/messages", json={"data": "old", "partition": 0}, headers=prod
        )
        await asyncio.sleep(0.02)
        second = (
            await client.post(
                "/v1/topics/order.events/messages", json={"data": "new", "partition": 0}, headers=prod
            )
        ).json()
        page = await read_all(client, prod, "order.events", 0, fromTimestamp=second["timestamp"])
        assert [m["data"] for m in page["data"]] == ["new"]
        from datetime import datetime

        epoch = int(datetime.fromisoformat(second["timestamp"]).timestamp() * 1000)
        page = await read_all(client, prod, "order.events", 0, fromTimestamp=str(epoch))
        assert [m["data"] for m in page["data"]] == ["new"]

    async def test_bad_partition_and_params(self, client, prod, topic):
        for params, partition in (
            ({}, 3),
            ({"limit": 0}, 0),
            ({"limit": 1001}, 0),
            ({"fromOffset": -1}, 0),
            ({"fromTimestamp": "yesterday"}, 0),
        ):
            r = await client.get(
                f"/v1/topics/order.events/partitions/{partition}/messages", params=params, headers=prod
            )
            assert_envelope(r, 400, "INVALID_REQUEST")

    async def test_message_by_id_errors(self, client, prod, topic):
        assert_envelope(
            await client.get("/v1/topics/order.events/messages/msg_nonsense!", headers=prod),
            400,
            "INVALID_REQUEST",
        )
        published = (
            await client.post("/v1/topics/order.events/messages", json={"data": 1}, headers=prod)
        ).json()
        await client.post("/v1/topics", json={"name": "elsewhere"}, headers=prod)
        r = await client.get(f"/v1/topics/elsewhere/messages/{published['id']}", headers=prod)
        assert_envelope(r, 404, "MESSAGE_NOT_FOUND")
        beyond = published["id"]  # same topic, an offset never written
        from app.broker import message_ids

        loc = message_ids.decode(beyond)
        missing = message_ids.encode(loc.topic_id, loc.partition, 999)
        assert_envelope(
            await client.get(f"/v1/topics/order.events/messages/{missing}", headers=prod),
            404,
            "MESSAGE_NOT_FOUND",
        )
        assert (
            json.loads((await client.get(f"/v1/topics/order.events/messages/{beyond}", headers=prod)).text)[
                "data"
            ]
            == 1
        )


class TestDeletionRace:
    """PRODUCT.md "Deletion races": a publish or read that meets its topic being deleted answers 404
    ``TOPIC_NOT_FOUND`` (never 500), and nothing of it is half-written."""

    async def test_calls_during_a_delete_answer_whole_or_topic_not_found(self, client, prod):
        name = "race.events"
        r = await client.post("/v1/topics", json={"name": name, "partitions": 4}, headers=prod)
        assert r.status_code == 201, r.text
        first = await client.post(
            f"/v1/topics/{name}/messages", json={"data": 0, "partition": 0}, headers=prod
        )
        assert first.status_code == 201, first.text
        message_id = first.json()["id"]
        join = await client.post(f"/v1/topics/{name}/groups/g/members", json={}, headers=prod)
        assert join.status_code == 200, join.text
        member = {"memberId": join.json()["memberId"], "generationId": join.json()["generationId"]}
        answers: list[tuple[str, int, str]] = []
        deleted = asyncio.Event()

        async def keep_calling(kind: str, call) -> None:
            i = 0
            while not deleted.is_set() or i < 3:
                i += 1
                response = await call(i)
                code = response.json()["error"]["code"] if response.status_code >= 400 else ""
                answers.append((kind, response.status_code, code))
                if response.status_code >= 400:
                    assert_envelope(response, 404, "TOPIC_NOT_FOUND")
                await asyncio.sleep(0)

        calls = {
            "publish": lambda i: client.post(
                f"/v1/topics/{name}/messages", json={"data": i, "partition": i % 4}, headers=prod
            ),
            "batch": lambda i: client.post(
                f"/v1/topics/{name}/messages/batch",
                json={"messages": [{"data": i, "partition": p} for p in range(4)]},
                headers=prod,
            ),
            "stream read": lambda i: client.get(
                f"/v1/topics/{name}/partitions/{i % 4}/messages", params={"fromOffset": 0}, headers=prod
            ),
            "message by id": lambda i: client.get(f"/v1/topics/{name}/messages/{message_id}", headers=prod),
            "poll": lambda i: client.post(
                f"/v1/topics/{name}/groups/g/poll", json={**member, "maxMessages": 10}, headers=prod
            ),
        }

        async def delete() -> None:
            await asyncio.sleep(0.1)
            response = await client.delete(f"/v1/topics/{name}", headers=prod)
            assert response.status_code == 204, response.text
            deleted.set()

        await asyncio.gather(*(keep_calling(kind, call) for kind, call in calls.items()), delete())
        unexpected = [a for a in answers if a[1] not in (200, 201, 404)]
        assert unexpected == [], unexpected
        for kind in calls:
            assert (kind, 404, "TOPIC_NOT_FOUND") in answers, (kind, answers)
        # Nothing of the race is left: a topic made again under the name starts empty.
        r = await client.post("/v1/topics", json={"name": name, "partitions": 4}, headers=prod)
        assert r.status_code == 201, r.text
        described = (await client.get(f"/v1/topics/{name}", headers=prod)).json()
        assert [p["messages"] for p in described["partitionDetails"]] == [0, 0, 0, 0]
