"""The request envelope (``app.api.middleware.RequestEnvelopeMiddleware``), around small ASGI apps.

The envelope is tested on its own: wrapped around a FastAPI app of the test's (whose routes say what
they saw: the request id in their scope, the body they read) and around bare ASGI callables that fail in
the ways the envelope must answer for, with a small body cap and a metrics registry of the test's.
End-to-end checks of the same behaviour through the product's app are ``test_errors.py``'s.

* Request ids: one per request (``req_`` + 20 hex), a valid ``X-Request-Id`` echoed, an invalid one
  replaced; the app sees the same id in ``scope["state"]``.
* The body cap: a declared length over it is 413 before the app runs; a streamed body over it is 413
  even when the app answered the failed read its own way; a body at the cap passes whole.
* A path or query holding NUL is 400 before the app runs.
* An error before the answer is the 500 envelope (never internals), logged; after the answer started it
  is re-raised; once Starlette's error layer answered, not answered twice; a client gone is 499.
* Headers the auth dependency left in ``state["response_headers"]`` are added to the answer.
* One log line per request, with the route template and never the credentials; metrics by route
  template and status; publish counters and the usage event for an authenticated call.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI, Request
from prometheus_client import CollectorRegistry
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from app.api.metrics import HttpMetrics
from app.api.middleware import RequestEnvelopeMiddleware
from app.broker.keys import Principal
from app.broker.usage import UsageMeter, read_usage
from app.errors import UNHANDLED_ANSWERED
from app.kit.logs import JsonFormatter
from tests.stores.log.conftest import open_local

CAP = 1024
SECRET = "qc_live_sk_ThisIsTheCallersSecretKey0123"


def inner_app() -> FastAPI:
    app = FastAPI()

    @app.get("/items/{item_id}")
    async def item(item_id: str, request: Request) -> dict[str, Any]:
        state = request.scope["state"]
        state["response_headers"] = [(b"x-ratelimit-remaining", b"41")]
        state["key_id"] = "key_abc"
        return {"item": item_id, "requestId": state["request_id"]}

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, Any]:
        return {"length": len(await request.body())}

    return app


class Harness:
    def __init__(self, app: Any) -> None:
        self.registry = CollectorRegistry()
        self.metrics = HttpMetrics(self.registry)
        self.envelope = RequestEnvelopeMiddleware(app, max_body_bytes=CAP, metrics=self.metrics)
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.envelope), base_url="http://t")

    def count(self, method: str, route: str, status: int) -> float:
        value = self.registry.get_sample_value(
            "queuecore_http_requests_total", {"method": method, "route": route, "status": str(status)}
        )
        return value or 0.0


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness(inner_app())
    async with h.client:
        yield h


def envelope_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error: dict[str, Any] = response.json()["error"]
    assert (error["code"], error["status"]) == (code, status)
    assert error["requestId"] == response.headers["x-request-id"]
    return error


async def asgi(app: Any, scope: dict[str, Any], body: list[bytes] | None = None) -> list[dict[str, Any]]:
    """Drive ``app`` with one request (``body`` in chunks, then the client gone); the messages it sent."""
    chunks = list(body or [b""])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        await asyncio.sleep(0)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    base = {"type": "http", "method": "GET", "path": "/", "query_string": b"", "headers": []}
    await app({**base, **scope}, receive, send)
    return sent


class TestRequestIds:
    async def test_each_request_gets_a_new_id_which_the_app_sees_too(self, harness) -> None:
        first = await harness.client.get("/items/1")
        second = await harness.client.get("/items/1")
        assert re.fullmatch(r"req_[0-9a-f]{20}", first.headers["x-request-id"])
        assert first.headers["x-request-id"] != second.headers["x-request-id"]
        assert first.json()["requestId"] == first.headers["x-request-id"]

    async def test_a_valid_incoming_id_is_echoed(self, harness) -> None:
        response = await harness.client.get("/items/1", headers={"x-request-id": "trace-7.a_B"})
        assert response.headers["x-request-id"] == "trace-7.a_B"
        assert response.json()["requestId"] == "trace-7.a_B"

    @pytest.mark.parametrize("incoming", ["has space", "x" * 129, "semi;colon", "ünï"])
    async def test_an_invalid_incoming_id_is_replaced(self, harness, incoming: str) -> None:
        response = await harness.client.get("/items/1", headers={"x-request-id": incoming.encode()})
        assert response.headers["x-request-id"].startswith("req_")
        assert incoming not in response.text

    async def test_every_error_answer_carries_the_id_too(self, harness) -> None:
        response = await harness.client.get("/nowhere", headers={"x-request-id": "lost-1"})
        assert response.status_code == 404 and response.headers["x-request-id"] == "lost-1"


class TestBodyCap:
    async def test_a_declared_length_over_the_cap_is_413_and_the_app_never_runs(self) -> None:
        calls: list[str] = []

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            calls.append(scope["path"])

        h = Harness(app)
        async with h.client:
            response = await h.client.post("/echo", content=b"x" * (CAP + 1))
        error = envelope_of(response, 413, "PAYLOAD_TOO_LARGE")
        assert response.headers["connection"] == "close"
        assert "exceeds" in error["message"]
        assert calls == []

    async def test_a_streamed_body_over_the_cap_is_413_though_the_app_answered_its_own_way(
        self, harness
    ) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(5):
                yield b"y" * 300  # no content-length: only counting the chunks finds the excess

        response = await harness.client.post("/echo", content=chunks())
        envelope_of(response, 413, "PAYLOAD_TOO_LARGE")
        assert harness.count("POST", "/echo", 413) == 1
        assert harness.count("POST", "/echo", 400) == 0  # FastAPI's own answer to the failed read: dropped

    async def test_a_body_at_the_cap_is_read_whole(self, harness) -> None:
        response = await harness.client.post("/echo", content=b"z" * CAP)
        assert response.status_code == 200 and response.json() == {"length": CAP}


class TestNul:
    @pytest.mark.parametrize(("path", "query"), [("/items/a\x00b", b""), ("/items/1", b"q=%00")])
    async def test_a_path_or_query_with_nul_is_400_before_the_app_runs(self, path: str, query: bytes) -> None:
        calls: list[str] = []

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            calls.append(scope["path"])

        h = Harness(app)
        sent = await asyncio.wait_for(asgi(h.envelope, {"path": path, "query_string": query}), 10)
        assert sent[0]["status"] == 400
        error = orjson.loads(sent[1]["body"])["error"]
        assert error["code"] == "INVALID_REQUEST" and "NUL" in error["message"]
        assert calls == []


class TestUnhandledErrors:
    async def test_an_error_before_the_answer_is_the_500_envelope_without_internals(self, caplog) -> None:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            raise RuntimeError("password=hunter2 at db.internal:5432")

        h = Harness(app)
        async with h.client:
            with caplog.at_level(logging.ERROR, "queuecore.request"):
                response = await h.client.get("/boom")
        error = envelope_of(response, 500, "INTERNAL_ERROR")
        assert "hunter2" not in response.text and "db.internal" not in response.text
        logged = [r for r in caplog.records if r.getMessage() == "unhandled error"]
        assert len(logged) == 1 and logged[0].requestId == error["requestId"]  # type: ignore[attr-defined]
        assert h.count("GET", "unmatched", 500) == 1

    async def test_an_error_after_the_answer_started_is_raised_not_answered_twice(self) -> None:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            raise RuntimeError("mid-body")

        h = Harness(app)
        with pytest.raises(RuntimeError, match="mid-body"):
            await asgi(h.envelope, {})
        assert h.count("GET", "unmatched", 200) == 1

    async def test_an_error_the_error_layer_already_answered_is_not_answered_again(self) -> None:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            scope["state"][UNHANDLED_ANSWERED] = True  # as errors.py's handler marks it
            raise RuntimeError("already answered")

        h = Harness(app)
        assert await asgi(h.envelope, {}) == []

    async def test_a_client_gone_before_its_body_was_read_is_counted_as_499(self) -> None:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            raise ClientDisconnect

        h = Harness(app)
        assert await asgi(h.envelope, {"method": "POST"}) == []
        assert h.count("POST", "unmatched", 499) == 1


class TestHeadersLogsAndMetrics:
    async def test_headers_left_by_the_auth_dependency_are_added_to_the_answer(self, harness) -> None:
        response = await harness.client.get("/items/1")
        assert response.headers["x-ratelimit-remaining"] == "41"

    async def test_one_log_line_per_request_with_the_route_template_and_no_credentials(
        self, harness, caplog
    ) -> None:
        with caplog.at_level(logging.INFO, "queuecore.request"):
            response = await harness.client.get(
                "/items/42?token=" + SECRET, headers={"authorization": f"Bearer {SECRET}"}
            )
        lines = [r for r in caplog.records if r.name == "queuecore.request" and r.getMessage() == "request"]
        assert len(lines) == 1
        line = orjson.loads(JsonFormatter().format(lines[0]))
        assert line["requestId"] == response.headers["x-request-id"]
        assert (line["method"], line["route"], line["status"], line["keyId"]) == (
            "GET",
            "/items/{item_id}",
            200,
            "key_abc",
        )
        assert line["bytesOut"] == len(response.content)
        assert SECRET not in "\n".join(JsonFormatter().format(r) for r in caplog.records)

    async def test_requests_are_counted_by_route_template_and_status(self, harness) -> None:
        for item in ("1", "2", "3"):
            await harness.client.get(f"/items/{item}")
        await harness.client.get("/missing/route")
        assert harness.count("GET", "/items/{item_id}", 200) == 3
        assert harness.count("GET", "/items/1", 200) == 0
        assert harness.count("GET", "unmatched", 404) == 1

    async def test_an_authenticated_publish_is_counted_for_its_topic_and_metered(
        self, tmp_path: Path
    ) -> None:
        log = await open_local(tmp_path / "log")
        meter = UsageMeter(log, flush_interval=3600)
        await meter.start()
        principal = Principal("key_pub", "prj_pub", "production", "free", None)

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await receive()  # the body: bytesIn counts what the app read
            scope["path_params"] = {"name": "orders"}
            scope["state"].update(
                principal=principal, usage=meter, messages=3, data_bytes=120, category="publish"
            )
            await send({"type": "http.response.start", "status": 201, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})

        h = Harness(app)
        try:
            async with h.client:
                response = await h.client.post("/v1/topics/orders/messages/batch", content=b"[1,2,3]")
            await meter.flush()
            (event,) = [e async for e in read_usage(log)]
        finally:
            await meter.close()
            await log.close()
        labels = {"project": "prj_pub", "environment": "production", "topic": "orders"}
        assert h.registry.get_sample_value("queuecore_topic_published_messages_total", labels) == 3
        assert h.registry.get_sample_value("queuecore_topic_published_bytes_total", labels) == 120
        assert event["requestId"] == response.headers["x-request-id"]
        assert (event["projectId"], event["keyId"], event["status"], event["messages"]) == (
            "prj_pub",
            "key_pub",
            201,
            3,
        )
        assert (event["bytesIn"], event["bytesOut"], event["category"]) == (7, 2, "publish")
