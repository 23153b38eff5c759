"""Inputs at the edge of what the server keeps: nesting depth, integers beyond 64 bits, headers counted in
the message size, trace context, generations. Each is a clear 400 or 413 in the envelope (never a 500),
and nothing of a refused request is appended."""

from __future__ import annotations

import json

import pytest

from app.kit.json_limits import MAX_DEPTH
from tests.api.test_errors import assert_envelope

JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def topic(client, prod):
    response = await client.post("/v1/topics", json={"name": "limits", "partitions": 2}, headers=prod)
    assert response.status_code == 201
    return "limits"


def nested(levels: int, inner: str = "1") -> str:
    """A JSON text of ``levels`` arrays and objects inside one another, alternating."""
    text = inner
    for level in range(levels):
        text = f"[{text}]" if level % 2 else f'{{"k":{text}}}'
    return text


async def stored(client, prod, name: str = "limits") -> int:
    described = (await client.get(f"/v1/topics/{name}", headers=prod)).json()
    return sum(p["latestOffset"] for p in described["partitionDetails"])


class TestNesting:
    @pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 254, 255, 600, 1023])
    async def test_data_nested_past_the_limit_is_400_single_and_batch(self, client, prod, topic, levels):
        single = await client.post(
            f"/v1/topics/{topic}/messages", content=f'{{"data":{nested(levels)}}}', headers={**prod, **JSON}
        )
        error = assert_envelope(single, 400, "INVALID_REQUEST")
        assert error["details"] == [
            {"field": "data", "issue": f"nested deeper than {MAX_DEPTH} levels of arrays and objects"}
        ]
        body = f'{{"messages":[{{"data":1}},{{"data":{nested(levels)}}}]}}'
        batch = await client.post(
            f"/v1/topics/{topic}/messages/batch", content=body, headers={**prod, **JSON}
        )
        error = assert_envelope(batch, 400, "INVALID_REQUEST")
        # Past 1,024 levels in all the parser itself refuses the body: the field is the body.
        assert error["details"][0]["field"] == ("body" if levels + 3 > 1024 else "messages[1].data")
        assert "nested deeper than" in error["details"][0]["issue"]
        assert await stored(client, prod) == 0

    async def test_data_at_the_limit_is_kept_as_sent(self, client, prod, topic):
        text = nested(MAX_DEPTH, '"deep"')
        r = await client.post(
            f"/v1/topics/{topic}/messages", content=f'{{"data":{text}}}', headers={**prod, **JSON}
        )
        assert r.status_code == 201, r.text
        read = await client.get(
            f"/v1/topics/{topic}/partitions/{r.json()['partition']}/messages", headers=prod
        )
        assert read.json()["data"][0]["data"] == json.loads(text)

    async def test_brackets_inside_strings_do_not_count(self, client, prod, topic):
        data = {"text": "[" * 500 + "{" * 500}
        r = await client.post(
            f"/v1/topics/{topic}/messages/batch", json={"messages": [{"data": data}]}, headers=prod
        )
        assert r.status_code == 201, r.text


class TestIntegers:
    @pytest.mark.parametrize("literal", ["18446744073709551616", "-9223372036854775809", "1" + "0" * 40])
    async def test_an_integer_beyond_64_bits_is_400_not_stored_changed(self, client, prod, topic, literal):
        single = await client.post(
            f"/v1/topics/{topic}/messages", content=f'{{"data":{{"n":{literal}}}}}', headers={**prod, **JSON}
        )
        error = assert_envelope(single, 400, "INVALID_REQUEST")
        assert error["details"][0]["field"] == "data" and "64 bits" in error["details"][0]["issue"]
        body = f'{{"messages":[{{"data":1}},{{"data":[{literal}]}}]}}'
        batch = await client.post(
            f"/v1/topics/{topic}/messages/batch", content=body, headers={**prod, **JSON}
        )
        error = assert_envelope(batch, 400, "INVALID_REQUEST")
        assert error["details"][0]["field"] == "messages[1].data"
        assert await stored(client, prod) == 0

    async def test_integers_within_64_bits_and_floats_are_kept_exactly(self, client, prod, topic):
        text = '{"data":{"max":18446744073709551615,"min":-9223372036854775808,"f":1e300,"s":"18446744073709551616"}}'
        r = await client.post(f"/v1/topics/{topic}/messages", content=text, headers={**prod, **JSON})
        assert r.status_code == 201, r.text
        read = await client.get(f"/v1/topics/{topic}/messages/{r.json()['id']}", headers=prod)
        assert read.json()["data"] == {
            "max": 18446744073709551615,
            "min": -9223372036854775808,
            "f": 1e300,
            "s": "18446744073709551616",
        }


