"""Trace context through messages with OpenTelemetry: publishing injects the current context, consumers
run handlers in ``process`` spans parented and linked to each message's creation context. Spans are
checked with the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

# OpenTelemetry is optional (queuecore[otel]): a clean install without it skips these tests.
pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sdk_support import unique

import queuecore

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def _provider() -> None:
    """The process's tracer provider (OpenTelemetry lets it be set once) over the in-memory exporter."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER


def _published(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/batch"):
        count = len(json.loads(request.content)["messages"])
        messages = [
            {"id": f"msg_{i}", "offset": i, "partition": 0, "timestamp": "2026-01-01T00:00:00.000Z"}
            for i in range(count)
        ]
        return httpx.Response(
            201, json={"count": count, "latency": 1, "durability": "fsync", "messages": messages}
        )
    return httpx.Response(
        201,
        json={
            "id": "msg_1",
            "offset": 0,
            "partition": 0,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "latency": 1,
            "durability": "fsync",
        },
    )


def _traceparent(span: Any) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


class TestInject:
    def test_a_single_publish_sends_the_current_context_as_request_headers(self, mock_client, recorder):
        client = mock_client(_published)
        tracer = trace.get_tracer("test")
        with tracer.start_as_current_span("checkout") as span:
            client.publish("orders", {"n": 1})
        request = recorder.requests[-1]
        assert request.headers["traceparent"] == _traceparent(span)
        assert "headers" not in json.loads(request.content)  # the server keeps it with the message

    def test_no_current_span_no_header(self, mock_client, recorder):
        mock_client(_published).publish("orders", 1)
        assert "traceparent" not in recorder.requests[-1].headers

    def test_a_batch_carries_the_context_in_each_item_unless_it_has_its_own(self, mock_client, recorder):
        own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        client = mock_client(_published)
        with trace.get_tracer("test").start_as_current_span("checkout") as span:
            client.publish_batch(
                "orders",
                [
                    1,
                    queuecore.BatchMessage(data=2, headers={"tenant": "a"}),
                    queuecore.BatchMessage(data=3, headers={"traceparent": own}),
                ],
            )
        items = json.loads(recorder.requests[-1].content)["messages"]
        assert items[0]["headers"] == {"traceparent": _traceparent(span)}
        assert items[1]["headers"] == {"tenant": "a", "traceparent": _traceparent(span)}
        assert items[2]["headers"] == {"traceparent": own}

    async def test_the_async_client_injects_too(self, mock_async_client, recorder):
        client = mock_async_client(_published)
        with trace.get_tracer("test").start_as_current_span("checkout") as span:
            await client.publish("orders", 1)
            await client.publish_batch("orders", [1])
        single, batch = recorder.requests[-2:]
        assert single.headers["traceparent"] == _traceparent(span)
        assert json.loads(batch.content)["messages"][0]["headers"]["traceparent"] == _traceparent(span)


@pytest.mark.integration
class TestProcess:
    @pytest.mark.parametrize("transport", ["websocket", "pull"])
    def test_handlers_run_in_a_process_span_of_the_message_context(self, client, topic, transport, exported):
        tracer = trace.get_tracer("test")
        with tracer.start_as_current_span("checkout") as publisher:
            published = client.publish(topic, {"n": 1}, partition=1).id
        seen: list[Any] = []
        consumer = client.consume(topic, transport=transport, group=unique("g"), start_from="earliest")

        def handle(message: queuecore.ConsumedMessage) -> None:
            seen.append(trace.get_current_span().get_span_context())
            message.ack()

        consumer.on("message", handle)
        thread = threading.Thread(target=consumer.start)
        thread.start()
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        consumer.stop()
        thread.join(30)
        assert seen, "no message was handled"

        [process] = [s for s in exported.get_finished_spans() if s.name == f"process {topic}"]
        assert process.kind is trace.SpanKind.CONSUMER
        created = publisher.get_span_context()
        assert process.context.trace_id == created.trace_id  # one trace from the publisher to the handler
        assert process.parent is not None and process.parent.span_id == created.span_id
        [link] = process.links
        assert (link.context.trace_id, link.context.span_id) == (created.trace_id, created.span_id)
        assert dict(process.attributes) == {
            "messaging.system": "queuecore",
            "messaging.destination.name": topic,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.consumer.group.name": consumer.group,
            "messaging.message.id": published,
            "messaging.destination.partition.id": "1",
        }
        # The handler (a sync one, in a worker thread) ran inside the span.
        assert seen[0].span_id == process.context.span_id

    async def test_a_failing_handler_marks_its_span(self, async_client, exported):
        topic = unique("t")
        await async_client.topics.create(topic, partitions=1)
        await async_client.publish(topic, 1)
        consumer = async_client.consume(topic, group=unique("g"), start_from="earliest", transport="pull")
        failed: list[BaseException] = []

        async def handle(message: queuecore.ConsumedMessage) -> None:
            raise RuntimeError("boom")

        async def on_error(exc: BaseException) -> None:
            failed.append(exc)
            consumer.stop()

        consumer.on("message", handle).on("error", on_error)
        await consumer.start()
        assert failed
        [process] = [s for s in exported.get_finished_spans() if s.name == f"process {topic}"]
        assert process.status.status_code is trace.StatusCode.ERROR
        assert process.parent is None  # published outside any span: no context to follow
