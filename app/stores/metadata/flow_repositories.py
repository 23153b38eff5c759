"""SQL of a group's flow control: the in-flight claims of its members.

A member's ``in_flight_claim`` is how many of the group's ``maxInFlight`` it may hold. A claim only grows
while the group row is locked (``lock_group``: the first step of the lock order, group → members →
partitions → leases), so two members never grow theirs on the same view of the others' claims.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, and_, func, select, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import ConsumerGroup, GroupLease, GroupMember

groups = cast(Table, ConsumerGroup.__table__)
members = cast(Table, GroupMember.__table__)
leases = cast(Table, GroupLease.__table__)


class FlowRepository(Repository):
    """Members' in-flight claims and the lease rows they hold."""

    async def lock_group(self, group_id: str) -> None:
        """Serialise claim changes of one group (``FOR NO KEY UPDATE``; SQLite's units of work are serial)."""
        await self.session.execute(
            select(groups.c.id).where(groups.c.id == group_id).with_for_update(key_share=True)
        )

    async def held(self, group_id: str, member_id: str, now_ms: int) -> int:
        """Lease rows the member holds: delivered to it, not acked, deadline still running."""
        result = await self.session.execute(
            select(func.count()).where(
                leases.c.group_id == group_id,
                leases.c.member_id == member_id,
                leases.c.acked.is_(False),
                leases.c.deadline_ms > now_ms,
            )
        )
        return int(result.scalar_one())

    async def others(self, group_id: str, member_id: str, now_ms: int) -> tuple[int, int]:
        """The claims of the group's other live members added up, and how many live members it has."""
        result = await self.session.execute(
            select(
                func.coalesce(func.sum(members.c.in_flight_claim).filter(members.c.id != member_id), 0),
                func.count(),
            ).where(and_(members.c.group_id == group_id, members.c.expires_at_ms > now_ms))
        )
        claimed, live = result.one()
        return int(claimed), int(live)

    async def set_claim(self, group_id: str, member_id: str, claim: int | None) -> None:
        await self.session.execute(
            update(members)
            .where(members.c.group_id == group_id, members.c.id == member_id)
            .values(in_flight_claim=claim)
        )
