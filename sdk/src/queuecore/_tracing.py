"""Trace context through messages, with OpenTelemetry when it is installed (``pip install queuecore[otel]``).

Publishing injects the current span's W3C context: a single publish as the ``traceparent`` / ``tracestate``
request headers (the server keeps them as the message's headers), a batch into each item's ``headers``
(unless the caller set a ``traceparent`` there). A consumer runs each ``"message"`` handler inside a
``process <topic>`` span (kind CONSUMER) whose parent is the message's creation context, linked to it as
the messaging semantic conventions ask. Without ``opentelemetry-api`` all of this is a no-op; with it but
no SDK configured, spans are non-recording and nothing is injected.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ._version import __version__

try:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the optional dependency is absent: trace nothing
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from .types.consumed_message import ConsumedMessage

__all__ = ["current_context", "processing", "with_context"]

SYSTEM = "queuecore"
_FIELDS = ("traceparent", "tracestate")


def current_context() -> dict[str, str] | None:
    """The current span's ``traceparent`` (and ``tracestate``), or None without a valid current span."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return {k: v for k, v in carrier.items() if k in _FIELDS} or None


def with_context(
    headers: Mapping[str, str] | None, context: Mapping[str, str] | None
) -> dict[str, str] | None:
    """A message's headers with ``context`` added, unless it carries a ``traceparent`` of its own."""
    if context is None or (headers is not None and "traceparent" in headers):
        return dict(headers) if headers is not None else None
    return {**(headers or {}), **context}


@contextlib.contextmanager
def processing(message: ConsumedMessage, group: str) -> Iterator[None]:
    """``process <topic>`` around a handler's call on ``message``; its parent and link are the message's
    creation context (its ``traceparent`` header), when it has one."""
    if trace is None:
        yield
        return
    created = trace.get_current_span(TraceContextTextMapPropagator().extract(message.headers))
    context = created.get_span_context()
    links = [trace.Link(context)] if context.is_valid else []
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": message.topic,
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.consumer.group.name": group,
        "messaging.message.id": message.id,
        "messaging.destination.partition.id": str(message.partition),
    }
    tracer = trace.get_tracer("queuecore", __version__)
    parent = trace.set_span_in_context(created) if context.is_valid else None
    with tracer.start_as_current_span(
        f"process {message.topic}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
    ):
        yield
