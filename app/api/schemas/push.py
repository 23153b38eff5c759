"""Wire shapes of push groups: the group config's ``push``, the secret rotation and the attempts."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import schema
from app.broker import push_groups

Mode = Annotated[str, schema(enum=list(push_groups.MODES))]


class PushConfigIn(RequestBody):
    url: Annotated[str, schema(format="uri", maxLength=2048)] | None = Field(
        None,
        examples=["https://example.com/hooks/queuecore"],
        description="http(s) URL without user info; required when push is first set (production: https, "
        "public addresses only)",
    )
    maxConcurrency: Annotated[int, schema(minimum=1, maximum=push_groups.MAX_CONCURRENCY)] | None = Field(
        None, description="POSTs in flight at once per API process; default 16"
    )
    rate: Annotated[float, schema(exclusiveMinimum=0)] | None = Field(
        None, description="messages per second delivered to the URL; null: no limit"
    )
    timeout: Annotated[str, schema(pattern=r"^[0-9]{1,9}(ms|s|m|h|d)$")] | None = Field(
        None, examples=["10s"], description="100ms to 5m; default 10s"
    )
    ordered: bool | None = Field(None, description="one delivery in flight per partition; default false")
    mode: Mode | None = Field(None, description="CloudEvents binary (default) or structured mode")


class PushConfig(ResponseBody):
    url: str
    maxConcurrency: int
    rate: float | None
    timeout: str = Field(examples=["10s"])
    ordered: bool
    mode: Mode
    secret: str = Field(
        examples=["whsec_…Xk2m"],
        description="masked; in clear only in the answer of the PUT that first set push",
    )
    breaker: Annotated[str, schema(enum=["closed", "open"])] = Field(
        description="the endpoint's circuit breaker as last written by the delivery workers"
    )


class PushSecret(ResponseBody):
    secret: str = Field(examples=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])


class PushAttempt(ResponseBody):
    messageId: str
    attempt: int
    at: str = Field(examples=["2026-03-28T10:42:18.003Z"])
    status: int | None = Field(description="the HTTP status; null when no answer came")
    latencyMs: int
    error: str | None


class PushAttempts(ResponseBody):
    data: Annotated[list[PushAttempt], schema(maxItems=push_groups.MAX_ATTEMPTS_LIMIT)]
