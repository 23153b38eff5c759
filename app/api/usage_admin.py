"""The operators' admin API for usage: the usage-metering events and the rollups the Spark usage job adds
from them (``queuecore-spark usage``), so the job runs over HTTP on any deployment and log engine.

Authenticated by the operators' token (``QUEUECORE_ADMIN_TOKEN``), as the rest of ``/v1/admin``; the events
are every project's, so no project key ever reads them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import Field
from starlette.responses import Response

from app.api.admin import Operator
from app.api.deps import ServicesDep
from app.api.routing import JsonRoute
from app.api.schemas.common import RequestBody, ResponseBody
from app.broker import usage_rollups
from app.errors import responses
from app.stores.metadata.protocol import Rollup

router = APIRouter(prefix="/v1/admin/usage", tags=["admin"], route_class=JsonRoute)
_AUTH = ("INVALID_API_KEY", "FORBIDDEN")


class UsageEvent(ResponseBody):
    offset: int = Field(description="The event's offset in the usage topic.")
    event: dict[str, Any] = Field(
        description="One authenticated request: at (ms), projectId, environment, keyId, category, status, "
        "messages, bytesIn, bytesOut."
    )


class UsageEventPage(ResponseBody):
    data: list[UsageEvent] = Field(max_length=usage_rollups.MAX_EVENTS_PER_PAGE)
    nextOffset: int = Field(description="Where the next page starts.")
    earliestOffset: int = Field(
        description="The oldest event still kept (7 days): a fromOffset below it lost the events between."
    )
    latestOffset: int = Field(description="One past the newest event now.")


_INT64 = (1 << 63) - 1
# The last day a bucket may start on: 9999-12-31 (later instants are past what a date can hold; such a
# bucketStart was a 500).
_LAST_DAY = 253_402_214_400
# What the usage events carry: ids of our own making, an environment, a rate-limit category ("" or "none"
# where an event has none).
_ID = r"^[A-Za-z0-9_]{0,64}$"
_WORD = r"^[a-z_]{0,20}$"


class RollupIn(RequestBody):
    projectId: str = Field(max_length=64, pattern=_ID)
    environment: str = Field(max_length=20, pattern=_WORD)
    keyId: str = Field(max_length=64, pattern=_ID)
    category: str = Field(max_length=20, pattern=_WORD)
    granularity: Literal["minute", "hour", "day"]
    bucketStart: int = Field(
        ge=0, le=_LAST_DAY, description="The bucket's start, in seconds since the epoch (UTC)."
    )
    requests: int = Field(ge=0, le=_INT64)
    messages: int = Field(ge=0, le=_INT64)
    bytesIn: int = Field(ge=0, le=_INT64)
    bytesOut: int = Field(ge=0, le=_INT64)
    rateLimited: int = Field(ge=0, le=_INT64)
    peakRequestsPerSecond: int = Field(0, ge=0, le=_INT64)


class RollupBatch(RequestBody):
    fromOffset: int = Field(ge=0, le=_INT64, description="Where the rollups stand now (compare and set).")
    toOffset: int = Field(ge=1, le=_INT64, description="One past the last event these counts add up.")
    rollups: list[RollupIn] = Field(max_length=usage_rollups.MAX_ROLLUPS_PER_CALL)


class RollupProgress(ResponseBody):
    nextOffset: int = Field(description="The first usage event not rolled up yet.")


@router.get(
    "/events",
    response_model=UsageEventPage,
    responses=responses("INVALID_REQUEST", *_AUTH),
)
async def usage_events(
    _: Operator,
    services: ServicesDep,
    fromOffset: Annotated[int, Query(ge=0, le=_INT64)] = 0,
    limit: Annotated[int, Query(ge=1, le=usage_rollups.MAX_EVENTS_PER_PAGE)] = 1000,
) -> Response:
    """Usage-metering events from an offset on, oldest first: one per authenticated request."""
    page = await usage_rollups.read_events(services.log, fromOffset, limit)
    # The events are stored as JSON: spliced in as they are, never parsed and rendered again.
    body = (
        b'{"data":['
        + b",".join(b'{"offset":%d,"event":%b}' % (r.offset, r.value) for r in page.records)
        + b'],"nextOffset":%d,"earliestOffset":%d,"latestOffset":%d}'
        % (page.next_offset, page.earliest_offset, page.latest_offset)
    )
    return Response(body, media_type="application/json")


@router.get("/rollups/progress", response_model=RollupProgress, responses=responses(*_AUTH))
async def rollup_progress(_: Operator, services: ServicesDep) -> RollupProgress:
    """How far the rollups got into the usage events."""
    return RollupProgress(nextOffset=await usage_rollups.next_offset(services.metadata))


@router.post(
    "/rollups",
    response_model=RollupProgress,
    responses=responses("INVALID_REQUEST", *_AUTH, "CONFLICT"),
)
async def add_rollups(body: RollupBatch, _: Operator, services: ServicesDep) -> RollupProgress:
    """Add the counts of the events ``[fromOffset, toOffset)`` and move the rollups to ``toOffset``, all or
    nothing; 409 ``CONFLICT`` (nothing written) when they are not at ``fromOffset``."""
    rows = [
        Rollup(
            project_id=r.projectId,
            environment=r.environment,
            key_id=r.keyId,
            category=r.category,
            granularity=r.granularity,
            bucket_start=datetime.fromtimestamp(r.bucketStart, UTC),
            requests=r.requests,
            messages=r.messages,
            bytes_in=r.bytesIn,
            bytes_out=r.bytesOut,
            rate_limited=r.rateLimited,
            peak_requests_per_second=r.peakRequestsPerSecond,
        )
        for r in body.rollups
    ]
    await usage_rollups.add(services.metadata, rows, from_offset=body.fromOffset, to_offset=body.toOffset)
    return RollupProgress(nextOffset=body.toOffset)
