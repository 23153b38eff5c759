"""Wire shapes of publishing and reading. Publishing parses bodies with orjson (the hot path); these
models describe the same shapes for ``openapi.yaml``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import (
    PAGE_MAX,
    IdempotencyKey,
    Instant,
    MessageId,
    MessageKey,
    Partition,
    TopicName,
    at_most,
)
from app.broker import publishing
from app.broker.publishing import MAX_HEADERS


class MessageIn(RequestBody):
    data: Any = Field(
        description="Any JSON value (null included), at most 256 KiB serialized, nested at most 64 levels; "
        "integers within 64 bits (larger ones as strings).",
        examples=[{"type": "order.created", "orderId": "ord_92jf8x", "amount": 9900}],
    )
    key: MessageKey | None = Field(
        None,
        description="Messages with one key land on one partition (Kafka's murmur2). At most 4096 bytes "
        "of UTF-8.",
    )
    headers: dict[str, str] | None = Field(
        None,
        description="String values; at most 64, names of 1–256 bytes. `data`, `key` and `headers` together "
        "take at most 256 KiB. A `traceparent` header (W3C Trace Context) is carried through deliveries.",
        json_schema_extra={"maxProperties": MAX_HEADERS},
    )
    partition: Partition | None = Field(
        None, description="Explicit partition (below the topic's count); overrides the key."
    )
    delay: str | float | None = Field(
        None,
        description='Deliver to consumer groups this much later: a duration `<n>ms|s|m|h|d` ("90s") or a '
        "number of seconds, at most 30 days; not with `deliverAt`. Stored (and readable) at once.",
        examples=["90s"],
    )
    deliverAt: str | int | None = Field(
        None,
        description="Deliver to consumer groups from this time on: ISO-8601 or epoch milliseconds, at most "
        "30 days ahead (a past time means now); not with `delay`.",
        examples=["2026-03-28T11:00:00.000Z"],
    )
    ttl: str | float | None = Field(
        None,
        description="Never deliver this message once this long has passed since the publish: a duration or "
        "a number of seconds, more than 0 and at most 365 days, and later than the due time; not with "
        "`expiresAt`. With a DLQ an expired message moves there with reason `expired`.",
        examples=["1h"],
    )
    expiresAt: str | int | None = Field(
        None,
        description="Never deliver this message from this time on: ISO-8601 or epoch milliseconds, later "
        "than the due time (now or `deliverAt`), at most 365 days ahead; not with `ttl`.",
        examples=["2026-03-28T12:00:00.000Z"],
    )


class BatchMessageIn(MessageIn):
    idempotencyKey: IdempotencyKey | None = Field(
        None, description="1 to 256 printable characters; one namespace with the Idempotency-Key header."
    )


class BatchIn(RequestBody):
    messages: list[BatchMessageIn] = Field(min_length=1, max_length=1000)


class Published(ResponseBody):
    id: MessageId = Field(examples=["msg_aaaaaaaaaaaaaaaaaaaaaaacqa"])
    offset: int = Field(examples=[14829])
    partition: Partition = Field(examples=[2])
    timestamp: Instant = Field(examples=["2026-03-28T10:42:18.003Z"])
    deliverAt: Instant | None = Field(
        examples=[None], description="When consumer groups receive it (null: at once)."
    )
    expiresAt: Instant | None = Field(examples=[None], description="When it expires (null: never).")
    latency: int = Field(examples=[12], description="Server-side milliseconds.")
    durability: str = Field(examples=["fsync"], description='"fsync" or "replicated:<n>"')


class BatchItem(ResponseBody):
    id: MessageId
    offset: int
    partition: Partition
    timestamp: Instant
    deliverAt: Instant | None
    expiresAt: Instant | None
    replayed: bool | None = Field(None, description="Present and true for items answered from idempotency.")


class BatchPublished(ResponseBody):
    count: int = Field(examples=[3])
    latency: int = Field(examples=[18])
    durability: str = Field(examples=["fsync"])
    messages: Annotated[list[BatchItem], at_most(publishing.MAX_BATCH)]


class Message(ResponseBody):
    id: MessageId
    topic: TopicName
    partition: Partition
    offset: int
    key: str | None
    headers: dict[str, str]
    data: Any
    timestamp: Instant
    deliverAt: Instant | None = Field(description="When consumer groups receive it (null: not delayed).")
    expiresAt: Instant | None = Field(description="When it expires undelivered (null: never).")


class MessagePage(ResponseBody):
    data: Annotated[list[Message], at_most(PAGE_MAX)]
    nextOffset: int
    earliestOffset: int
