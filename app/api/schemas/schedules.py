"""Wire shapes of the schedule calls."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import (
    PAGE_MAX,
    Instant,
    MessageId,
    Partition,
    TopicName,
    at_most,
    schema,
)
from app.broker.publishing import MAX_HEADERS, MAX_KEY_BYTES
from app.broker.schedules import service, timing

SCHEDULE_ID_PATTERN = "^sch_[a-z0-9]{16}$"
ScheduleId = Annotated[str, schema(pattern=SCHEDULE_ID_PATTERN, maxLength=20)]
# No request string but a published message's may hold the NUL character (app/api/routing.py).
_NO_NUL = "^[^\\x00]*$"
Cron = Annotated[str, schema(pattern=_NO_NUL, maxLength=timing.MAX_CRON_LENGTH)]
Every = Annotated[str, schema(pattern="^[0-9]{1,9}(ms|s|m|h|d)$", maxLength=11)]
TimeZone = Annotated[str, schema(pattern=_NO_NUL, maxLength=timing.MAX_TIMEZONE_LENGTH)]
Key = Annotated[str, schema(pattern=_NO_NUL, maxLength=MAX_KEY_BYTES)]
Status = Annotated[str, schema(enum=["active", "paused"])]


class ScheduleCreate(RequestBody):
    topic: TopicName = Field(examples=["reports.daily"], description="A topic of the key's environment.")
    cron: Cron | None = Field(
        None,
        examples=["0 9 * * MON-FRI"],
        description="Five fields (minute hour day-of-month month day-of-week), evaluated in `timezone`. "
        "Exactly one of `cron` and `every`.",
    )
    every: Every | None = Field(
        None,
        examples=["30s"],
        description="A period `<n>ms|s|m|h|d` of at least 1s (at most 366d), counted from creation. "
        "Exactly one of `cron` and `every`.",
    )
    timezone: TimeZone | None = Field(
        None, examples=["Europe/Berlin"], description="An IANA time zone name for `cron`; default `UTC`."
    )
    data: Any = Field(
        description="The message every run publishes: any JSON value (null included), within the publish "
        "limits.",
        examples=[{"report": "daily"}],
    )
    key: Key | None = Field(None, description="The message's key (its partition), as when publishing.")
    headers: dict[str, str] | None = Field(
        None,
        description="The message's headers. Every run adds `queuecore-schedule` (the schedule's id) and "
        "`queuecore-scheduled-at` (the run's due time); those two names may not be given.",
        json_schema_extra={
            "maxProperties": MAX_HEADERS - len(service.RESERVED_HEADERS),
            "propertyNames": {"pattern": _NO_NUL},
            "additionalProperties": {"type": "string", "pattern": _NO_NUL},
        },
    )


class Schedule(ResponseBody):
    id: ScheduleId = Field(examples=["sch_8xk2m9q4a1b2c3d4"])
    topic: TopicName = Field(examples=["reports.daily"])
    cron: str | None = Field(examples=["0 9 * * MON-FRI"])
    every: str | None = Field(examples=[None])
    timezone: str = Field(examples=["Europe/Berlin"])
    status: Status = Field(examples=["active"])
    nextRunAt: Instant | None = Field(
        examples=["2026-03-30T07:00:00.000Z"], description="The next due time; null while paused."
    )
    createdAt: Instant = Field(examples=["2026-03-28T10:42:18.003Z"])
    data: Any = Field(examples=[{"report": "daily"}])
    key: str | None = Field(examples=[None])
    headers: dict[str, str] = Field(examples=[{}])


class ScheduleList(ResponseBody):
    data: Annotated[list[Schedule], at_most(PAGE_MAX)]
    nextCursor: str | None = Field(description="The next page's cursor; null on the last page.")


class ScheduleRun(ResponseBody):
    at: Instant = Field(examples=["2026-03-30T07:00:00.000Z"], description="The run's due time.")
    messageId: MessageId = Field(examples=["msg_aaaaaaaaaaaaaaaaaaaaaaacqa"])
    partition: Partition = Field(examples=[0])
    offset: int = Field(examples=[42])


class ScheduleRuns(ResponseBody):
    data: Annotated[list[ScheduleRun], at_most(service.RUNS_PAGE)]
