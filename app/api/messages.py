"""Publishing and reading calls. The bodies are parsed with orjson, not pydantic (the hot path)."""

from __future__ import annotations

import re
import time
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel
from starlette.responses import Response

from app.api import negotiation
from app.api.deps import (
    AdminTopics,
    ConsumeTopics,
    PublishKey,
    ServicesDep,
    authenticate_bearer,
    scope_of,
)
from app.api.routing import JsonRoute
from app.api.schemas.constraints import (
    IDEMPOTENCY_KEY_PATTERN,
    MessageIdPath,
    PartitionPath,
    Timestamp,
    TopicNamePath,
)
from app.api.schemas.messages import BatchIn, BatchPublished, Message, MessageIn, MessagePage, Published
from app.broker import publishing, quotas, reading, record_frames
from app.broker import tracing as spans
from app.broker.errors import InvalidRequest
from app.broker.keys import Principal
from app.broker.quotas import Quota
from app.broker.rate_limits import Category
from app.broker.topics import TopicRef
from app.errors import ApiError, responses
from app.kit import tracing
from app.kit.json_limits import MAX_DEPTH
from app.services import Services

router = APIRouter(prefix="/v1/topics/{name}", tags=["messages"], route_class=JsonRoute)

_AUTH = ("INVALID_API_KEY", "RATE_LIMIT_EXCEEDED")
_REPLAYED = {"Idempotent-Replayed": "true"}


def _json(payload: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(payload, status_code=status, media_type="application/json", headers=headers)


def _parse(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        if str(error).startswith("depth limit exceeded"):  # past orjson's own 1,024 levels
            raise InvalidRequest.field(
                "body", f"nested deeper than {MAX_DEPTH} levels of arrays and objects"
            ) from None
        raise ApiError(
            "INVALID_REQUEST",
            "The request body is not valid JSON.",
            details=[{"field": "body", "issue": "malformed JSON"}],
        ) from None


_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_context(traceparent: str | None, tracestate: str | None) -> dict[str, str] | None:
    """A request's W3C Trace Context headers, when ``traceparent`` is well formed (an invalid one is
    ignored, as the Trace Context spec says a receiver does); ``tracestate`` only beside it."""
    if traceparent is None:
        return None
    traceparent = traceparent.strip()
    if len(traceparent) > 55 or not _TRACEPARENT.fullmatch(traceparent) or traceparent.startswith("ff"):
        return None
    context = {"traceparent": traceparent}
    if tracestate is not None and 0 < len(tracestate.strip()) <= 512:
        context["tracestate"] = tracestate.strip()
    return context


def _request_body(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": model.model_json_schema(ref_template="#/components/schemas/{model}")
                }
            },
        }
    }


_IDEMPOTENCY_HEADER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {
        "type": "string",
        "pattern": IDEMPOTENCY_KEY_PATTERN,
        "maxLength": publishing.MAX_IDEMPOTENCY_KEY,
        "title": "Idempotency-Key",
    },
    "description": "1 to 256 printable characters (the contract names the ASCII ones); one namespace with "
    "a batch item's idempotencyKey.",
}


@router.post(
    "/messages",
    status_code=201,
    response_model=Published,
    openapi_extra={**_request_body(MessageIn), "parameters": [_IDEMPOTENCY_HEADER]},
    responses=responses(
        "INVALID_REQUEST",
        *_AUTH,
        "QUOTA_EXCEEDED",
        "TOPIC_NOT_FOUND",
        "PAYLOAD_TOO_LARGE",
        "SERVICE_UNAVAILABLE",
    ),
)
async def publish(name: TopicNamePath, request: Request) -> Response:
    """Publish one message; answers once it is durable. A repeated ``Idempotency-Key`` answers the
    original result with ``Idempotent-Replayed: true``."""
    # Served by ``publish_lane`` in practice; this is the same call through the router.
    services: Services = request.app.state.services
    headers = request.headers
    key = await authenticate_bearer(
        services, request.scope["state"], headers.get("authorization", ""), Category.publish
    )
    body, replayed = await publish_one(
        services,
        request.scope["state"],
        key,
        name,
        headers.get("idempotency-key"),
        await request.body(),
        trace_context(headers.get("traceparent"), headers.get("tracestate")),
    )
    return _json(body, 201, _REPLAYED if replayed else None)


