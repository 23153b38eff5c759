"""Schedule calls: create, list, get, pause, resume, delete, and a schedule's last runs.

A schedule belongs to a project environment like its topic, and goes with the topic (a foreign key
cascade): deleting the topic deletes its schedules. Creating one counts against the environment's
``schedules`` quota (``app/broker/quotas.py``), under the project's lock like topics.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import orjson

from app.broker import quotas
from app.broker.errors import InvalidRequest, NotFound, TopicNotFound
from app.broker.publishing import parse_message
from app.broker.quotas import Quota
from app.broker.schedules import timing
from app.broker.topics import Scope
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.kit.ids import new_id
from app.stores.metadata.protocol import MetadataUnit, ScheduleRow

# Headers every run's message carries (beside the schedule's own): which schedule, and which due time.
SCHEDULE_HEADER = "queuecore-schedule"
DUE_HEADER = "queuecore-scheduled-at"
RESERVED_HEADERS = (SCHEDULE_HEADER, DUE_HEADER)
_ID = re.compile(r"^sch_[a-z0-9]{16}$")
RUNS_PAGE = 100


class ScheduleNotFound(NotFound):
    """No schedule of this id in the caller's environment (404 ``NOT_FOUND``)."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"The schedule '{schedule_id}' does not exist in the current environment.")


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """A schedule as its calls answer it."""

    id: str
    topic: str
    cron: str | None
    every: str | None
    timezone: str
    status: str
    next_run_ms: int | None  # None while paused
    created_at: datetime
    data: Any
    key: str | None
    headers: dict[str, str]

    @classmethod
    def of(cls, row: ScheduleRow, topic: str) -> ScheduleView:
        return cls(
            row.id,
            topic,
            row.cron,
            row.every,
            row.timezone,
            row.status,
            row.next_run_ms if row.status == "active" else None,
            row.created_at,
            orjson.loads(row.data),
            row.key,
            dict(row.headers or {}),
        )


@dataclass(frozen=True, slots=True)
class RunView:
    """One recorded run: its due time and where its message landed."""

    at_ms: int
    message_id: str
    partition: int
    offset: int


def message_headers(schedule_id: str, due_ms: int, headers: dict[str, str] | None) -> dict[str, str]:
    """The headers of a run's message: the schedule's own, then which schedule and due time it is."""
    return {**(headers or {}), SCHEDULE_HEADER: schedule_id, DUE_HEADER: isoformat_ms(due_ms)}


async def create_schedule(
    uow: MetadataUnit,
    scope: Scope,
    *,
    topic: str,
    cron: str | None,
    every: str | None,
    timezone: str | None,
    data: Any,
    key: str | None = None,
    headers: dict[str, str] | None = None,
) -> ScheduleView:
    """Make a schedule of ``topic``; 404 ``TOPIC_NOT_FOUND`` (details on ``topic``), 400 naming the field,
    403 ``QUOTA_EXCEEDED`` past the environment's schedules quota."""
    stamp = now_ms()
    cadence = timing.cadence(cron, every, timezone, stamp)
    if headers is not None:
        reserved = [name for name in headers if name.lower() in RESERVED_HEADERS]
        if reserved:
            raise InvalidRequest.field("headers", f"'{reserved[0]}' is set by the schedule on every run")
    # The message as every run sends it, held to the publish limits now rather than at its first run.
    probe = {"data": data, "key": key, "headers": message_headers("sch_" + "0" * 16, stamp, headers)}
    parse_message({k: v for k, v in probe.items() if v is not None or k == "data"})
    limits = await quotas.lock_project(uow, scope.project_id)
    row = await uow.topics.get_by_name(scope.project_id, scope.environment, topic)
    if row is None:
        missing = TopicNotFound(topic)
        missing.details = [{"field": "topic", "issue": "no topic of this name in the key's environment"}]
        raise missing
    quotas.check(Quota.schedules, limits, await uow.schedules.count(scope.project_id, scope.environment))
    now = utcnow()
    schedule = ScheduleRow(
        id=new_id("sch"),
        project_id=scope.project_id,
        environment=scope.environment,
        topic_id=row.id,
        cron=cadence.cron,
        every=every if cadence.every_ms is not None else None,
        every_ms=cadence.every_ms,
        anchor_ms=cadence.anchor_ms,
        timezone=cadence.timezone,
        data=orjson.dumps(data).decode(),
        key=key,
        headers=headers or None,
        status="active",
        next_run_ms=cadence.next_after(stamp),
        claimed_until_ms=0,
        created_at=now,
        updated_at=now,
    )
    await uow.schedules.add(schedule)
    return ScheduleView.of(schedule, topic)


