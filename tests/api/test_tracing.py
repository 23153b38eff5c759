"""Tracing through the broker: the spans of publish, receive and settle, after OpenTelemetry's messaging
semantic conventions.

``TestSpans`` runs the app in process with the SDK's in-memory exporter; ``TestOtlpExport`` starts a real
``queuecore-server`` that exports over OTLP/HTTP to a receiver started here (a loopback HTTP server that
decodes ``ExportTraceServiceRequest`` with the opentelemetry-proto package), and consumes over a WebSocket.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from app.kit import tracing
from tests.api.test_pull import join, make_topic
from tests.api.ws_client import Api, Consumer, unique_name
from tests.fixtures.server import bootstrapped_server, server_env

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"
MESSAGE_TRACE = "0af7651916cd43dd8448eb211c80319c"
MESSAGE_SPAN = "b7ad6b7169203331"
MESSAGE_TRACEPARENT = f"00-{MESSAGE_TRACE}-{MESSAGE_SPAN}-01"


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the test, every ended span kept in memory."""
    exporter = InMemorySpanExporter()
    tracing.start(SimpleSpanProcessor(exporter), "queuecore-test")
    yield exporter
    tracing.stop()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def hex_trace(span_context: Any) -> str:
    return format(span_context.trace_id, "032x")


def hex_span(span_context: Any) -> str:
    return format(span_context.span_id, "016x")


