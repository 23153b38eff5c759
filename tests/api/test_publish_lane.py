"""The publish lane (``app.api.publish_lane.PublishLane``): the two publishes served from the middleware
stack must answer exactly as the routed endpoints do.

Each request is sent twice on the SQLite deployment: once through the app as it runs (envelope, lane,
app), once through the same app with the lane left out (envelope, then FastAPI's own stack, so the
route in ``messages.py`` serves it). The two answers must agree: status, the headers (content type,
``Idempotent-Replayed``, ``X-Request-Id``, ``Allow``), and the body (the error envelope whole, a
publish's answer field by field but for its offset, id, timestamp and latency).

And what the lane passes through: every other method and path goes to normal routing; the lane's
requests are counted under the route template; a client gone in the middle of its body publishes
nothing; the first of a repeated header is the one used, as Starlette's ``Headers.get`` does.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from starlette.types import Receive, Scope, Send

from app.api.metrics import HttpMetrics
from app.api.middleware import RequestEnvelopeMiddleware
from tests.conftest import Deployment

pytestmark = pytest.mark.parametrize("deployment", ["sqlite"], indirect=True)

VARYING = {"id", "offset", "timestamp", "latency"}  # differ between two publishes, by nature


def routed_app(deployment: Deployment) -> RequestEnvelopeMiddleware:
    """The deployment's app without the lane: the envelope around FastAPI's own middleware stack."""
    app = deployment.app
    stack = FastAPI.build_middleware_stack(app)

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = app  # as Starlette's ``__call__`` sets it
        await stack(scope, receive, send)

    return RequestEnvelopeMiddleware(
        asgi, max_body_bytes=deployment.settings.max_body_bytes, metrics=HttpMetrics(CollectorRegistry())
    )


@pytest.fixture
async def routed(deployment: Deployment) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=routed_app(deployment))
    async with httpx.AsyncClient(transport=transport, base_url="http://queuecore.test") as http:
        yield http


@pytest.fixture
async def topic(client: httpx.AsyncClient, prod: dict[str, str]) -> str:
    name = f"lane.{secrets.token_hex(3)}"
    response = await client.post("/v1/topics", json={"name": name, "partitions": 2}, headers=prod)
    assert response.status_code == 201, response.text
    return name


def comparable(response: httpx.Response) -> dict[str, Any]:
    """What of an answer the lane and the route must agree on."""
    try:
        body = response.json()
    except ValueError:
        body = {"text": response.text, "location": response.headers.get("location")}
    if "error" in body:
        body["error"].pop("requestId")
    elif "messages" in body:
        body["messages"] = [{k: v for k, v in m.items() if k not in VARYING} for m in body["messages"]]
        body.pop("latency", None)
    else:
        body = {k: v for k, v in body.items() if k not in VARYING}
    return {
        "status": response.status_code,
        "content-type": response.headers.get("content-type"),
        "replayed": response.headers.get("idempotent-replayed"),
        "allow": response.headers.get("allow"),
        "request id echoed": response.headers.get("x-request-id") == "same-request-1",
        "body": body,
    }


async def both(
    lane: httpx.AsyncClient, routed: httpx.AsyncClient, path: str, **kwargs: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    method = kwargs.pop("method", "POST")
    headers = {**kwargs.pop("headers", {}), "x-request-id": "same-request-1"}
    first = await lane.request(method, path, headers=headers, **kwargs)
    second = await routed.request(method, path, headers=headers, **kwargs)
    return comparable(first), comparable(second)


class TestAnswersAsTheRoute:
    async def test_a_single_publish(self, client, routed, prod, topic) -> None:
        lane, route = await both(
            client, routed, f"/v1/topics/{topic}/messages", json={"data": {"n": 1}, "key": "k"}, headers=prod
        )
        assert lane == route
        assert lane["status"] == 201 and lane["replayed"] is None and lane["request id echoed"]

    async def test_a_batch_publish(self, client, routed, prod, topic) -> None:
        body = {
            "messages": [
                {"data": 1, "partition": 0},
                {"data": {"x": [1, 2]}, "partition": 1},
                {"data": "s", "key": "k"},
            ]
        }
        lane, route = await both(
            client, routed, f"/v1/topics/{topic}/messages/batch", json=body, headers=prod
        )
        assert lane == route
        assert lane["status"] == 201 and lane["body"]["count"] == 3

    async def test_a_replayed_single_publish(self, client, routed, prod, topic) -> None:
        answers = []
        for http in (client, routed):
            key = f"idem-{secrets.token_hex(4)}"
            path = f"/v1/topics/{topic}/messages"
            first = await http.post(
                path, json={"data": 7, "partition": 1}, headers=prod | {"idempotency-key": key}
            )
            again = await http.post(
                path, json={"data": 7, "partition": 1}, headers=prod | {"idempotency-key": key}
            )
            assert (again.json()["offset"], again.json()["id"]) == (
                first.json()["offset"],
                first.json()["id"],
            )
            answers.append(comparable(again))
        assert answers[0] == answers[1]
        assert answers[0]["replayed"] == "true"

    async def test_a_batch_whose_items_were_all_seen(self, client, routed, prod, topic) -> None:
        answers = []
        for http in (client, routed):
            body = {
                "messages": [{"data": i, "idempotencyKey": f"b-{secrets.token_hex(4)}"} for i in range(2)]
            }
            path = f"/v1/topics/{topic}/messages/batch"
            await http.post(path, json=body, headers=prod)
            answers.append(comparable(await http.post(path, json=body, headers=prod)))
        assert answers[0] == answers[1]
        assert answers[0]["replayed"] == "true"
        assert [m["replayed"] for m in answers[0]["body"]["messages"]] == [True, True]

    @pytest.mark.parametrize(
        ("suffix", "content", "extra"),
        [
            ("/messages", b"{not json", {}),
            ("/messages", b"", {}),
            ("/messages", b'{"data": 1, "partition": 9}', {}),
            ("/messages", b'{"nodata": 1}', {}),
            ("/messages", b'{"data": 1}', {"idempotency-key": ""}),
            ("/messages", b'{"data": 1}', {"idempotency-key": "x" * 257}),
            ("/messages/batch", b'{"messages": []}', {}),
            ("/messages/batch", b'{"messages": [{"data": 1, "partition": -1}]}', {}),
            ("/messages/batch", b"[1, 2]", {}),
        ],
    )
    async def test_a_refused_publish(self, client, routed, prod, topic, suffix, content, extra) -> None:
        lane, route = await both(
            client, routed, f"/v1/topics/{topic}{suffix}", content=content, headers=prod | extra
        )
        assert lane == route
        assert lane["status"] == 400

    @pytest.mark.parametrize("suffix", ["/messages", "/messages/batch"])
    @pytest.mark.parametrize(
        "authorization", [None, "Bearer qc_live_sk_not-a-real-key", "Basic dXNlcjpwYXNz", "Bearer "]
    )
    async def test_a_publish_without_a_valid_key(self, client, routed, topic, suffix, authorization) -> None:
        headers = {"authorization": authorization} if authorization is not None else {}
        lane, route = await both(
            client, routed, f"/v1/topics/{topic}{suffix}", json={"data": 1}, headers=headers
        )
        assert lane == route
        assert lane["status"] == 401

    @pytest.mark.parametrize("suffix", ["/messages", "/messages/batch"])
    async def test_a_publish_to_a_topic_that_does_not_exist(self, client, routed, prod, suffix) -> None:
        body = {"data": 1} if suffix == "/messages" else {"messages": [{"data": 1}]}
        lane, route = await both(client, routed, f"/v1/topics/no.such.topic{suffix}", json=body, headers=prod)
        assert lane == route
        assert lane["status"] == 404 and lane["body"]["error"]["code"] == "TOPIC_NOT_FOUND"

    async def test_a_body_over_the_cap(self, client, routed, prod, topic, deployment) -> None:
        big = b'{"data": "' + b"x" * deployment.settings.max_body_bytes + b'"}'
        lane, route = await both(client, routed, f"/v1/topics/{topic}/messages", content=big, headers=prod)
        assert lane == route
        assert lane["status"] == 413


class TestPassedThrough:
    @pytest.mark.parametrize(
        ("method", "suffix"),
        [
            ("PUT", "/messages"),
            ("DELETE", "/messages/batch"),
            ("GET", "/messages"),
            ("POST", "/messages/"),
            ("POST", "/messages/batch/"),
            ("POST", "/messages/other"),
        ],
    )
    async def test_other_methods_and_paths_go_to_normal_routing(
        self, client, routed, prod, topic, method, suffix
    ) -> None:
        lane, route = await both(
            client, routed, f"/v1/topics/{topic}{suffix}", method=method, json={"data": 1}, headers=prod
        )
        assert lane == route
        assert lane["status"] in (307, 404, 405)

    async def test_a_publish_under_a_deeper_path_is_not_taken_for_a_topic(self, client, routed, prod) -> None:
        lane, route = await both(client, routed, "/v1/topics/a/b/messages", json={"data": 1}, headers=prod)
        assert lane == route and lane["status"] == 404

    async def test_the_lanes_publishes_are_counted_under_the_route_template(
        self, client, prod, topic, deployment
    ) -> None:
        registry = deployment.app.state.registry

        def count(route: str, status: int) -> float:
            labels = {"method": "POST", "route": route, "status": str(status)}
            return registry.get_sample_value("queuecore_http_requests_total", labels) or 0.0

        single, batch = "/v1/topics/{name}/messages", "/v1/topics/{name}/messages/batch"
        before = (count(single, 201), count(batch, 201), count(single, 400))
        await client.post(f"/v1/topics/{topic}/messages", json={"data": 1}, headers=prod)
        await client.post(
            f"/v1/topics/{topic}/messages/batch", json={"messages": [{"data": 1}]}, headers=prod
        )
        await client.post(f"/v1/topics/{topic}/messages", content=b"{", headers=prod)
        after = (count(single, 201), count(batch, 201), count(single, 400))
        assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1]

    async def test_the_first_of_a_repeated_header_is_the_one_used(self, client, routed, prod, topic) -> None:
        headers = [("authorization", prod["Authorization"]), ("authorization", "Bearer qc_wrong")]
        lane = await client.post(f"/v1/topics/{topic}/messages", json={"data": 1}, headers=headers)
        route = await routed.post(f"/v1/topics/{topic}/messages", json={"data": 1}, headers=headers)
        assert lane.status_code == route.status_code == 201
        wrong_first = list(reversed(headers))
        lane = await client.post(f"/v1/topics/{topic}/messages", json={"data": 1}, headers=wrong_first)
        route = await routed.post(f"/v1/topics/{topic}/messages", json={"data": 1}, headers=wrong_first)
        assert lane.status_code == route.status_code == 401

    @pytest.mark.parametrize("suffix", ["/messages", "/messages/batch"])
    async def test_a_client_gone_in_the_middle_of_its_body_publishes_nothing(
        self, client, prod, topic, deployment, suffix
    ) -> None:
        async def latest() -> list[int]:
            response = await client.get(f"/v1/topics/{topic}", headers=prod)
            assert response.status_code == 200
            return [p["latestOffset"] for p in response.json()["partitionDetails"]]

        before = await latest()
        # The part that came is valid JSON on its own: only the disconnect says it is not the whole body.
        part = b'{"data": 1}' if suffix == "/messages" else b'{"messages": [{"data": 1}]}'
        chunks = [
            {"type": "http.request", "body": part, "more_body": True},
            {"type": "http.disconnect"},
        ]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return chunks.pop(0) if chunks else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        headers = [(b"authorization", prod["Authorization"].encode()), (b"content-type", b"application/json")]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": f"/v1/topics/{topic}{suffix}",
            "raw_path": f"/v1/topics/{topic}{suffix}".encode(),
            "query_string": b"",
            "headers": headers,
            "server": ("queuecore.test", 80),
            "client": ("127.0.0.1", 5000),
        }
        await asyncio.wait_for(deployment.app(scope, receive, send), 20)
        assert sent == []
        assert await latest() == before
