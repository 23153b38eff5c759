"""Tracing with OpenTelemetry: spans exported over OTLP/HTTP when turned on, off and free otherwise.

``enabled`` is the one check callers make before any span work: while it is False nothing here has
imported OpenTelemetry's SDK or exporter, and the hot paths (publish, deliver, ack) pay one module attribute read. ``start``
builds this process's own ``TracerProvider`` (never the global one: an application embedding the server,
or a test, keeps its own) with a batching processor, so spans are exported off the request path;
``stop`` flushes and shuts it down.

The OTLP exporter reads the standard ``OTEL_EXPORTER_OTLP_*`` variables itself (endpoint, headers,
timeout, compression); an explicit endpoint given to ``start_otlp`` wins over them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import SpanContext, Tracer

enabled = False
_provider: TracerProvider | None = None
_tracer: Tracer | None = None

SCOPE = "queuecore"


def start(processor: SpanProcessor, service_name: str | None = None) -> None:
    """Trace from now on, handing every ended span to ``processor`` (tests pass a simple one over an
    in-memory exporter). ``service_name`` None leaves it to ``OTEL_SERVICE_NAME``."""
    global enabled, _provider, _tracer
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    stop()
    attributes = {"service.name": service_name} if service_name else {}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(processor)
    _provider, _tracer = provider, provider.get_tracer(SCOPE)
    enabled = True


def start_otlp(endpoint: str | None = None, service_name: str | None = None) -> None:
    """Trace to an OTLP/HTTP collector: ``endpoint`` is its base URL (``/v1/traces`` is added), else the
    exporter's own ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = (
        OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces") if endpoint else OTLPSpanExporter()
    )
    start(BatchSpanProcessor(exporter), service_name)


def stop() -> None:
    """Export what is buffered and stop tracing (a no-op when it was off)."""
    global enabled, _provider, _tracer
    enabled = False
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()  # flushes the batch processor first


def tracer() -> Tracer:
    """The server's tracer; only while ``enabled``."""
    assert _tracer is not None, "tracing is off"
    return _tracer


_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


def span_context(carrier: Mapping[str, str] | None) -> SpanContext | None:
    """The remote span context a W3C ``traceparent`` (with ``tracestate``) in ``carrier`` names, or None
    when it carries none or an invalid one (parsed here as the Trace Context spec says: a quarter of what
    the SDK's propagator costs, on every traced publish)."""
    if not carrier:
        return None
    traceparent = carrier.get("traceparent")
    if traceparent is None:
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags, TraceState

    state = carrier.get("tracestate")
    return SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(flags, 16)),
        trace_state=TraceState.from_header([state]) if state else None,
    )
