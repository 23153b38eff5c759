"""Wire shapes of the alert webhook calls."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import PAGE_MAX, Instant, Text, at_most


class EndpointIn(RequestBody):
    url: Text = Field(
        examples=["https://hooks.example.com/queuecore"],
        max_length=2048,
        description="An http:// or https:// URL whose host resolves (to a public address unless the "
        "operator allows internal ones); no credentials in it.",
    )
    secret: Text | None = Field(
        None,
        min_length=16,
        max_length=255,
        description="signing secret; generated (and shown once) if omitted",
    )


class Endpoint(ResponseBody):
    url: str
    secretHint: str = Field(description="the secret's last four characters")
    state: Literal["closed", "open", "half-open"] = Field(description="the delivery circuit breaker")
    createdAt: Instant
    updatedAt: Instant
    secret: str | None = Field(None, description="only in the answer that generated it")


class TestEvent(ResponseBody):
    eventId: str


class Delivery(ResponseBody):
    id: str
    eventId: str
    eventType: str
    attempt: int
    ok: bool
    statusCode: int | None
    error: str | None
    durationMs: int
    at: Instant


class DeliveryPage(ResponseBody):
    data: Annotated[list[Delivery], at_most(PAGE_MAX)]
    nextCursor: str | None
