"""``GET /v1/topics/{name}/consume``: push delivery over a WebSocket (``app/broker/delivery/push.py``).

Everything that can refuse the connection is checked before the upgrade and answered with the HTTP
status and the error envelope (``websocket.http.response``): a bad parameter (400), a missing,
malformed, expired or revoked key or token (401), a token for another topic or group (401), the
rate limit (429, opening a WebSocket is one ``consume`` request), a missing topic (404), a group it would
create past the topic's groups quota (403 ``QUOTA_EXCEEDED``; the group is made before the upgrade). Frames
after the upgrade are not charged.

An open connection is registered with ``connections.ConnectionRegistry`` under its key (a token's
minting key): when that key is revoked, its project deleted, or its tier's connection cap lowered past
it, the registry ends it and it says why in an ``error`` frame, then closes with 1008; when the process
drains (SIGTERM), a ``draining`` frame, then 1012.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import orjson
from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect

from app.api.deps import charge, topics_of
from app.api.routing import JsonRoute
from app.api.schemas.frames import CloseCode
from app.api.stream_auth import OTHER_TOPIC, authenticate_stream
from app.broker import groups, push_groups
from app.broker.delivery import membership
from app.broker.delivery.frames import validate_max_in_flight
from app.broker.delivery.push import PushMember
from app.broker.errors import CODED_ERRORS, CodedError, Draining, InvalidRequest, RateLimitExceeded
from app.broker.rate_limits import Category
from app.errors import ApiError, coded_error_body, error_response
from app.kit.websocket_protocol import KEEPALIVE
from app.services import Services

logger = logging.getLogger("queuecore.ws")

router = APIRouter(route_class=JsonRoute)


def _request_id(websocket: WebSocket) -> str:
    return str(websocket.scope.get("state", {}).get("request_id", ""))


def _error_frame(request_id: str, error: CodedError) -> bytes:
    return orjson.dumps({"type": "error", "error": coded_error_body(request_id, error)})


@router.websocket("/v1/topics/{name}/consume")
async def consume(websocket: WebSocket, name: str) -> None:
    """Push delivery to one group member; see docs/consuming.md for the frames."""
    services: Services = websocket.app.state.services
    request_id = _request_id(websocket)
    params = websocket.query_params
    try:
        try:
            group = groups.validate_name(params.get("group", ""))
            start_from = params.get("startFrom") or "latest"
            if start_from not in membership.START_FROM:
                raise InvalidRequest.field("startFrom", "must be 'earliest' or 'latest'")
            max_in_flight = validate_max_in_flight(params.get("maxInFlight"))
            principal, bound_topic_id = await authenticate_stream(websocket, services, name, group)
            websocket.scope["state"]["key_id"] = principal.key_id
            await charge(services, websocket, principal, Category.consume)
            cap = services.connections.cap(principal.tier, principal.custom_limits)
            if services.connections.push_count(principal.key_id) >= cap:
                logger.warning(
                    "push connection refused: too many open for one key",
                    extra={"requestId": request_id, "keyId": principal.key_id},
                )
                raise ApiError(
                    "RATE_LIMIT_EXCEEDED",
                    f"This API key has {cap} consumer connections open on this server already; "
                    "close one first.",
                    headers={"Retry-After": "1"},
                )
            topic = await topics_of(services, principal).get(name)
            if bound_topic_id is not None and bound_topic_id != topic.id:
                # The name was deleted and re-created since the token was issued: another topic.
                raise ApiError("INVALID_API_KEY", OTHER_TOPIC)
            # A group this connection would create past the topic's quota is refused here (403).
            await groups.ensure_exists(services.metadata, topic, group, services.known_groups)
            if services.push_workers.pushes(topic.id, group):
                raise push_groups.push_group_active()  # its members are its URL workers (409)
        except CODED_ERRORS as exc:
            raise ApiError.from_broker(exc) from None
    except ApiError as exc:
        headers = {
            name.decode(): value.decode()
            for name, value in websocket.scope["state"].get("response_headers", ())
        }
        headers.update(exc.headers)
        headers["X-Request-Id"] = request_id
        await websocket.send_denial_response(
            error_response(request_id, exc.code, exc.message, exc.status, exc.details, headers)
        )
        return

    sending = asyncio.Lock()

    async def send(frame: bytes) -> None:
        async with sending:
            await websocket.send_text(frame.decode())

    member = PushMember(
        services.metadata,
        services.log,
        topic,
        group,
        start_from=start_from,
        max_in_flight=max_in_flight,
        send=send,
        render_error=lambda error: _error_frame(request_id, error),
        roster=services.push_members,
    )
    await websocket.accept()
    key_id = principal.key_id
    delivery: asyncio.Task[None] | None = None
    # Frames are received in this task; should the delivery loop end on its own (an error), or the key
    # stop standing (``connections``: revoked, its project deleted, its tier's cap lowered), the wait for
    # the next frame is interrupted, never a frame's handling (which may be writing).
    # (No task and no ``asyncio.wait`` per frame: this is the ack path.)
    receiver = asyncio.current_task()
    assert receiver is not None
    interrupted = False
    awaiting_frame = False
    ending: CodedError | None = None

    def wake_receiver() -> None:
        if awaiting_frame and not receiver.cancelling():
            receiver.cancel()

    def end(error: CodedError) -> None:
        nonlocal ending
        ending = error
        wake_receiver()

    connection = services.connections.open(key_id, "websocket", end)
    try:
        if isinstance(ending, Draining):
            # Opened on a process already draining (a balancer notices within its health-check interval):
            # told at once to go elsewhere, before it joins and takes partitions.
            await _end_for_drain(websocket, send, request_id, None)
            return
        await send(await member.join())
        tune = websocket.scope.get("extensions", {}).get(KEEPALIVE, {}).get("tune")
        if tune is not None:  # a peer silent for the group's sessionTimeout is gone (and not sooner)
            tune(member.session_timeout_ms / 1000)
        delivery = asyncio.create_task(member.deliver(), name=f"push-{member.member_id}")

        def interrupt(_: asyncio.Task[None]) -> None:
            nonlocal interrupted
            if not member.stopped:
                interrupted = True
                wake_receiver()

        delivery.add_done_callback(interrupt)
        frame_limit = services.settings.ws_max_frames_per_second
        second, frames = 0, 0
        while not interrupted and ending is None:
            awaiting_frame = True
            try:
                message = await websocket.receive()
            except asyncio.CancelledError:
                if not interrupted and ending is None:
                    raise  # the server is shutting down
                receiver.uncancel()
                break
            finally:
                awaiting_frame = False
            if message["type"] == "websocket.disconnect":
                return
            now = int(time.monotonic())
            if now != second:
                second, frames = now, 0
            frames += 1
            if frames > frame_limit:
                await _end_flooding(websocket, send, request_id, key_id, frame_limit)
                return
            payload = message.get("text")
            if payload is None:
                payload = message.get("bytes") or b""
            await member.handle(payload)
        if isinstance(ending, Draining):
            member.stop()  # nothing new is delivered; what the client still acks is settled below
            await _end_for_drain(websocket, send, request_id, member.handle)
            return
        if ending is not None:
            await _end_for_key(websocket, send, request_id, key_id, ending)
            return
        delivery.result()  # raises what stopped it
    except (WebSocketDisconnect, RuntimeError, OSError) as exc:
        logger.debug("websocket closed: %s", exc)
    except CODED_ERRORS as exc:
        # The member cannot go on for a reason of the product's (its topic was deleted): said in an
        # ``error`` frame, then a normal close. Not a server fault, so not logged as one.
        logger.info("push delivery ended: %s", exc.code, extra={"requestId": request_id})
        with contextlib.suppress(Exception):
            await send(_error_frame(request_id, exc))
            await websocket.close(code=CloseCode.NORMAL)
    except Exception:
        logger.exception("push delivery failed", extra={"requestId": request_id})
        with contextlib.suppress(Exception):
            await websocket.close(code=CloseCode.INTERNAL)
    finally:
        # The socket is over: it stops counting against the key's cap now, before the member's goodbye.
        services.connections.release(connection)
        if delivery is not None:
            member.stop()
            try:
                await asyncio.wait_for(asyncio.shield(delivery), 10)
            except Exception:  # noqa: BLE001 - a send to the closed socket, or a stuck store: it is over
                delivery.cancel()
        # Leave at once (shielded: the connection task itself may be cancelled at shutdown).
        with contextlib.suppress(Exception):
            await asyncio.shield(member.leave())
        services.connections.close(connection)


_DRAINING_FRAME = b'{"type":"draining"}'
# How long a draining connection's client has to send its last acks and close (within the drain's own
# grace for connections, app/api/draining.py).
DRAIN_HANDOVER_SECONDS = 3.0


async def _end_for_drain(
    websocket: WebSocket,
    send: Callable[[bytes], Awaitable[None]],
    request_id: str,
    handle: Callable[[str | bytes], Awaitable[None]] | None,
) -> None:
    """This process is shutting down (SIGTERM): a ``draining`` frame; then, for up to
    ``DRAIN_HANDOVER_SECONDS``, the acks, nacks and extends the client still sends are settled as usual
    (``handle``) until it closes (the SDKs finish their running handlers, flush and close); then close 1012
    (service restart). The member leaves as the connection ends, and its partitions go to the other members
    with every ack that reached us in them."""
    logger.info("push connection ended: draining", extra={"requestId": request_id})
    with contextlib.suppress(Exception):
        await send(_DRAINING_FRAME)
        if handle is not None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + DRAIN_HANDOVER_SECONDS
            while (left := deadline - loop.time()) > 0:
                try:
                    message = await asyncio.wait_for(websocket.receive(), left)
                except TimeoutError:
                    break
                if message["type"] == "websocket.disconnect":
                    return
                payload = message.get("text")
                await handle(payload if payload is not None else message.get("bytes") or b"")
        await websocket.close(code=CloseCode.RESTART)


async def _end_for_key(
    websocket: WebSocket,
    send: Callable[[bytes], Awaitable[None]],
    request_id: str,
    key_id: str,
    error: CodedError,
) -> None:
    """The key no longer allows this connection (revoked, project deleted, a lower cap): said in an
    ``error`` frame, then closed with 1008 (policy violation)."""
    logger.info("push connection ended: %s", error.code, extra={"requestId": request_id, "keyId": key_id})
    with contextlib.suppress(Exception):
        await send(_error_frame(request_id, error))
        await websocket.close(code=1008)


async def _end_flooding(
    websocket: WebSocket, send: Callable[[bytes], Awaitable[None]], request_id: str, key_id: str, limit: int
) -> None:
    """More client frames in one second than allowed: said in an ``error`` frame, then closed (1008)."""
    logger.warning(
        "push connection closed: more than %d client frames in a second",
        limit,
        extra={"requestId": request_id, "keyId": key_id},
    )
    error = RateLimitExceeded(
        f"More than {limit} frames in one second on this connection; batch acks with 'ids'."
    )
    with contextlib.suppress(Exception):
        await send(_error_frame(request_id, error))
        await websocket.close(code=CloseCode.POLICY)
