"""The bulk read (``GET …/partitions/{p}/records``, ``application/vnd.queuecore.records``) on both deployments.

What must hold: following ``nextOffset``, the bulk read answers exactly the messages (ids, offsets, keys,
``data`` text, user headers, timestamps) and the ``nextOffset``/``earliestOffset`` the JSON read answers,
in every shape (empty, at and past the end, a limit, an end offset, many frames, a partition added
later); the Spark reader's decoder refuses an answer with any one byte changed; the call has the JSON
read's key, tenancy, rate limit (one call is one ``consume``) and error envelope; an ``Accept`` that
admits neither the records type nor a wildcard is 406 ``NOT_ACCEPTABLE``, and no ``Accept`` is answered.
Retention and segment boundaries are ``tests/broker/test_record_frames.py``'s (they need an engine of the
test's own).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
import pytest
from queuecore_spark._records import CorruptResponse, decode

from app.broker.rate_limits import Tier
from tests.api.test_errors import assert_envelope
from tests.fixtures.records import CONNECTOR_ARROW_SCHEMA

MEDIA_TYPE = "application/vnd.queuecore.records"
ACCEPT = {"Accept": MEDIA_TYPE}
NAME = "bulk.events"

Row = tuple[str, int, str | None, str, dict[str, str], int]


@pytest.fixture
async def topic(client, prod):
    response = await client.post("/v1/topics", json={"name": NAME, "partitions": 3}, headers=prod)
    assert response.status_code == 201
    return response.json()


def messages(n: int, partition: int, tag: str = "m") -> list[dict[str, Any]]:
    """Varied messages: nested and unicode data, null data, keys, headers, idempotency keys."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        item: dict[str, Any] = {"data": {"i": i, "tag": tag, "text": "é✓", "list": [1, 2.5, None]}}
        item["partition"] = partition
        if i % 7 == 0:
            item["data"] = None
        if i % 3 == 0:
            item["key"] = f"k{i % 5}"
        if i % 4 == 0:
            item["headers"] = {"source": "bulk", "n": str(i), "ü": "✓"}
        if i % 5 == 0:
            item["idempotencyKey"] = f"{tag}-{partition}-{i}"
        out.append(item)
    return out


async def publish(client, headers, items: list[dict[str, Any]]) -> None:
    for at in range(0, len(items), 1000):
        r = await client.post(
            f"/v1/topics/{NAME}/messages/batch", json={"messages": items[at : at + 1000]}, headers=headers
        )
        assert r.status_code == 201, r.text


