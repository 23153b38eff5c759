"""SQL of TTL expiry: the per-partition ``expired`` counts of a group, and what a push member's delivery
pass needs to know of the group to dead-letter an expired message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import ConsumerGroup, GroupPartition

partitions = cast(Table, GroupPartition.__table__)
groups = cast(Table, ConsumerGroup.__table__)


class ExpiryRepository(Repository):
    """Expired-message counts of consumer groups (one counter per group partition)."""

    async def add_expired(self, group_id: str, counts: Mapping[int, int]) -> None:
        """Add ``counts`` (partition → messages) in one ``UPDATE`` (executemany); the caller holds the
        partitions' rows already (a delivery pass), so this takes no lock out of order."""
        if counts:
            await self.session.execute(
                update(partitions)
                .where(partitions.c.group_id == group_id, partitions.c.partition == bindparam("p"))
                .values(expired=partitions.c.expired + bindparam("n")),
                [{"p": p, "n": n} for p, n in counts.items()],
            )

    async def expired(self, group_id: str) -> int:
        """Messages of the group that expired before delivery, since its creation."""
        result = await self.session.execute(
            select(func.coalesce(func.sum(partitions.c.expired), 0)).where(partitions.c.group_id == group_id)
        )
        return int(result.scalar_one())

    async def expired_by_group(self) -> dict[str, int]:
        """Every group's expired count (for ``/metrics``)."""
        result = await self.session.execute(
            select(partitions.c.group_id, func.sum(partitions.c.expired)).group_by(partitions.c.group_id)
        )
        return {group_id: int(total or 0) for group_id, total in result.all()}

    async def dead_letter_config(self, group_id: str) -> dict[str, Any] | None:
        """The group's ``deadLetter`` config (None: no DLQ)."""
        result = await self.session.execute(select(groups.c.dead_letter).where(groups.c.id == group_id))
        value = result.scalar_one_or_none()
        return cast(dict[str, Any] | None, value)
