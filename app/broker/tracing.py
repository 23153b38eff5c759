"""Spans of the broker's messaging operations, after OpenTelemetry's messaging semantic conventions.

Callers check ``app.kit.tracing.enabled`` first: with tracing off none of this runs (nor imports
OpenTelemetry). The spans, each named ``<operation> <topic>``:

    publish <topic>   PRODUCER  a single or batch publish; operation type ``send``. Its parent is the
                                request's ``traceparent``; it links to each message's own ``traceparent``.
    receive <topic>   CONSUMER  a pull poll, or a push delivery frame; links to the creation context of
                                each delivered message (the ``traceparent`` among its headers).
    settle <topic>    CLIENT    an ack or nack (REST or push frame); operation name ``ack`` / ``nack``.

Attributes: ``messaging.system`` (``queuecore``), ``messaging.destination.name`` (the topic),
``messaging.operation.name`` / ``.type``, ``messaging.consumer.group.name``, ``messaging.message.id`` (one
message), ``messaging.destination.partition.id`` (when every message is of one partition) and
``messaging.batch.message_count`` (a batch). ``process`` spans are the SDKs': they wrap the user's handler.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import orjson

from app.broker import message_ids
from app.broker.errors import InvalidRequest
from app.kit import tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Link, Span, SpanContext, SpanKind

SYSTEM = "queuecore"


def _attributes(
    topic: str, operation: str, kind: str, group: str | None = None, **more: Any
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": topic,
        "messaging.operation.name": operation,
        "messaging.operation.type": kind,
    }
    if group is not None:
        attributes["messaging.consumer.group.name"] = group
    attributes.update({k: v for k, v in more.items() if v is not None})
    return attributes


def _described(attributes: dict[str, Any], ids: Sequence[str], partitions: Iterable[int]) -> None:
    """Message id (one message), partition (when all share one), count (several)."""
    if len(ids) == 1:
        attributes["messaging.message.id"] = ids[0]
    elif len(ids) > 1:
        attributes["messaging.batch.message_count"] = len(ids)
    distinct = set(partitions)
    if len(distinct) == 1:
        attributes["messaging.destination.partition.id"] = str(distinct.pop())


@contextmanager
def _span(
    name: str,
    kind: SpanKind,
    attributes: dict[str, Any],
    parent: SpanContext | None,
    links: Sequence[Link] = (),
) -> Iterator[Span]:
    """A span around the block, ended as it exits (``ERROR`` with the exception if it raises). Never made
    the current span: nothing in the server reads it, and attaching a context costs on every call."""
    from opentelemetry.context import Context
    from opentelemetry.trace import NonRecordingSpan, Status, StatusCode, set_span_in_context

    # Never the ambient context: a span's parent is the one its request or message names, or none.
    context = set_span_in_context(NonRecordingSpan(parent)) if parent is not None else Context()
    span = tracing.tracer().start_span(name, context=context, kind=kind, attributes=attributes, links=links)
    try:
        yield span
    except BaseException as error:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        raise
    finally:
        span.end()


def _links(
    carriers: Iterable[tuple[Mapping[str, str] | None, str | None]], skip: SpanContext | None = None
) -> list[Link]:
    """A link to each message's creation context (its ``traceparent`` header), once per context; not to
    ``skip`` (the parent)."""
    from opentelemetry.trace import Link

    links: list[Link] = []
    seen: set[tuple[int, int]] = set()
    if skip is not None:
        seen.add((skip.trace_id, skip.span_id))
    for headers, message_id in carriers:
        context = tracing.span_context(headers)
        if context is None or (context.trace_id, context.span_id) in seen:
            continue
        seen.add((context.trace_id, context.span_id))
        links.append(Link(context, {"messaging.message.id": message_id} if message_id else None))
    return links


@contextmanager
def publishing(
    topic: str,
    request: Mapping[str, str] | None,
    headers: Sequence[Mapping[str, str] | None],
    *,
    batch: bool,
) -> Iterator[Span]:
    """``publish <topic>`` around a publish of messages with ``headers`` (as sent), its parent the
    request's trace context. Say where they landed with ``placed``."""
    from opentelemetry.trace import SpanKind

    parent = tracing.span_context(request)
    attributes = _attributes(topic, "publish", "send")
    if batch:
        attributes["messaging.batch.message_count"] = len(headers)
    links = _links(((h, None) for h in headers), skip=parent)
    with _span(f"publish {topic}", SpanKind.PRODUCER, attributes, parent, links) as span:
        yield span


def placed(span: Span, ids: Sequence[str], partitions: Sequence[int]) -> None:
    """Where a publish's messages landed: the id of a single one, the partition all share."""
    attributes: dict[str, Any] = {}
    if len(ids) == 1:
        attributes["messaging.message.id"] = ids[0]
    if len(set(partitions)) == 1:
        attributes["messaging.destination.partition.id"] = str(partitions[0])
    span.set_attributes(attributes)


@contextmanager
def receiving(topic: str, group: str, request: Mapping[str, str] | None = None) -> Iterator[Span]:
    """``receive <topic>`` around a pull poll (its parent the request's trace context) or a push frame;
    say what it delivered with ``delivered``."""
    from opentelemetry.trace import SpanKind

    attributes = _attributes(topic, "receive", "receive", group)
    with _span(f"receive {topic}", SpanKind.CONSUMER, attributes, tracing.span_context(request)) as span:
        yield span


def delivered(span: Span, messages: Sequence[bytes]) -> None:
    """The rendered messages a receive delivered: their count, ids and partition, and a link to each
    one's creation context. (Parses them: only ever called with tracing on.)"""
    parsed = [orjson.loads(raw) for raw in messages]
    attributes: dict[str, Any] = {}
    if not parsed:
        attributes["messaging.batch.message_count"] = 0  # a poll that found nothing
    _described(attributes, [m["id"] for m in parsed], (m["partition"] for m in parsed))
    span.set_attributes(attributes)
    for link in _links((m.get("headers"), m["id"]) for m in parsed):
        span.add_link(link.context, link.attributes)


@contextmanager
def settling(
    topic: str, group: str, operation: str, ids: Sequence[Any], request: Mapping[str, str] | None = None
) -> Iterator[Span]:
    """``settle <topic>`` around an ``ack`` or ``nack`` of ``ids`` (as the client named them)."""
    from opentelemetry.trace import SpanKind

    named = [i for i in ids if isinstance(i, str)]
    partitions = []
    for message_id in named:
        try:
            partitions.append(message_ids.decode(message_id).partition)
        except InvalidRequest:
            continue  # answered per id as malformed
    attributes = _attributes(topic, operation, "settle", group)
    _described(attributes, named, partitions)
    with _span(f"settle {topic}", SpanKind.CLIENT, attributes, tracing.span_context(request)) as span:
        yield span
