"""``POST /v1/tokens/websocket``: a short-lived token for opening the push WebSocket without headers."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import AdminKey, AdminTopics, ServicesDep
from app.api.routing import JsonRoute
from app.api.schemas.tokens import WebSocketToken, WebSocketTokenCreate
from app.broker import groups, tokens
from app.errors import responses
from app.kit.clock import isoformat_ms

router = APIRouter(prefix="/v1/tokens", tags=["tokens"], route_class=JsonRoute)

_WEBSOCKET = """A token (HS256 JWT, valid 5 minutes) for the push WebSocket, bound to this key, its project and
environment, the topic and, when given, the group. It is refused once expired or once the key is revoked.

**The push WebSocket** (OpenAPI cannot describe it as an operation):
`GET /v1/topics/{name}/consume?group=&startFrom=latest|earliest&maxInFlight=100`, authenticated by
`Authorization: Bearer <key>` or `?token=<this token>`. Refusals come at the upgrade with the HTTP status and the
error envelope (400, 401, 404, 429; opening counts as one `consume` request, frames do not). Frames are JSON
objects with a `type`: server `welcome {memberId, generationId, assignments}`, `message {…message}`,
`messages {messages:[…]}`, `rebalance {generationId, assignments}`, `acked {ids, failed:[{id, code}]}`,
`error {error}`; client `ack {id | ids}`, `nack {id, reason, delay?}`, `extend {id | ids, seconds}`.
See docs/consuming.md."""


@router.post(
    "/websocket",
    status_code=201,
    response_model=WebSocketToken,
    description=_WEBSOCKET,
    responses=responses("INVALID_REQUEST", "INVALID_API_KEY", "RATE_LIMIT_EXCEEDED", "TOPIC_NOT_FOUND"),
)
async def create_websocket_token(
    body: WebSocketTokenCreate, key: AdminKey, topics: AdminTopics, services: ServicesDep
) -> WebSocketToken:
    """Issue a WebSocket token for one topic (and group)."""
    topic = await topics.get(body.topic)
    if body.group is not None:
        groups.validate_name(body.group)
    issued = tokens.issue(
        services.settings.server_secret(),
        key_id=key.key_id,
        project_id=key.project_id,
        environment=key.environment,
        topic_id=topic.id,
        topic=topic.name,
        group=body.group,
    )
    return WebSocketToken(token=issued.token, expiresAt=isoformat_ms(issued.expires_at_ms))