# One backend is enough here: the spans are made at the edge and in the delivery loop, not in the stores.
@pytest.mark.parametrize("deployment", ["sqlite"], indirect=True)
class TestSpans:
    async def test_off_makes_no_span_and_imports_nothing(self, client, prod) -> None:
        assert not tracing.enabled
        topic = unique_name("off")
        await make_topic(client, prod, topic, partitions=1)
        r = await client.post(
            f"/v1/topics/{topic}/messages", json={"data": 1}, headers={**prod, "traceparent": TRACEPARENT}
        )
        assert r.status_code == 201
        assert tracing._provider is None

    async def test_single_publish_is_a_producer_span_under_the_request_context(
        self, client, prod, exported
    ) -> None:
        topic = unique_name("pub")
        await make_topic(client, prod, topic, partitions=2)
        r = await client.post(
            f"/v1/topics/{topic}/messages",
            json={"data": {"n": 1}, "partition": 1},
            headers={**prod, "traceparent": TRACEPARENT, "tracestate": "vendor=1"},
        )
        assert r.status_code == 201, r.text
        [span] = named(exported, f"publish {topic}")
        assert span.kind is SpanKind.PRODUCER
        assert dict(span.attributes) == {
            "messaging.system": "queuecore",
            "messaging.destination.name": topic,
            "messaging.operation.name": "publish",
            "messaging.operation.type": "send",
            "messaging.message.id": r.json()["id"],
            "messaging.destination.partition.id": "1",
        }
        assert span.parent is not None and span.parent.is_remote
        assert (hex_trace(span.parent), hex_span(span.parent)) == (TRACE, PARENT)
        assert hex_trace(span.context) == TRACE
        assert span.links == ()  # the message carried no context of its own: the request's is its parent
        assert span.resource.attributes["service.name"] == "queuecore-test"

    async def test_a_message_own_context_is_linked(self, client, prod, exported) -> None:
        topic = unique_name("pub")
        await make_topic(client, prod, topic, partitions=1)
        r = await client.post(
            f"/v1/topics/{topic}/messages",
            json={"data": 1, "headers": {"traceparent": MESSAGE_TRACEPARENT}},
            headers={**prod, "traceparent": TRACEPARENT},
        )
        assert r.status_code == 201, r.text
        [span] = named(exported, f"publish {topic}")
        assert hex_trace(span.context) == TRACE
        [link] = span.links
        assert (hex_trace(link.context), hex_span(link.context)) == (MESSAGE_TRACE, MESSAGE_SPAN)

    async def test_without_a_request_context_the_span_is_a_root(self, client, prod, exported) -> None:
        topic = unique_name("pub")
        await make_topic(client, prod, topic, partitions=1)
        r = await client.post(f"/v1/topics/{topic}/messages", json={"data": 1}, headers=prod)
        assert r.status_code == 201
        [span] = named(exported, f"publish {topic}")
        assert span.parent is None

    async def test_batch_publish_counts_and_links_each_message(self, client, prod, exported) -> None:
        topic = unique_name("batch")
        await make_topic(client, prod, topic, partitions=3)
        other = f"00-{'1' * 32}-{'2' * 16}-01"
        body = {
            "messages": [
                {"data": 1, "headers": {"traceparent": MESSAGE_TRACEPARENT}},
                {"data": 2, "headers": {"traceparent": other, "tracestate": "a=b"}},
                {"data": 3},
                {"data": 4, "headers": {"traceparent": "not-a-traceparent"}},
            ]
        }
        r = await client.post(
            f"/v1/topics/{topic}/messages/batch", json=body, headers={**prod, "traceparent": TRACEPARENT}
        )
        assert r.status_code == 201, r.text
        [span] = named(exported, f"publish {topic}")
        assert span.kind is SpanKind.PRODUCER
        assert span.attributes["messaging.batch.message_count"] == 4
        assert "messaging.message.id" not in span.attributes
        assert hex_span(span.parent) == PARENT
        linked = {(hex_trace(link.context), hex_span(link.context)) for link in span.links}
        assert linked == {(MESSAGE_TRACE, MESSAGE_SPAN), ("1" * 32, "2" * 16)}
        assert [link.context.trace_state.get("a") for link in span.links if link.context.trace_state] == ["b"]

    async def test_plain_batch_publish(self, client, prod, exported) -> None:
        topic = unique_name("plain")
        await make_topic(client, prod, topic, partitions=2)
        r = await client.post(
            f"/v1/topics/{topic}/messages/batch",
            json={"messages": [{"data": i} for i in range(5)]},
            headers=prod,
        )
        assert r.status_code == 201
        [span] = named(exported, f"publish {topic}")
        assert span.attributes["messaging.batch.message_count"] == 5
        assert span.links == ()

    async def test_a_refused_publish_ends_its_span_with_an_error(self, client, prod, exported) -> None:
        r = await client.post("/v1/topics/nowhere-to-be-found/messages", json={"data": 1}, headers=prod)
        assert r.status_code == 404
        [span] = named(exported, "publish nowhere-to-be-found")
        assert span.status.status_code.name == "ERROR"

    async def test_pull_receive_links_each_message_and_settle_names_it(self, client, prod, exported) -> None:
        topic = unique_name("pull")
        await make_topic(client, prod, topic, partitions=1)
        member = await join(client, prod, topic, "workers", startFrom="earliest")
        published = []
        for traceparent in (MESSAGE_TRACEPARENT, None):
            headers = {"traceparent": traceparent} if traceparent else {}
            r = await client.post(
                f"/v1/topics/{topic}/messages", json={"data": 1, "headers": headers}, headers=prod
            )
            published.append(r.json()["id"])
        poll_context = f"00-{TRACE}-{'3' * 16}-01"
        r = await client.post(
            f"{member.base}/poll",
            json={**member.ident(), "maxMessages": 10},
            headers={**prod, "traceparent": poll_context},
        )
        assert [m["id"] for m in r.json()["messages"]] == published
        [receive] = named(exported, f"receive {topic}")
        assert receive.kind is SpanKind.CONSUMER
        assert dict(receive.attributes) == {
            "messaging.system": "queuecore",
            "messaging.destination.name": topic,
            "messaging.operation.name": "receive",
            "messaging.operation.type": "receive",
            "messaging.consumer.group.name": "workers",
            "messaging.batch.message_count": 2,
            "messaging.destination.partition.id": "0",
        }
        assert hex_span(receive.parent) == "3" * 16
        [link] = receive.links  # the second message carries no context
        assert (hex_trace(link.context), hex_span(link.context)) == (MESSAGE_TRACE, MESSAGE_SPAN)
        assert link.attributes["messaging.message.id"] == published[0]

        await member.ack([published[0]])
        r = await client.post(
            f"{member.base}/nack", json={**member.ident(), "id": published[1]}, headers=prod
        )
        assert r.status_code == 200
        ack, nack = named(exported, f"settle {topic}")
        assert ack.attributes["messaging.operation.name"] == "ack"
        assert nack.attributes["messaging.operation.name"] == "nack"
        for span, message_id in ((ack, published[0]), (nack, published[1])):
            assert span.attributes["messaging.operation.type"] == "settle"
            assert span.attributes["messaging.message.id"] == message_id
            assert span.attributes["messaging.consumer.group.name"] == "workers"
            assert span.attributes["messaging.destination.partition.id"] == "0"

    async def test_an_empty_poll_is_a_receive_of_nothing(self, client, prod, exported) -> None:
        topic = unique_name("empty")
        await make_topic(client, prod, topic, partitions=1)
        member = await join(client, prod, topic, "workers")
        assert await member.poll() == []
        [receive] = named(exported, f"receive {topic}")
        assert receive.attributes["messaging.batch.message_count"] == 0
        assert receive.parent is None


