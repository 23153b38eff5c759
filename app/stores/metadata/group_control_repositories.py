"""SQL of a group's controls: its pause and the DLQ breaker's outcome counters (``consumer_groups`` row).

Not on a per-message path: the breaker's flush writes one row per group for many outcomes
(``app/broker/breaker.py``), pause and resume one row per call. The group row is locked as
``groups.get(for_update=True)`` does (``FOR NO KEY UPDATE``), the first step of the lock order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import ConsumerGroup, Topic
from app.stores.metadata.protocol import BreakerState


class GroupControlRepository(Repository):
    """Breaker counters of consumer groups (``protocol.GroupControlStore``); pauses are
    ``GroupRepository.set_pause`` / ``clear_pause``."""

    async def dead_letter_configs(self, group_ids: Sequence[str]) -> dict[str, dict[str, Any] | None]:
        """The ``deadLetter`` config of each of these groups that still exists."""
        if not group_ids:
            return {}
        result = await self.session.execute(
            select(ConsumerGroup.id, ConsumerGroup.dead_letter).where(ConsumerGroup.id.in_(group_ids))
        )
        return {group_id: config for group_id, config in result.all()}

    async def lock(self, group_id: str) -> BreakerState | None:
        """The group's pause and breaker counts by id, its row locked for this unit of work."""
        result = await self.session.execute(
            select(
                ConsumerGroup.id,
                ConsumerGroup.name,
                ConsumerGroup.topic_id,
                ConsumerGroup.paused_reason,
                ConsumerGroup.paused_until_ms,
                ConsumerGroup.breaker_window_ms,
                ConsumerGroup.breaker_acked,
                ConsumerGroup.breaker_failed,
            )
            .where(ConsumerGroup.id == group_id)
            .with_for_update(key_share=True)
        )
        row = result.first()
        return BreakerState(*row) if row is not None else None

    async def set_counts(self, group_id: str, window_ms: int, acked: int, failed: int) -> None:
        """Store the breaker's window start and its counts (an ORM UPDATE: a group row already read in
        this unit of work is updated with it)."""
        await self.session.execute(
            update(ConsumerGroup)
            .where(ConsumerGroup.id == group_id)
            .values(breaker_window_ms=window_ms, breaker_acked=acked, breaker_failed=failed)
        )

    async def topic_of(self, topic_id: str) -> tuple[str, str, str] | None:
        """``(project_id, environment, name)`` of a topic."""
        row = (
            await self.session.execute(
                select(Topic.project_id, Topic.environment, Topic.name).where(Topic.id == topic_id)
            )
        ).first()
        return (str(row[0]), str(row[1]), str(row[2])) if row is not None else None
