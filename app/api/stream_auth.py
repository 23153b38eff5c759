"""Who opens a long-lived stream (a WebSocket, or Server-Sent Events): a key, or a short-lived token.

Browsers can set no header on a WebSocket or an ``EventSource``, so both take ``?token=``, a JWT from
``POST /v1/tokens/websocket`` bound to a topic (and maybe a group); a connection opened with one belongs
to the key that minted it (revoking that key ends it, ``app/broker/connections.py``).
"""

from __future__ import annotations

from starlette.requests import HTTPConnection

from app.broker import tokens
from app.broker.keys import Principal
from app.errors import ApiError
from app.services import Services

_INVALID_KEY = "The API key is missing, malformed, or has been revoked."
_INVALID_TOKEN = "The WebSocket token is malformed, expired, or its API key has been revoked."
OTHER_TOPIC = "The WebSocket token was issued for another topic or group."


async def authenticate_stream(
    connection: HTTPConnection, services: Services, topic_name: str, group: str
) -> tuple[Principal, str | None]:
    """The caller, and the topic id its token is bound to (None when authenticated by a key)."""
    header = connection.headers.get("authorization", "")
    token = connection.query_params.get("token")
    if header:
        scheme, _, key = header.partition(" ")
        principal = (
            await services.keys.authenticate(key.strip()) if scheme.lower() == "bearer" and key else None
        )
        if principal is None:
            raise ApiError("INVALID_API_KEY", _INVALID_KEY)
        return principal, None
    if not token:
        raise ApiError("INVALID_API_KEY", _INVALID_KEY)
    claims = tokens.verify(services.settings.server_secret(), token)
    if claims is None:
        raise ApiError("INVALID_API_KEY", _INVALID_TOKEN)
    if claims.topic != topic_name or (claims.group is not None and claims.group != group):
        raise ApiError("INVALID_API_KEY", OTHER_TOPIC)
    principal = await services.keys.principal_by_id(claims.key_id)
    if (
        principal is None
        or principal.project_id != claims.project_id
        or principal.environment != claims.environment
    ):
        raise ApiError("INVALID_API_KEY", _INVALID_TOKEN)
    return principal, claims.topic_id
