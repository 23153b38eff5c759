"""Pull consumer calls (REST, stateless): join, heartbeat, leave, poll, ack, nack, extend.

Every call is charged as ``consume``. Any API process answers any member's call: the truth about
members, leases and offsets is in the metadata store (``app/broker/delivery``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.deps import ConsumeKey, ConsumeTopics, ServicesDep
from app.api.messages import trace_context
from app.api.routing import JsonRoute
from app.api.schemas.constraints import GroupNamePath, MemberIdPath, TopicNamePath
from app.api.schemas.consumers import (
    AckIn,
    ExtendIn,
    HeartbeatIn,
    HeartbeatOut,
    Joined,
    JoinIn,
    NackIn,
    Polled,
    PollIn,
    Settled,
)
from app.broker import durations
from app.broker import tracing as spans
from app.broker.delivery import leases, membership
from app.broker.delivery.membership import MemberRef
from app.broker.errors import CodedError
from app.errors import ApiError, responses
from app.kit import tracing

router = APIRouter(prefix="/v1/topics/{name}/groups/{group}", tags=["consumers"], route_class=JsonRoute)

_AUTH = ("INVALID_API_KEY", "RATE_LIMIT_EXCEEDED")
_MEMBER = ("MEMBER_NOT_FOUND", "STALE_GENERATION")


def _trace(request: Request) -> dict[str, str] | None:
    """The call's W3C trace context: the parent of its ``receive`` or ``settle`` span."""
    headers = request.headers
    return trace_context(headers.get("traceparent"), headers.get("tracestate"))


def _settled(result: leases.Settlement) -> Settled:
    return Settled.model_validate({"ids": result.ids, "failed": result.failed})


async def _settle(
    request: Request,
    name: str,
    group: str,
    action: str,
    ids: list[Any],
    settling: Awaitable[leases.Settlement],
) -> Settled:
    """Await ``settling`` (an ack or a nack), inside its span when tracing is on."""
    if tracing.enabled:
        with spans.settling(name, group, action, ids, _trace(request)):
            return _settled(await settling)
    return _settled(await settling)


@router.post(
    "/members",
    response_model=Joined,
    responses=responses("INVALID_REQUEST", *_AUTH, "QUOTA_EXCEEDED", "TOPIC_NOT_FOUND"),
)
async def join(
    name: TopicNamePath, group: GroupNamePath, body: JoinIn, topics: ConsumeTopics, services: ServicesDep
) -> Joined:
    """Join a group (created if needed: 403 ``QUOTA_EXCEEDED`` past the topic's groups quota), or rejoin
    with ``memberId``; answers the member's partitions."""
    topic = await topics.get(name)
    joined = await membership.join(
        services.metadata,
        services.log,
        topic,
        group,
        member_id=body.memberId,
        start_from=body.startFrom,
        session_timeout=body.sessionTimeout,
        clock=services.clock,
    )
    return Joined(
        memberId=joined.member_id,
        generationId=joined.generation,
        assignments=joined.assignments,
        sessionTimeout=joined.session_timeout,
    )


@router.post(
    "/members/{member_id}/heartbeat",
    response_model=HeartbeatOut,
    responses=responses("INVALID_REQUEST", *_AUTH, "TOPIC_NOT_FOUND", "MEMBER_NOT_FOUND"),
)
async def heartbeat(
    name: TopicNamePath,
    group: GroupNamePath,
    member_id: MemberIdPath,
    body: HeartbeatIn,
    topics: ConsumeTopics,
    services: ServicesDep,
) -> HeartbeatOut:
    """Keep the member alive; ``shouldRejoin`` after a rebalance (join again with the same memberId)."""
    topic = await topics.get(name)
    beat = await membership.heartbeat(
        services.metadata, MemberRef(topic, group, member_id, body.generationId), clock=services.clock
    )
    return HeartbeatOut(
        generationId=beat.generation, shouldRejoin=beat.should_rejoin, assignments=beat.assignments
    )


@router.delete(
    "/members/{member_id}",
    status_code=204,
    responses=responses(*_AUTH, "TOPIC_NOT_FOUND", "MEMBER_NOT_FOUND"),
)
async def leave(
    name: TopicNamePath,
    group: GroupNamePath,
    member_id: MemberIdPath,
    topics: ConsumeTopics,
    services: ServicesDep,
) -> Response:
    """Leave the group: its partitions and unacked messages go to the other members at once."""
    topic = await topics.get(name)
    await membership.leave(services.metadata, topic, group, member_id, clock=services.clock)
    return Response(status_code=204)