class _Receiver(BaseHTTPRequestHandler):
    """``POST /v1/traces``: an OTLP/HTTP protobuf export, decoded and kept by the server."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.exports.append((self.path, request))  # type: ignore[attr-defined]
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def otlp_receiver() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.exports = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _spans(receiver: ThreadingHTTPServer) -> tuple[list[Any], set[str]]:
    """Every span received, and the service names of their resources."""
    spans, services = [], set()
    for path, request in receiver.exports:  # type: ignore[attr-defined]
        assert path == "/v1/traces"
        for resource_spans in request.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    services.add(attribute.value.string_value)
            for scope_spans in resource_spans.scope_spans:
                spans.extend(scope_spans.spans)
    return spans, services


def _attributes(span: Any) -> dict[str, Any]:
    out = {}
    for attribute in span.attributes:
        value = attribute.value
        out[attribute.key] = value.int_value if value.HasField("int_value") else value.string_value
    return out


class TestOtlpExport:
    async def test_a_server_exports_publish_receive_and_settle_over_otlp(
        self, otlp_receiver: ThreadingHTTPServer, tmp_path: Path
    ) -> None:
        endpoint = f"http://127.0.0.1:{otlp_receiver.server_address[1]}"
        env = server_env(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_SERVICE_NAME="queuecore-otlp-test",
            OTEL_BSP_SCHEDULE_DELAY="100",
        )
        process = await asyncio.to_thread(bootstrapped_server, env, tmp_path, "tracing")
        try:
            api = Api(process)
            topic = await asyncio.to_thread(api.topic, partitions=1, delivery="exactly-once")
            r = await asyncio.to_thread(
                httpx.post,
                f"{process.url}/v1/topics/{topic}/messages",
                json={"data": {"order": 1}},
                headers={**api.headers, "traceparent": TRACEPARENT},
            )
            assert r.status_code == 201, r.text
            message_id = r.json()["id"]
            consumer = await Consumer.open(api, topic)
            [message] = await consumer.messages(1)
            assert message["headers"] == {"traceparent": TRACEPARENT}
            answer = await consumer.ack([message_id])
            assert answer["ids"] == [message_id]
            await consumer.close()
        finally:
            await asyncio.to_thread(process.stop)  # the server flushes its spans as it stops

        spans, services = _spans(otlp_receiver)
        assert services == {"queuecore-otlp-test"}
        by_name = {span.name: span for span in spans}
        publish = by_name[f"publish {topic}"]
        assert publish.trace_id.hex() == TRACE and publish.parent_span_id.hex() == PARENT
        assert publish.kind == 4  # SPAN_KIND_PRODUCER
        assert _attributes(publish) == {
            "messaging.system": "queuecore",
            "messaging.destination.name": topic,
            "messaging.operation.name": "publish",
            "messaging.operation.type": "send",
            "messaging.message.id": message_id,
            "messaging.destination.partition.id": "0",
        }
        receive = by_name[f"receive {topic}"]
        assert receive.kind == 5  # SPAN_KIND_CONSUMER
        assert _attributes(receive)["messaging.consumer.group.name"] == "g"
        assert _attributes(receive)["messaging.message.id"] == message_id
        [link] = receive.links  # to the message's creation context: the publishing request's
        assert (link.trace_id.hex(), link.span_id.hex()) == (TRACE, PARENT)
        settle = by_name[f"settle {topic}"]
        assert _attributes(settle)["messaging.operation.name"] == "ack"
        assert _attributes(settle)["messaging.message.id"] == message_id
        assert json.dumps(_attributes(settle)).count(message_id) == 1


def test_off_the_server_never_loads_the_opentelemetry_sdk(tmp_path: Path) -> None:
    """A server without tracing settings serves a traced publish without importing OpenTelemetry's SDK or
    exporter (FastAPI itself imports the API package)."""
    script = f"""
import asyncio, os, sys
import httpx
from app.main import create_app
from app.settings import Settings
from app.cli import migrate
from app.kit import tracing

settings = Settings(data_dir={str(tmp_path)!r})
migrate(settings)

async def main():
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            r = await http.post("/v1/topics/none/messages", json={{"data": 1}},
                                headers={{"traceparent": "{TRACEPARENT}"}})
            assert r.status_code == 401, r.text
    assert not tracing.enabled
    loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter")))
    assert not loaded, loaded

asyncio.run(main())
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUECORE_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_tracing_is_off_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.settings import Settings

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert not Settings().tracing_enabled()
    assert Settings(otel_enabled=True).tracing_enabled()
    assert Settings(otel_endpoint="http://127.0.0.1:4318").tracing_enabled()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert Settings().tracing_enabled()
    assert not Settings(otel_enabled=False).tracing_enabled()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not Settings(otel_enabled=True).tracing_enabled()
