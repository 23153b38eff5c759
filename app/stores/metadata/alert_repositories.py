"""SQL of alert webhooks: endpoints with their breaker, the outbox of events, and the attempts made.

Everything is per project environment (``project_id``, ``environment``): one endpoint each, and events and
attempts of one environment never reach or show in another."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, and_, delete, insert, or_, select, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import AlertAttempt, AlertEndpoint, AlertEvent
from app.stores.metadata.protocol import AttemptRow, EndpointRow, EndpointSecret, NewAlertEvent, OutboxClaim

endpoints = cast(Table, AlertEndpoint.__table__)
events = cast(Table, AlertEvent.__table__)
attempts = cast(Table, AlertAttempt.__table__)


class AlertRepository(Repository):
    """Alert endpoints, the outbox of alert events, and delivery attempts."""

    # endpoints ------------------------------------------------------------------------------------

    async def endpoint(self, project_id: str, environment: str) -> EndpointRow | None:
        row = await self._endpoint_row(project_id, environment)
        if row is None:
            return None
        return EndpointRow(
            row.project_id,
            row.environment,
            row.url,
            row.secret,
            row.failures,
            row.open_until_ms,
            row.created_at,
            row.updated_at,
        )

    async def save_endpoint(self, endpoint: EndpointRow) -> None:
        row = await self._endpoint_row(endpoint.project_id, endpoint.environment)
        if row is None:
            row = AlertEndpoint(project_id=endpoint.project_id, environment=endpoint.environment)
            self.session.add(row)
        row.url, row.secret = endpoint.url, endpoint.secret
        row.failures, row.open_until_ms = endpoint.failures, endpoint.open_until_ms
        row.created_at, row.updated_at = endpoint.created_at, endpoint.updated_at
        await self._flush()

    async def _endpoint_row(self, project_id: str, environment: str) -> AlertEndpoint | None:
        result = await self.session.execute(
            select(AlertEndpoint)
            .where(AlertEndpoint.project_id == project_id, AlertEndpoint.environment == environment)
            .execution_options(populate_existing=True)
        )
        return result.scalar_one_or_none()

    async def remove_endpoint(self, project_id: str, environment: str) -> bool:
        result = await self.session.execute(delete(endpoints).where(_endpoint_of(project_id, environment)))
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def breaker_outcome(
        self, project_id: str, environment: str, ok: bool, threshold: int, open_until_ms: int
    ) -> None:
        """A success closes the breaker; a failure counts, and opens it at ``threshold`` in a row (or
        reopens it after a failed half-open probe)."""
        this = _endpoint_of(project_id, environment)
        if ok:
            values: dict[str, Any] = {"failures": 0, "open_until_ms": None}
            await self.session.execute(update(endpoints).where(this).values(**values))
            return
        await self.session.execute(update(endpoints).where(this).values(failures=endpoints.c.failures + 1))
        await self.session.execute(
            update(endpoints)
            .where(this, endpoints.c.failures >= threshold)
            .values(open_until_ms=open_until_ms)
        )

    async def hold_breaker(self, held: Sequence[tuple[str, str]], until_ms: int) -> None:
        """A half-open endpoint lets one probe go: the others wait until it answered."""
        if held:
            await self.session.execute(
                update(endpoints)
                .where(or_(*(_endpoint_of(p, e) for p, e in held)))
                .values(open_until_ms=until_ms)
            )

    async def secrets(self) -> list[EndpointSecret]:
        """The stored secret of every endpoint."""
        result = await self.session.execute(
            select(endpoints.c.project_id, endpoints.c.environment, endpoints.c.secret)
        )
        return [EndpointSecret(p, e, secret) for p, e, secret in result.all()]

    async def replace_secret(self, project_id: str, environment: str, old: str, new: str) -> None:
        """Store ``new`` in place of ``old`` (not if the endpoint changed meanwhile)."""
        await self.session.execute(
            update(endpoints)
            .where(_endpoint_of(project_id, environment), endpoints.c.secret == old)
            .values(secret=new)
        )

    # the outbox -----------------------------------------------------------------------------------

    async def add_event(self, event: NewAlertEvent) -> None:
        await self.session.execute(
            insert(events).values(
                id=event.id,
                project_id=event.project_id,
                environment=event.environment,
                type=event.type,
                body=event.body,
                status="pending",
                attempts=0,
                next_attempt_ms=event.due_ms,
                claimed_until_ms=0,
                created_at=event.created_at,
            )
        )

    async def any_due(self, now_ms: int) -> bool:
        """Whether an event is due and unclaimed (a plain read: an idle dispatcher takes no write lock)."""
        result = await self.session.execute(
            select(events.c.id)
            .where(
                events.c.status == "pending",
                events.c.next_attempt_ms <= now_ms,
                events.c.claimed_until_ms <= now_ms,
            )
            .limit(1)
        )
        return result.first() is not None

    async def claim_due(self, now_ms: int, lease_ms: int, limit: int) -> list[OutboxClaim]:
        """Due pending events not held by another dispatcher, taken for ``lease_ms``. On Postgres,
        ``SKIP LOCKED``: concurrent dispatchers take disjoint events."""
        stmt = (
            select(events.c.id)
            .where(
                events.c.status == "pending",
                events.c.next_attempt_ms <= now_ms,
                events.c.claimed_until_ms <= now_ms,
            )
            .order_by(events.c.next_attempt_ms)
            .limit(limit)
        )
        if self._postgres:
            stmt = stmt.with_for_update(skip_locked=True)
        ids = list((await self.session.execute(stmt)).scalars().all())
        if not ids:
            return []
        rows = await self.session.execute(
            select(
                events.c.id,
                events.c.project_id,
                events.c.environment,
                events.c.type,
                events.c.body,
                events.c.attempts,
                endpoints.c.url,
                endpoints.c.secret,
                endpoints.c.failures,
                endpoints.c.open_until_ms,
            )
            .select_from(
                events.outerjoin(
                    endpoints,
                    and_(
                        endpoints.c.project_id == events.c.project_id,
                        endpoints.c.environment == events.c.environment,
                    ),
                )
            )
            .where(events.c.id.in_(ids))
            .order_by(events.c.next_attempt_ms)
        )
        claimed = [OutboxClaim(**row._asdict()) for row in rows.all()]
        await self.session.execute(
            update(events).where(events.c.id.in_(ids)).values(claimed_until_ms=now_ms + lease_ms)
        )
        return claimed

    async def release(self, event_ids: Sequence[str], next_attempt_ms: int) -> None:
        """Events claimed but not tried (their endpoint's breaker is open): due again later."""
        if event_ids:
            await self.session.execute(
                update(events)
                .where(events.c.id.in_(event_ids))
                .values(claimed_until_ms=0, next_attempt_ms=next_attempt_ms)
            )

    async def settle_event(
        self, event_id: str, status: str, attempts_made: int, next_attempt_ms: int
    ) -> None:
        await self.session.execute(
            update(events)
            .where(events.c.id == event_id)
            .values(
                status=status, attempts=attempts_made, next_attempt_ms=next_attempt_ms, claimed_until_ms=0
            )
        )

    # attempts -------------------------------------------------------------------------------------

    async def add_attempt(self, project_id: str, environment: str, attempt: AttemptRow) -> None:
        await self.session.execute(
            insert(attempts).values(
                project_id=project_id,
                environment=environment,
                **{f: getattr(attempt, f) for f in AttemptRow.__dataclass_fields__},
            )
        )

    async def attempts_page(
        self, project_id: str, environment: str, before: str | None, limit: int
    ) -> list[AttemptRow]:
        """Newest first (ids grow with time)."""
        stmt = select(AlertAttempt).where(
            AlertAttempt.project_id == project_id, AlertAttempt.environment == environment
        )
        if before is not None:
            stmt = stmt.where(AlertAttempt.id < before)
        result = await self.session.execute(stmt.order_by(AlertAttempt.id.desc()).limit(limit))
        return [
            AttemptRow(
                r.id, r.event_id, r.event_type, r.attempt, r.ok, r.status_code, r.error, r.duration_ms, r.at
            )
            for r in result.scalars().all()
        ]


def _endpoint_of(project_id: str, environment: str) -> ColumnElement[bool]:
    return and_(endpoints.c.project_id == project_id, endpoints.c.environment == environment)