async def _hang_up(request: Request, abandoned: asyncio.Event) -> None:
    """Set ``abandoned`` when the client disconnects (the body is read: what comes next is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    abandoned.set()


@router.post(
    "/poll",
    response_model=Polled,
    responses=responses("INVALID_REQUEST", *_AUTH, "TOPIC_NOT_FOUND", *_MEMBER),
)
async def poll(
    name: TopicNamePath,
    group: GroupNamePath,
    body: PollIn,
    topics: ConsumeTopics,
    key: ConsumeKey,
    services: ServicesDep,
    request: Request,
) -> Response:
    """Up to ``maxMessages`` messages of the member's partitions, in offset order per partition; waits
    up to ``waitSeconds`` for the first. Counts as a heartbeat. A client that hangs up ends the wait;
    so does the key's revocation (or its project's deletion), answered 401 ``INVALID_API_KEY``."""
    topic = await topics.get(name)
    abandoned = asyncio.Event()
    listener = asyncio.ensure_future(_hang_up(request, abandoned)) if body.waitSeconds > 0 else None
    ended: list[CodedError] = []

    def end(error: CodedError) -> None:
        ended.append(error)
        abandoned.set()  # ends the wait; nothing more is leased

    connection = services.connections.open(key.key_id, "poll", end) if listener is not None else None
    member = MemberRef(topic, group, body.memberId, body.generationId)
    polling = leases.poll(
        services.metadata,
        services.log,
        member,
        max_messages=body.maxMessages,
        wait_seconds=body.waitSeconds,
        abandoned=abandoned,
        clock=services.clock,
    )
    try:
        if tracing.enabled:
            with spans.receiving(name, group, _trace(request)) as span:
                messages = await polling
                spans.delivered(span, messages)
        else:
            messages = await polling
    finally:
        if listener is not None:
            listener.cancel()
        if connection is not None:
            services.connections.close(connection)
    if ended:
        raise ApiError.from_broker(ended[0])
    return Response(b'{"messages":[' + b",".join(messages) + b"]}", media_type="application/json")


@router.post(
    "/ack",
    response_model=Settled,
    responses=responses("INVALID_REQUEST", *_AUTH, "TOPIC_NOT_FOUND", *_MEMBER),
)
async def ack(
    name: TopicNamePath,
    group: GroupNamePath,
    body: AckIn,
    topics: ConsumeTopics,
    services: ServicesDep,
    request: Request,
) -> Settled:
    """Acknowledge messages; answered once durable. Per id: ``ACK_EXPIRED`` after the deadline,
    ``MESSAGE_NOT_FOUND`` or ``INVALID_REQUEST`` for ids that were not delivered or are malformed."""
    topic = await topics.get(name)
    member = MemberRef(topic, group, body.memberId, body.generationId)
    acking = leases.ack(services.metadata, member, body.ids, clock=services.clock)
    return await _settle(request, name, group, "ack", body.ids, acking)


@router.post(
    "/nack",
    response_model=Settled,
    responses=responses("INVALID_REQUEST", *_AUTH, "TOPIC_NOT_FOUND", *_MEMBER),
)
async def nack(
    name: TopicNamePath,
    group: GroupNamePath,
    body: NackIn,
    topics: ConsumeTopics,
    services: ServicesDep,
    request: Request,
) -> Settled:
    """Give a message back for redelivery, at once or after ``delay``; later messages are not held up."""
    delay_ms = durations.parse_delay(body.delay) if body.delay is not None else None
    topic = await topics.get(name)
    member = MemberRef(topic, group, body.memberId, body.generationId)
    nacking = leases.nack(
        services.metadata,
        services.log,
        member,
        body.id,
        delay_ms,
        body.reason,
        dead_letter=body.deadLetter,
        clock=services.clock,
    )
    return await _settle(request, name, group, "nack", [body.id], nacking)


@router.post(
    "/extend",
    response_model=Settled,
    responses=responses("INVALID_REQUEST", *_AUTH, "TOPIC_NOT_FOUND", *_MEMBER),
)
async def extend(
    name: TopicNamePath, group: GroupNamePath, body: ExtendIn, topics: ConsumeTopics, services: ServicesDep
) -> Settled:
    """Move the ack deadline of messages to ``seconds`` from now."""
    topic = await topics.get(name)
    member = MemberRef(topic, group, body.memberId, body.generationId)
    return _settled(
        await leases.extend(services.metadata, member, body.ids, body.seconds, clock=services.clock)
    )