class TestHeaders:
    async def test_headers_count_toward_the_256_kib_limit(self, client, prod, topic):
        message = {"data": "x" * (200 * 1024), "headers": {"big": "y" * (100 * 1024)}}
        single = await client.post(f"/v1/topics/{topic}/messages", json=message, headers=prod)
        assert_envelope(single, 413, "PAYLOAD_TOO_LARGE")
        batch = await client.post(
            f"/v1/topics/{topic}/messages/batch", json={"messages": [{"data": 1}, message]}, headers=prod
        )
        assert_envelope(batch, 413, "PAYLOAD_TOO_LARGE")
        keyed = {"data": "x" * (256 * 1024 - 100), "key": "k" * 200}
        assert_envelope(
            await client.post(f"/v1/topics/{topic}/messages", json=keyed, headers=prod),
            413,
            "PAYLOAD_TOO_LARGE",
        )
        assert await stored(client, prod) == 0

    async def test_header_count_and_name_size(self, client, prod, topic):
        many = {"data": 1, "headers": {f"h{i}": "v" for i in range(65)}}
        error = assert_envelope(
            await client.post(f"/v1/topics/{topic}/messages", json=many, headers=prod), 400, "INVALID_REQUEST"
        )
        assert error["details"][0]["field"] == "headers" and "64" in error["details"][0]["issue"]
        long_name = {"data": 1, "headers": {"n" * 257: "v"}}
        error = assert_envelope(
            await client.post(
                f"/v1/topics/{topic}/messages/batch", json={"messages": [long_name]}, headers=prod
            ),
            400,
            "INVALID_REQUEST",
        )
        assert error["details"][0]["field"] == "messages[0].headers"
        empty_name = {"data": 1, "headers": {"": "v"}}
        assert_envelope(
            await client.post(f"/v1/topics/{topic}/messages", json=empty_name, headers=prod),
            400,
            "INVALID_REQUEST",
        )
        fits = {"data": 1, "headers": {("n" * 250 + str(i)): "v" for i in range(64)}}
        assert (await client.post(f"/v1/topics/{topic}/messages", json=fits, headers=prod)).status_code == 201


class TestTraceContext:
    TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    async def test_a_publish_stores_the_request_trace_context_as_headers(self, client, prod, topic):
        headers = {**prod, "traceparent": self.TRACEPARENT, "tracestate": "congo=t61rcWkgMzE"}
        r = await client.post(
            f"/v1/topics/{topic}/messages", json={"data": 1, "headers": {"a": "b"}}, headers=headers
        )
        assert r.status_code == 201, r.text
        read = (await client.get(f"/v1/topics/{topic}/messages/{r.json()['id']}", headers=prod)).json()
        assert read["headers"] == {
            "a": "b",
            "traceparent": self.TRACEPARENT,
            "tracestate": "congo=t61rcWkgMzE",
        }

    async def test_the_message_own_context_wins_and_a_bad_one_is_ignored(self, client, prod, topic):
        own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        headers = {**prod, "traceparent": self.TRACEPARENT, "tracestate": "x=1"}
        r = await client.post(
            f"/v1/topics/{topic}/messages", json={"data": 1, "headers": {"traceparent": own}}, headers=headers
        )
        read = (await client.get(f"/v1/topics/{topic}/messages/{r.json()['id']}", headers=prod)).json()
        assert read["headers"] == {"traceparent": own}
        r = await client.post(
            f"/v1/topics/{topic}/messages", json={"data": 2}, headers={**prod, "traceparent": "nonsense"}
        )
        read = (await client.get(f"/v1/topics/{topic}/messages/{r.json()['id']}", headers=prod)).json()
        assert read["headers"] == {}


class TestRateLimitHeaders:
    async def test_the_current_draft_fields_beside_the_old_ones(self, client, prod, topic):
        r = await client.post(f"/v1/topics/{topic}/messages", json={"data": 1}, headers=prod)
        limit, remaining = int(r.headers["ratelimit-limit"]), int(r.headers["ratelimit-remaining"])
        reset = int(r.headers["ratelimit-reset"])
        assert r.headers["ratelimit-policy"] == f'"publish";q={limit};w=1'
        assert r.headers["ratelimit"] == f'"publish";r={remaining};t={reset}'
        listed = await client.get("/v1/topics", headers=prod)
        assert listed.headers["ratelimit-policy"].startswith('"admin";q=')


class TestGenerations:
    @pytest.mark.parametrize("generation", [-1, -9007199254740992, 9007199254740992])
    async def test_a_generation_out_of_range_is_400(self, client, prod, topic, generation):
        joined = await client.post(f"/v1/topics/{topic}/groups/g/members", json={}, headers=prod)
        assert joined.status_code in (200, 201), joined.text
        member = joined.json()["memberId"]
        r = await client.post(
            f"/v1/topics/{topic}/groups/g/members/{member}/heartbeat",
            json={"generationId": generation},
            headers=prod,
        )
        error = assert_envelope(r, 400, "INVALID_REQUEST")
        assert error["details"][0]["field"] == "generationId"
