"""``GET /v1/topics/{name}/groups/{group}/events``: a group member over Server-Sent Events.

Everything that can refuse the stream is checked before it starts and answered with the error envelope:
a bad parameter (400), a missing, malformed, expired or revoked key or token (401), a token for another
topic or group (401), the rate limit (429: opening a stream is one ``consume`` request), too many open
push connections of the key on this process (429), a missing topic (404), a group past the topic's
groups quota (403), a join the group refuses. The member joins before the answer starts, so a join error
is an envelope too.

Then ``200 text/event-stream`` (``app/kit/sse.py``): ``welcome`` (``{memberId, generationId,
assignments}``), ``message`` events (``id`` = the message id, ``data`` = the message exactly as a poll
renders it), ``rebalance`` (``{memberId, generationId, assignments}``) after the group rebalanced, and a
``: keepalive`` comment when nothing was sent for ``sse_keepalive_seconds`` (15 s). Acks, nacks and
extends are the pull calls with the member id and generation. The stream is a ``StreamMember``
(``app/broker/delivery/streams.py``); it leaves the group when the stream ends, whoever ends it.

The stream is registered with ``connections.ConnectionRegistry`` (kind ``sse``, counted toward the key's
push connection cap): a revoked key (or deleted project, or lowered cap) gets an ``error`` event holding
the envelope and the stream ends; a draining process (SIGTERM) sends ``draining`` and ends it, and the
client reconnects (an ``EventSource`` does so by itself, after the ``retry`` the welcome sets).

``Last-Event-ID`` (sent by a reconnecting ``EventSource``) is accepted and changes nothing: what is
delivered again is decided by acks, not by the id a client saw last (unacked messages of the member
that left are redelivered to whoever owns their partition now).

Cross-origin: the answers carry ``Access-Control-Allow-Origin: *`` so that a page on any origin may read
the stream with an ``EventSource`` (which sends no cookies by default, and this API reads none): the
credential is the ``?token=`` in the URL (a short-lived token bound to one topic), or a key in a header
for non-browser clients. No preflight is needed (a simple GET).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Header, Query, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.api.deps import ServicesDep, charge, topics_of
from app.api.routing import JsonRoute
from app.api.schemas.constraints import GroupNamePath, TopicNamePath
from app.api.stream_auth import OTHER_TOPIC, authenticate_stream
from app.broker import groups
from app.broker.connections import Connection
from app.broker.delivery.frames import MAX_IN_FLIGHT
from app.broker.delivery.streams import StreamEvent, StreamMember
from app.broker.errors import CODED_ERRORS, CodedError, Draining
from app.broker.rate_limits import Category
from app.errors import ApiError, coded_error_body, responses
from app.kit import sse
from app.services import Services

logger = logging.getLogger("queuecore.sse")

router = APIRouter(tags=["consumers"], route_class=JsonRoute)

RETRY_MS = 1000  # an EventSource reconnects this long after a stream ends (e.g. draining)
_GOODBYE_SECONDS = 5.0  # how long a stream being ended may take to finish writing


def _envelope(request_id: str, error: CodedError) -> bytes:
    return orjson.dumps({"error": coded_error_body(request_id, error)})


def _encode(events: list[StreamEvent]) -> bytes:
    out = []
    for item in events:
        if item.kind == "keepalive":
            out.append(sse.comment("keepalive"))
        else:
            out.append(
                sse.event(
                    item.kind, item.data, id=item.id, retry_ms=RETRY_MS if item.kind == "welcome" else None
                )
            )
    return b"".join(out)


_STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": (
            "A Server-Sent Events stream: `welcome` ({memberId, generationId, assignments}), then `message` "
            "events (`id` the message id, `data` the delivered message as a poll answers it), `rebalance` "
            "({memberId, generationId, assignments}), `error` ({error: envelope}) or `draining` before the "
            "server ends the stream, and `: keepalive` comments at least every 15 s."
        ),
        "content": {
            sse.MEDIA_TYPE: {
                "schema": {"type": "string"},
                "example": (
                    'event: welcome\nretry: 1000\ndata: {"memberId":"csr_2b7Qx","generationId":3,'
                    '"assignments":[0,2]}\n\nevent: message\nid: msg_top_9Zk…\ndata: {"id":"msg_top_9Zk…",'
                    '"topic":"orders","partition":0,"offset":41,"key":null,"headers":{},"data":{"n":1},'
                    '"timestamp":"2026-03-28T10:42:18.003Z","attempt":1,'
                    '"ackDeadline":"2026-03-28T10:42:48.010Z"}\n\n: keepalive\n\n'
                ),
            }
        },
    }
}


@router.get(
    "/v1/topics/{name}/groups/{group}/events",
    response_class=Response,
    responses={
        **_STREAM_DOC,
        **responses("INVALID_REQUEST", "INVALID_API_KEY", "QUOTA_EXCEEDED", "TOPIC_NOT_FOUND"),
        **responses("RATE_LIMIT_EXCEEDED", "GROUP_ACTIVE"),
    },
)
async def events(
    name: TopicNamePath,
    group: GroupNamePath,
    request: Request,
    services: ServicesDep,
    startFrom: Literal["latest", "earliest"] = "latest",
    maxInFlight: Annotated[int, Query(ge=1, le=MAX_IN_FLIGHT)] = 100,
    token: Annotated[str | None, Query(description="A token from POST /v1/tokens/websocket")] = None,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", description="Accepted; acks decide redelivery")
    ] = None,
) -> Response:
    """Join the group as a member streaming its messages (Server-Sent Events). Auth by the
    ``Authorization`` header or ``?token=``; ack, nack and extend with the pull calls."""
    groups.validate_name(group)
    principal, bound_topic_id = await authenticate_stream(request, services, name, group)
    state = request.scope["state"]
    state["key_id"] = principal.key_id
    state["principal"] = principal
    state["usage"] = services.usage
    await charge(services, request, principal, Category.consume)
    cap = services.connections.cap(principal.tier, principal.custom_limits)
    if services.connections.push_count(principal.key_id) >= cap:
        raise ApiError(
            "RATE_LIMIT_EXCEEDED",
            f"This API key has {cap} consumer connections open on this server already; close one first.",
            headers={"Retry-After": "1"},
        )
    topic = await topics_of(services, principal).get(name)
    if bound_topic_id is not None and bound_topic_id != topic.id:
        raise ApiError("INVALID_API_KEY", OTHER_TOPIC)  # the name was deleted and re-created since
    await groups.ensure_exists(services.metadata, topic, group, services.known_groups)
    member = StreamMember(
        services.metadata,
        services.log,
        topic,
        group,
        start_from=startFrom,
        max_in_flight=maxInFlight,
        keepalive_seconds=services.settings.sse_keepalive_seconds,
    )
    welcome = await member.join()
    return EventStream(services, member, welcome, principal.key_id, str(state.get("request_id", "")))


class EventStream(Response):
    """The stream's answer: runs the member's delivery until the client, the key or the process ends it."""

    media_type = sse.MEDIA_TYPE

    def __init__(
        self, services: Services, member: StreamMember, welcome: StreamEvent, key_id: str, request_id: str
    ) -> None:
        super().__init__(
            media_type=sse.MEDIA_TYPE,
            headers={
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # proxies (nginx) pass each event on at once
                "Access-Control-Allow-Origin": "*",
            },
        )
        # A stream has no length: chunked until the server ends it.
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self._services = services
        self._member = member
        self._welcome = welcome
        self._key_id = key_id
        self._request_id = request_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        member, services = self._member, self._services
        finished = asyncio.Event()
        ending: list[CodedError] = []

        def end(error: CodedError) -> None:
            ending.append(error)
            member.stop()
            finished.set()

        async def emit(items: list[StreamEvent]) -> None:
            await send({"type": "http.response.body", "body": _encode(items), "more_body": True})

        async def hang_up() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            services.connections.release(connection)  # gone: a reconnect at once is not refused
            member.stop()
            finished.set()

        connection: Connection = services.connections.open(self._key_id, "sse", end)
        listener = asyncio.ensure_future(hang_up())
        delivery: asyncio.Task[None] | None = None
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await emit([self._welcome])
            delivery = asyncio.create_task(member.deliver(emit), name=f"sse-{member.member_id}")
            delivery.add_done_callback(lambda _: finished.set())
            await finished.wait()
            member.stop()
            try:
                await asyncio.wait_for(asyncio.shield(delivery), _GOODBYE_SECONDS)
            except CODED_ERRORS as exc:  # e.g. the topic was deleted under the stream: said, then ended
                ending.append(exc)
            except TimeoutError:  # stuck writing to a client that reads nothing: it gets no goodbye
                delivery.cancel()
                listener.cancel()
            if ending and not listener.done():
                reason = ending[0]
                if isinstance(reason, Draining):
                    await emit([StreamEvent("draining", b"{}")])
                else:
                    await emit([StreamEvent("error", _envelope(self._request_id, reason))])
                logger.info(
                    "event stream ended: %s",
                    reason.code,
                    extra={"requestId": self._request_id, "keyId": self._key_id},
                )
        except Exception:
            logger.exception("event stream failed", extra={"requestId": self._request_id})
        finally:
            listener.cancel()
            if delivery is not None and not delivery.done():
                member.stop()
                delivery.cancel()
            # Leave before the stream ends: a client that reconnects at once finds the group settled
            # (shielded: the task itself may be cancelled at shutdown).
            with contextlib.suppress(Exception):
                await asyncio.shield(member.leave())
            services.connections.close(connection)
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
