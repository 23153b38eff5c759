"""Wire shapes of WebSocket tokens."""

from __future__ import annotations

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import GroupName, Instant, TopicName


class WebSocketTokenCreate(RequestBody):
    topic: TopicName = Field(description="The topic the token may consume.", examples=["order.events"])
    group: GroupName | None = Field(None, description="Bind the token to this consumer group too.")


class WebSocketToken(ResponseBody):
    token: str = Field(description="Pass as `?token=` when opening the WebSocket.")
    expiresAt: Instant = Field(
        examples=["2026-03-28T10:47:00.000Z"], description="At most 5 minutes from now."
    )