def cadence_of(row: ScheduleRow) -> timing.Cadence:
    """The stored schedule's timing."""
    return timing.Cadence(row.cron, row.every_ms, row.timezone, row.anchor_ms)


async def _get_row(uow: MetadataUnit, scope: Scope, schedule_id: str) -> tuple[ScheduleRow, str]:
    found = (
        await uow.schedules.get(scope.project_id, scope.environment, schedule_id)
        if _ID.fullmatch(schedule_id)
        else None
    )
    if found is None:
        raise ScheduleNotFound(schedule_id)
    return found


async def get_schedule(uow: MetadataUnit, scope: Scope, schedule_id: str) -> ScheduleView:
    """The schedule of this id in the scope; 404 ``NOT_FOUND`` if there is none."""
    return ScheduleView.of(*await _get_row(uow, scope, schedule_id))


def encode_cursor(schedule_id: str) -> str:
    return base64.urlsafe_b64encode(schedule_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        value = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidRequest.field("cursor", "not a cursor returned by this API") from None
    if not _ID.fullmatch(value):
        raise InvalidRequest.field("cursor", "not a cursor returned by this API")
    return value


async def list_schedules(
    uow: MetadataUnit, scope: Scope, *, limit: int = 50, cursor: str | None = None
) -> tuple[list[ScheduleView], str | None]:
    """One page of the environment's schedules by id, and the cursor of the next (None on the last)."""
    if not 1 <= limit <= 1000:
        raise InvalidRequest.field("limit", "must be between 1 and 1000")
    after = decode_cursor(cursor) if cursor else None
    rows = await uow.schedules.page(scope.project_id, scope.environment, after, limit + 1)
    page = [ScheduleView.of(row, topic) for row, topic in rows[:limit]]
    return page, encode_cursor(page[-1].id) if len(rows) > limit else None


async def pause_schedule(uow: MetadataUnit, scope: Scope, schedule_id: str) -> ScheduleView:
    """Stop publishing runs until resumed (a run already under way still completes)."""
    row, topic = await _get_row(uow, scope, schedule_id)
    if row.status != "paused":
        row = replace(row, status="paused", updated_at=utcnow())
        await uow.schedules.pause(row.id, row.updated_at)
    return ScheduleView.of(row, topic)


async def resume_schedule(uow: MetadataUnit, scope: Scope, schedule_id: str) -> ScheduleView:
    """Publish runs again from the first due time after now (due times missed while paused are not run)."""
    row, topic = await _get_row(uow, scope, schedule_id)
    if row.status != "active":
        row = replace(
            row,
            status="active",
            next_run_ms=cadence_of(row).next_after(now_ms()),
            claimed_until_ms=0,
            updated_at=utcnow(),
        )
        await uow.schedules.resume(row.id, row.next_run_ms, row.updated_at)
    return ScheduleView.of(row, topic)


async def delete_schedule(uow: MetadataUnit, scope: Scope, schedule_id: str) -> None:
    """Delete a schedule and its runs."""
    row, _ = await _get_row(uow, scope, schedule_id)
    await uow.schedules.remove(row.id)


async def schedule_runs(
    uow: MetadataUnit, scope: Scope, schedule_id: str, *, limit: int = RUNS_PAGE
) -> list[RunView]:
    """The schedule's last recorded runs, newest first."""
    row, _ = await _get_row(uow, scope, schedule_id)
    runs = await uow.schedules.runs(row.id, limit)
    return [RunView(r.at_ms, r.message_id, r.partition, r.offset) for r in runs]