async def json_page(client, headers, partition: int, **params: Any) -> dict[str, Any]:
    r = await client.get(f"/v1/topics/{NAME}/partitions/{partition}/messages", params=params, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def bulk_body(client, headers, partition: int, **params: Any) -> bytes:
    r = await client.get(
        f"/v1/topics/{NAME}/partitions/{partition}/records", params=params, headers={**headers, **ACCEPT}
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == MEDIA_TYPE
    return r.content


async def bulk_page(client, headers, partition: int, **params: Any) -> tuple[list[Row], int, int]:
    body = await bulk_body(client, headers, partition, **params)
    decoded = decode(body, NAME, partition, CONNECTOR_ARROW_SCHEMA)
    rows: list[Row] = []
    for batch in decoded.batches:
        assert set(batch.column("topic").to_pylist()) == {NAME}
        assert set(batch.column("partition").to_pylist()) == {partition}
        for r in batch.to_pylist():
            stamp = int(r["timestamp"].timestamp() * 1000)
            rows.append((r["id"], r["offset"], r["key"], r["data"], dict(r["headers"]), stamp))
    return rows, decoded.next_offset, decoded.earliest_offset


def json_rows(page: dict[str, Any]) -> list[Row]:
    return [
        (
            m["id"],
            m["offset"],
            m["key"],
            orjson.dumps(m["data"]).decode(),
            m["headers"],
            int(datetime.fromisoformat(m["timestamp"]).timestamp() * 1000),
        )
        for m in page["data"]
    ]


async def read_both(client, headers, partition: int, **params: Any) -> tuple[list[Row], int, int]:
    """One bulk read and the JSON pages over the same offsets; asserts they agree, answers the bulk read."""
    rows, next_offset, earliest = await bulk_page(client, headers, partition, **params)
    limit = min(int(params.pop("limit", 10_000)), len(rows) or 1)
    until = params.pop("untilOffset", None)
    expected: list[Row] = []
    page = await json_page(client, headers, partition, **params, limit=min(limit, 1000))
    expected += json_rows(page)
    first_next = page["nextOffset"]
    while len(expected) < len(rows) and page["data"]:
        page = await json_page(client, headers, partition, fromOffset=page["nextOffset"], limit=1000)
        expected += json_rows(page)
    expected = [r for r in expected if until is None or r[1] < until][: len(rows)]
    assert rows == expected
    assert earliest == page["earliestOffset"]
    if rows:
        assert next_offset == rows[-1][1] + 1
    else:
        assert next_offset == first_next
    return rows, next_offset, earliest


class TestSameAsTheJsonRead:
    async def test_every_message_with_keys_headers_and_null_data(self, client, prod, topic):
        await publish(client, prod, messages(300, 1))
        rows, next_offset, earliest = await read_both(client, prod, 1)
        assert [r[1] for r in rows] == list(range(300)) and (next_offset, earliest) == (300, 0)
        assert rows[0][3] == "null" and rows[4][4] == {"source": "bulk", "n": "4", "ü": "✓"}
        assert rows[5][2] is None and rows[3][2] == "k3"

    async def test_following_next_offset_with_a_limit_reads_each_message_once(self, client, prod, topic):
        await publish(client, prod, messages(250, 0))
        seen: list[int] = []
        at = 0
        while at < 250:
            rows, at, _ = await read_both(client, prod, 0, fromOffset=at, limit=60)
            assert 1 <= len(rows) <= 60
            seen += [r[1] for r in rows]
        assert seen == list(range(250))

    async def test_an_end_offset_stops_the_read_before_it(self, client, prod, topic):
        await publish(client, prod, messages(50, 2))
        rows, next_offset, _ = await read_both(client, prod, 2, fromOffset=10, untilOffset=25)
        assert [r[1] for r in rows] == list(range(10, 25)) and next_offset == 25
        rows, next_offset, _ = await bulk_page(client, prod, 2, fromOffset=10, untilOffset=10)
        assert rows == [] and next_offset == 10

    async def test_an_empty_partition_and_the_end(self, client, prod, topic):
        rows, next_offset, earliest = await read_both(client, prod, 0)
        assert (rows, next_offset, earliest) == ([], 0, 0)
        await publish(client, prod, messages(3, 0))
        rows, next_offset, _ = await read_both(client, prod, 0, fromOffset=3)
        assert (rows, next_offset) == ([], 3)

    async def test_past_the_end_is_refused_as_the_json_read_refuses_it(self, client, prod, topic):
        await publish(client, prod, messages(3, 2))
        bulk = await client.get(
            f"/v1/topics/{NAME}/partitions/2/records", params={"fromOffset": 4}, headers={**prod, **ACCEPT}
        )
        page = await client.get(
            f"/v1/topics/{NAME}/partitions/2/messages", params={"fromOffset": 4}, headers=prod
        )
        assert (
            assert_envelope(bulk, 400, "OFFSET_OUT_OF_RANGE")["details"]
            == (assert_envelope(page, 400, "OFFSET_OUT_OF_RANGE")["details"])
        )

    async def test_from_a_timestamp(self, client, prod, topic):
        await publish(client, prod, messages(5, 1))
        second = (
            await client.post(
                f"/v1/topics/{NAME}/messages", json={"data": "late", "partition": 1}, headers=prod
            )
        ).json()
        rows, _, _ = await read_both(client, prod, 1, fromTimestamp=second["timestamp"])
        assert rows[-1][3] == '"late"'
        assert rows[0][5] >= int(datetime.fromisoformat(second["timestamp"]).timestamp() * 1000)

    async def test_many_frames(self, client, prod, topic):
        await publish(client, prod, [{"data": {"n": i}, "partition": 0} for i in range(12_000)])
        body = await bulk_body(client, prod, 0, limit=50_000)
        decoded = decode(body, NAME, 0, CONNECTOR_ARROW_SCHEMA)
        assert len(decoded.batches) >= 3 and decoded.count == 12_000 and decoded.next_offset == 12_000
        rows, next_offset, _ = await read_both(client, prod, 0, fromOffset=4321, limit=7000)
        assert [r[1] for r in rows] == list(range(4321, 11_321)) and next_offset == 11_321

    async def test_a_partition_added_later(self, client, prod, topic):
        r = await client.patch(f"/v1/topics/{NAME}", json={"partitions": 5}, headers=prod)
        assert r.status_code == 200, r.text
        rows, next_offset, _ = await read_both(client, prod, 4)
        assert (rows, next_offset) == ([], 0)
        await publish(client, prod, messages(20, 4))
        rows, next_offset, _ = await read_both(client, prod, 4)
        assert len(rows) == 20 and next_offset == 20


class TestChecksums:
    async def test_any_one_changed_byte_is_refused_by_the_decoder(self, client, prod, topic):
        await publish(client, prod, messages(12, 0))
        body = await bulk_body(client, prod, 0)
        assert decode(body, NAME, 0, CONNECTOR_ARROW_SCHEMA).count == 12
        for position in range(len(body)):
            damaged = bytearray(body)
            damaged[position] ^= 0x20
            with pytest.raises(CorruptResponse):
                decode(bytes(damaged), NAME, 0, CONNECTOR_ARROW_SCHEMA)
        for cut in (0, 31, 32, len(body) - 1):
            with pytest.raises(CorruptResponse):
                decode(body[:cut], NAME, 0, CONNECTOR_ARROW_SCHEMA)
        with pytest.raises(CorruptResponse):
            decode(body + b"\0" * 8, NAME, 0, CONNECTOR_ARROW_SCHEMA)


class TestAccess:
    async def test_another_environments_topic_is_not_found(self, client, tenant, prod, topic):
        r = await client.get(
            f"/v1/topics/{NAME}/partitions/0/records", headers={**tenant.headers("staging"), **ACCEPT}
        )
        assert_envelope(r, 404, "TOPIC_NOT_FOUND")

    async def test_a_missing_or_wrong_key_is_401(self, client, topic):
        for headers in ({}, {"Authorization": "Bearer pq_live_sk_" + "x" * 32}):
            r = await client.get(f"/v1/topics/{NAME}/partitions/0/records", headers={**headers, **ACCEPT})
            assert_envelope(r, 401, "INVALID_API_KEY")

    async def test_bad_parameters_are_400(self, client, prod, topic):
        for params, partition in (
            ({}, 3),
            ({"limit": 0}, 0),
            ({"limit": 50_001}, 0),
            ({"fromOffset": -1}, 0),
            ({"untilOffset": -1}, 0),
            ({"fromTimestamp": "yesterday"}, 0),
        ):
            r = await client.get(
                f"/v1/topics/{NAME}/partitions/{partition}/records", params=params, headers={**prod, **ACCEPT}
            )
            assert_envelope(r, 400, "INVALID_REQUEST")

    async def test_one_bulk_read_is_one_consume_request(self, client, deployment):
        project = await deployment.project(
            tier=Tier.enterprise, limits={"publish": 1000, "consume": 3, "admin": 1000}
        )
        headers = project.headers()
        assert (await client.post("/v1/topics", json={"name": NAME}, headers=headers)).status_code == 201
        r = await client.post(
            f"/v1/topics/{NAME}/messages/batch",
            json={"messages": [{"data": i, "partition": 0} for i in range(1000)]},
            headers=headers,
        )
        assert r.status_code == 201
        answers = [
            await client.get(
                f"/v1/topics/{NAME}/partitions/0/records",
                params={"limit": 50_000},
                headers={**headers, **ACCEPT},
            )
            for _ in range(4)
        ]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        assert [a.headers["RateLimit-Limit"] for a in answers] == ["3"] * 4
        assert [a.headers["RateLimit-Remaining"] for a in answers[:3]] == ["2", "1", "0"]
        assert_envelope(answers[3], 429, "RATE_LIMIT_EXCEEDED")


async def get_records(client, headers: dict[str, str], accept: str | None, name: str = NAME):
    """A bulk read of partition 0 with exactly this ``Accept`` (``None``: no ``Accept`` header at all)."""
    request = client.build_request("GET", f"/v1/topics/{name}/partitions/0/records", headers=headers)
    del request.headers["accept"]  # httpx sends Accept: */* unless told otherwise
    if accept is not None:
        request.headers["Accept"] = accept
    return await client.send(request)


class TestContentNegotiation:
    @pytest.mark.parametrize(
        "accept",
        [
            None,
            "",
            "*/*",
            "application/*",
            MEDIA_TYPE,
            MEDIA_TYPE.upper(),
            f"{MEDIA_TYPE};q=0.5",
            f"application/json, {MEDIA_TYPE};q=0.1",
            "text/html;q=0.9, */*;q=0.1",
            f"{MEDIA_TYPE};version=1",
        ],
    )
    async def test_an_accept_that_admits_the_records_type_is_answered(self, client, prod, topic, accept):
        await publish(client, prod, messages(3, 0))
        r = await get_records(client, prod, accept)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == MEDIA_TYPE
        assert decode(r.content, NAME, 0, CONNECTOR_ARROW_SCHEMA).count == 3

    @pytest.mark.parametrize(
        "accept",
        [
            "text/html",
            "application/json",
            "text/*",
            "application/octet-stream, application/json;q=0.9",
            f"{MEDIA_TYPE};q=0",
            f"*/*, {MEDIA_TYPE};q=0",
            "*/*;q=0",
            f"{MEDIA_TYPE};q=2",
            "records",
        ],
    )
    async def test_an_accept_that_admits_neither_it_nor_a_wildcard_is_406(self, client, prod, topic, accept):
        r = await get_records(client, prod, accept)
        error = assert_envelope(r, 406, "NOT_ACCEPTABLE")
        assert MEDIA_TYPE in error["message"] and "details" not in error

    async def test_the_records_type_is_refused_before_the_topic_is_looked_up(self, client, prod):
        r = await get_records(client, prod, "application/json", name="no.such.topic")
        assert_envelope(r, 406, "NOT_ACCEPTABLE")
        r = await get_records(client, prod, MEDIA_TYPE, name="no.such.topic")
        assert_envelope(r, 404, "TOPIC_NOT_FOUND")

    async def test_a_missing_key_is_401_before_the_accept_is_judged(self, client, topic):
        assert_envelope(await get_records(client, {}, "text/html"), 401, "INVALID_API_KEY")

    async def test_the_json_read_is_unchanged(self, client, prod, topic):
        r = await client.get(
            f"/v1/topics/{NAME}/partitions/0/messages", headers={**prod, "Accept": "text/html"}
        )
        assert r.status_code == 200, r.text
