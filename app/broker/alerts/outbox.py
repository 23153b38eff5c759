"""The outbox of alert events: ``enqueue`` writes an event in the caller's transaction (the one that
moved a DLQ past its threshold), so an alert exists exactly when what raised it committed, and no restart
loses it; the dispatcher (``dispatcher.py``) sends them. Also the record of delivery attempts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from app.broker.alerts.endpoint import NO_ENDPOINT
from app.broker.errors import AlertEndpointNotFound, InvalidRequest
from app.broker.topics import decode_cursor, encode_cursor
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.kit.ids import new_id
from app.stores.metadata.protocol import MetadataUnit, NewAlertEvent


async def enqueue(
    uow: MetadataUnit, *, project_id: str, environment: str, event_type: str, data: dict[str, Any]
) -> str:
    """Write an event to the outbox in the caller's unit of work; its id. An environment without an
    endpoint gets no event (nothing could receive it; "" is answered)."""
    repo = uow.alerts
    if await repo.endpoint(project_id, environment) is None:
        return ""
    event_id = new_id("evt")
    now = now_ms()
    body = orjson.dumps(
        {
            "id": event_id,
            "type": event_type,
            "createdAt": isoformat_ms(now),
            "projectId": project_id,
            "environment": environment,
            "data": data,
        }
    )
    await repo.add_event(
        NewAlertEvent(event_id, project_id, environment, event_type, body.decode(), now, utcnow())
    )
    return event_id


async def send_test_event(uow: MetadataUnit, project_id: str, environment: str) -> str:
    """Queue a ``test`` event for the environment's endpoint."""
    if await uow.alerts.endpoint(project_id, environment) is None:
        raise AlertEndpointNotFound(f"{NO_ENDPOINT}; set one with PUT /v1/alerts/endpoint.")
    return await enqueue(
        uow,
        project_id=project_id,
        environment=environment,
        event_type="test",
        data={"message": "This is a test event from QueueCore."},
    )


@dataclass(frozen=True, slots=True)
class AttemptPage:
    entries: list[dict[str, Any]]
    next_cursor: str | None


async def deliveries(
    uow: MetadataUnit, project_id: str, environment: str, *, limit: int = 50, cursor: str | None = None
) -> AttemptPage:
    """Every delivery attempt of the environment's alerts, newest first."""
    if not 1 <= limit <= 1000:
        raise InvalidRequest.field("limit", "must be between 1 and 1000")
    before = decode_cursor(cursor) if cursor else None
    rows = await uow.alerts.attempts_page(project_id, environment, before, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    entries = [
        {
            "id": r.id,
            "eventId": r.event_id,
            "eventType": r.event_type,
            "attempt": r.attempt,
            "ok": r.ok,
            "statusCode": r.status_code,
            "error": r.error,
            "durationMs": r.duration_ms,
            "at": isoformat_ms(r.at),
        }
        for r in rows
    ]
    return AttemptPage(entries, encode_cursor(rows[-1].id) if more and rows else None)