async def publish_one(
    services: Services,
    state: dict[str, Any],
    key: Principal,
    name: str,
    idempotency_key: str | None,
    raw: bytes,
    trace: dict[str, str] | None = None,
) -> tuple[bytes, bool]:
    """The single publish once authenticated: the answer's JSON, and whether it was a replay. ``trace``
    is the request's W3C trace context (``trace_context``), kept with a message that carries none."""
    if idempotency_key is not None:
        publishing.validate_idempotency_key(idempotency_key)
    message = publishing.parse_message(_parse(raw))
    publishing.check_integers(raw, (message.data,), batch=False)
    sent = message
    if trace is not None:
        message = publishing.with_trace_context(message, trace)
    check_stored_bytes(services, key)
    publisher = services.publisher
    if tracing.enabled:
        with spans.publishing(name, trace, [sent.headers], batch=False) as span:
            topic, placed, replayed = await publisher.publish(scope_of(key), name, message, idempotency_key)
            spans.placed(
                span, [publisher.message_id(topic, placed.partition, placed.offset)], [placed.partition]
            )
    else:
        topic, placed, replayed = await publisher.publish(scope_of(key), name, message, idempotency_key)
    state["messages"], state["data_bytes"] = (0, 0) if replayed else (1, len(message.data))
    body = publisher.result(topic, placed)
    body["latency"] = placed.latency_ms
    body["durability"] = services.log.durability_for(topic.replicas)
    return orjson.dumps(body), replayed


@router.post(
    "/messages/batch",
    status_code=201,
    response_model=BatchPublished,
    openapi_extra=_request_body(BatchIn),
    responses=responses(
        "INVALID_REQUEST",
        *_AUTH,
        "QUOTA_EXCEEDED",
        "TOPIC_NOT_FOUND",
        "PAYLOAD_TOO_LARGE",
        "SERVICE_UNAVAILABLE",
    ),
)
async def publish_batch(
    name: TopicNamePath, request: Request, key: PublishKey, services: ServicesDep
) -> Response:
    """Publish 1–1000 messages atomically: all are written or none. Items whose ``idempotencyKey`` was
    seen answer ``replayed: true`` and are not written again."""
    # Served by ``publish_lane`` in practice; this is the same call through the router.
    started = time.perf_counter()
    headers = request.headers
    body, replayed = await publish_many(
        services,
        request.scope["state"],
        key,
        name,
        await request.body(),
        started,
        trace_context(headers.get("traceparent"), headers.get("tracestate")),
    )
    return _json(body, 201, _REPLAYED if replayed else None)


async def publish_many(
    services: Services,
    state: dict[str, Any],
    key: Principal,
    name: str,
    raw: bytes,
    started: float,
    trace: dict[str, str] | None = None,
) -> tuple[bytes, bool]:
    """The batch publish once authenticated: the answer's JSON, and whether every item was a replay.
    ``started`` is when the call began (the answer's ``latency``); ``trace`` the request's trace
    context, the parent of the publish span (not stored: each message carries its own, if any)."""
    values, messages = _parse_batch(raw)
    check_stored_bytes(services, key)
    if tracing.enabled:
        sent = [None] * len(values) if values is not None else [m.headers for m in messages]
        with spans.publishing(name, trace, sent, batch=True):
            if values is not None:
                return await _publish_plain(services, state, key, name, values, started), False
            return await _publish_parsed(services, state, key, name, messages, started)
    if values is not None:  # bare messages only, the common case
        return await _publish_plain(services, state, key, name, values, started), False
    return await _publish_parsed(services, state, key, name, messages, started)


async def _publish_parsed(
    services: Services,
    state: dict[str, Any],
    key: Principal,
    name: str,
    messages: list[publishing.OutgoingMessage],
    started: float,
) -> tuple[bytes, bool]:
    """A batch with keys, headers, partitions or idempotency keys: every message parsed."""
    publisher = services.publisher
    topic, placed, replayed = await publisher.publish_batch(scope_of(key), name, messages)
    state["messages"] = replayed.count(False)
    state["data_bytes"] = sum(len(m.data) for m, again in zip(messages, replayed, strict=True) if not again)
    items = publisher.results_json(topic, placed, replayed)
    return _batch_answer(services, topic, len(placed), started, items), all(replayed)


def _batch_answer(services: Services, topic: TopicRef, count: int, started: float, items: bytes) -> bytes:
    """A batch publish's answer, around its ``items`` (a JSON array the publisher rendered)."""
    return b'{"count":%d,"latency":%d,"durability":%s,"messages":%s}' % (
        count,
        round((time.perf_counter() - started) * 1000),
        orjson.dumps(services.log.durability_for(topic.replicas)),
        items,
    )


def check_stored_bytes(services: Services, key: Principal) -> None:
    """403 ``QUOTA_EXCEEDED`` while the key's project stores as much as its tier allows (measured every
    few seconds off this path: ``stored_bytes.py``); a body that is wrong is still answered 400 first."""
    services.stored_bytes.check(
        key.project_id, quotas.limit_for(key.tier, key.custom_limits, Quota.stored_bytes)
    )


