"""SQL of dead-letter queues: the DLQ rows of a group, their alert state, and the audit trail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, delete, func, insert, select, tuple_, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import ConsumerGroup, DeadLetter, DeadLetterAuditEntry, Topic
from app.stores.metadata.protocol import DeadLetterAuditRow, DeadLetterRow

dead_letters = cast(Table, DeadLetter.__table__)
audit = cast(Table, DeadLetterAuditEntry.__table__)
groups = cast(Table, ConsumerGroup.__table__)


_COLUMNS = (
    dead_letters.c.partition,
    dead_letters.c.offset,
    dead_letters.c.dlq_offset,
    dead_letters.c.reason,
    dead_letters.c.retry_count,
    dead_letters.c.failed_at_ms,
)

_AUDIT_COLUMNS = (
    audit.c.id,
    audit.c.group_id,
    audit.c.action,
    audit.c.message_id,
    audit.c.count,
    audit.c.actor_type,
    audit.c.actor_id,
    audit.c.at,
)


class DeadLetterRepository(Repository):
    """A group's dead letters, their alert state and the audit trail."""

    async def add(self, group_id: str, rows: Sequence[DeadLetterRow]) -> None:
        if rows:
            await self.session.execute(
                insert(dead_letters),
                [
                    {
                        "group_id": group_id,
                        "partition": r.partition,
                        "offset": r.offset,
                        "dlq_offset": r.dead_letter_offset,
                        "reason": r.reason,
                        "retry_count": r.retry_count,
                        "failed_at_ms": r.failed_at_ms,
                    }
                    for r in rows
                ],
            )

    async def depth(self, group_id: str) -> int:
        result = await self.session.execute(
            select(func.count()).select_from(dead_letters).where(dead_letters.c.group_id == group_id)
        )
        return int(result.scalar_one())

    async def depths(self) -> dict[str, int]:
        """DLQ depth per group id (for metrics), groups with an empty DLQ left out."""
        result = await self.session.execute(
            select(dead_letters.c.group_id, func.count()).group_by(dead_letters.c.group_id)
        )
        return {group_id: int(count) for group_id, count in result.all()}

    async def page(self, group_id: str, after: int | None, limit: int) -> list[DeadLetterRow]:
        """Up to ``limit`` rows in the order they were dead-lettered, after DLQ offset ``after``."""
        stmt = select(*_COLUMNS).where(dead_letters.c.group_id == group_id)
        if after is not None:
            stmt = stmt.where(dead_letters.c.dlq_offset > after)
        result = await self.session.execute(stmt.order_by(dead_letters.c.dlq_offset).limit(limit))
        return [DeadLetterRow(*row) for row in result.all()]

    async def take(self, group_id: str, keys: Sequence[tuple[int, int]]) -> list[DeadLetterRow]:
        """Remove these messages from the DLQ; the rows that were there."""
        if not keys:
            return []
        result = await self.session.execute(
            delete(dead_letters)
            .where(
                dead_letters.c.group_id == group_id,
                tuple_(dead_letters.c.partition, dead_letters.c.offset).in_(keys),
            )
            .returning(*_COLUMNS)
        )
        return [DeadLetterRow(*row) for row in result.all()]

    async def max_dead_letter_offset(self, group_id: str) -> int | None:
        result = await self.session.execute(
            select(func.max(dead_letters.c.dlq_offset)).where(dead_letters.c.group_id == group_id)
        )
        value = result.scalar_one_or_none()
        return int(value) if value is not None else None

    # alerting -------------------------------------------------------------------------------------

    async def alert_state(self, group_id: str) -> tuple[bool, dict[str, Any] | None, str, str, str, str]:
        """``(armed, dead_letter config, project_id, environment, topic name, group name)`` of a group."""
        result = await self.session.execute(
            select(
                groups.c.dlq_alert_armed,
                groups.c.dead_letter,
                Topic.project_id,
                Topic.environment,
                Topic.name,
                groups.c.name,
            )
            .join(Topic, Topic.id == groups.c.topic_id)
            .where(groups.c.id == group_id)
        )
        armed, config, project_id, environment, topic, group = result.one()
        return bool(armed), config, project_id, environment, topic, group

    async def set_alert_armed(self, group_id: str, armed: bool) -> None:
        await self.session.execute(
            update(groups).where(groups.c.id == group_id).values(dlq_alert_armed=armed)
        )

    # audit ----------------------------------------------------------------------------------------

    async def record(self, entry: DeadLetterAuditRow) -> None:
        await self.session.execute(
            insert(audit).values(
                id=entry.id,
                group_id=entry.group_id,
                action=entry.action,
                message_id=entry.message_id,
                count=entry.count,
                actor_type=entry.actor_type,
                actor_id=entry.actor_id,
                at=entry.at,
            )
        )

    async def audit_page(self, group_id: str, before: str | None, limit: int) -> list[DeadLetterAuditRow]:
        """Newest first: ids grow with time."""
        stmt = select(*_AUDIT_COLUMNS).where(audit.c.group_id == group_id)
        if before is not None:
            stmt = stmt.where(audit.c.id < before)
        result = await self.session.execute(stmt.order_by(audit.c.id.desc()).limit(limit))
        return [DeadLetterAuditRow(*row) for row in result.all()]