def _parse_batch(raw: bytes) -> tuple[list[bytes] | None, list[publishing.OutgoingMessage]]:
    """The data of a batch of bare messages (``plain_batch``), else every message parsed. The parsed body
    does not outlive this call: a batch waiting for the disk does not keep it, nor the cyclic GC walk it
    (a thousand dicts per batch; freeing it here took a quarter off the main thread's time per batch)."""
    body = _parse(raw)
    values = publishing.plain_batch(body)
    if values is not None:
        publishing.check_integers(raw, values, batch=True)
        return values, []
    messages = publishing.parse_batch(body)
    publishing.check_integers(raw, [m.data for m in messages], batch=True)
    return None, messages


async def _publish_plain(
    services: Services, state: dict[str, Any], key: Principal, name: str, values: list[bytes], started: float
) -> bytes:
    """A batch of bare messages (``publishing.plain_batch``): the same answer, its items rendered as JSON
    by the publisher without a dict per message."""
    topic, items = await services.publisher.publish_plain(scope_of(key), name, values)
    state["messages"], state["data_bytes"] = len(values), sum(map(len, values))
    return _batch_answer(services, topic, len(values), started, items)


@router.get(
    "/messages/{message_id}",
    response_model=Message,
    responses=responses("INVALID_REQUEST", *_AUTH, "TOPIC_NOT_FOUND", "MESSAGE_NOT_FOUND"),
)
async def get_message(
    name: TopicNamePath, message_id: MessageIdPath, topics: AdminTopics, services: ServicesDep
) -> Response:
    """One message by id (ids encode topic, partition and offset)."""
    if message_id == "batch":
        raise ApiError(
            "METHOD_NOT_ALLOWED", "GET is not allowed on /messages/batch.", 405, headers={"Allow": "POST"}
        )
    topic = await topics.get(name)
    return _json(await reading.get_message(services.log, topic, message_id))


@router.get(
    "/partitions/{partition}/messages",
    response_model=MessagePage,
    responses=responses("INVALID_REQUEST", "OFFSET_OUT_OF_RANGE", *_AUTH, "TOPIC_NOT_FOUND"),
)
async def read_partition(
    name: TopicNamePath,
    partition: PartitionPath,
    topics: ConsumeTopics,
    services: ServicesDep,
    fromOffset: Annotated[int | None, Query(ge=0)] = None,
    fromTimestamp: Annotated[Timestamp | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """Messages of one partition by offset or time, without a consumer group (browse, replay, Spark)."""
    topic = await topics.get(name)
    page = await reading.read_partition(
        services.log, topic, partition, from_offset=fromOffset, from_timestamp=fromTimestamp, limit=limit
    )
    body = (
        b'{"data":['
        + b",".join(page.messages)
        + b'],"nextOffset":'
        + str(page.next_offset).encode()
        + b',"earliestOffset":'
        + str(page.earliest_offset).encode()
        + b"}"
    )
    return _json(body)


@router.get(
    "/partitions/{partition}/records",
    response_class=Response,
    responses={
        200: {
            "description": (
                "The records, framed in columns with a CRC-32 per frame (docs/api.md, 'Bulk reads'); "
                "the same records, from the same start, as the JSON read of `/messages` answers."
            ),
            "content": {record_frames.MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        },
        **responses("INVALID_REQUEST", "OFFSET_OUT_OF_RANGE", *_AUTH, "TOPIC_NOT_FOUND", "NOT_ACCEPTABLE"),
    },
)
async def read_records(
    request: Request,
    name: TopicNamePath,
    partition: PartitionPath,
    topics: ConsumeTopics,
    services: ServicesDep,
    fromOffset: Annotated[int | None, Query(ge=0)] = None,
    fromTimestamp: Annotated[Timestamp | None, Query()] = None,
    untilOffset: Annotated[int | None, Query(ge=0, description="Stop before this offset.")] = None,
    limit: Annotated[int, Query(ge=1, le=reading.MAX_BULK_READ)] = reading.DEFAULT_BULK_READ,
) -> Response:
    """The bulk read of one partition for stream readers (Spark): what the JSON read answers, as
    `application/vnd.queuecore.records`, up to 50,000 records (about 16 MiB) per call. One call is one
    `consume` request. An `Accept` header that admits neither that type nor a wildcard (`*/*`,
    `application/*`) answers 406 `NOT_ACCEPTABLE`; a request without one is answered."""
    # Before the topic is looked up: what the route can answer does not depend on the topic.
    negotiation.require(request, record_frames.MEDIA_TYPE)
    topic = await topics.get(name)
    run = await reading.read_records(
        services.log,
        topic,
        partition,
        from_offset=fromOffset,
        from_timestamp=fromTimestamp,
        until_offset=untilOffset,
        limit=limit,
    )
    parts = record_frames.encode(topic, partition, run.chunks, run.next_offset, run.earliest_offset)
    return Response(b"".join(parts), media_type=record_frames.MEDIA_TYPE)
