"""SQL of consumer groups and their members: the first two steps of the lock order.

Rebalances and stopped-group changes lock the ``consumer_groups`` row first (``get(for_update=True)``, as
``FOR NO KEY UPDATE``, which leaves its children's foreign-key checks free);
member calls read their group, themselves and the soonest member expiry in one round trip
(``caller_view``).

The lock order is group → members → partitions → leases everywhere (``group_repositories``,
``partition_repositories``, ``lease_repositories``), so rebalances, polls and acks cannot deadlock. SQLite runs every
write unit of work under ``BEGIN IMMEDIATE``, which serialises them; ``FOR UPDATE`` is simply not rendered there.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, and_, delete, func, select, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import ConsumerGroup, GroupMember, Topic
from app.stores.metadata.protocol import CallerView, GroupConfig, GroupRow, MemberRow

groups = cast(Table, ConsumerGroup.__table__)
members = cast(Table, GroupMember.__table__)


# A GroupRow's fields are the table's columns, but for the one whose column kept its first name.
_COLUMN = {"dead_letter_alert_armed": "dlq_alert_armed"}


def _group_row(group: ConsumerGroup) -> GroupRow:
    return GroupRow(**{f: getattr(group, f) for f in GroupRow.__dataclass_fields__})


_MEMBER_FIELDS = tuple(MemberRow.__dataclass_fields__)


class GroupRepository(Repository):
    """Groups and their members."""

    # groups ---------------------------------------------------------------------------------------

    async def get(self, topic_id: str, name: str, *, for_update: bool = False) -> GroupRow | None:
        stmt = select(ConsumerGroup).where(ConsumerGroup.topic_id == topic_id, ConsumerGroup.name == name)
        if for_update:
            # FOR NO KEY UPDATE, not FOR UPDATE: the lock still serialises everything that locks the group,
            # but not the foreign-key checks of rows inserted under it (a lease row takes FOR KEY SHARE on
            # its group). With FOR UPDATE, a member releasing a partition (partition row, then a lease
            # insert) and a leave of the same group (group row, then that partition row) deadlocked, and
            # Postgres broke it after deadlock_timeout: a consumer's stop on the cluster took ~1 s.
            stmt = stmt.with_for_update(key_share=True)
        result = await self.session.execute(stmt.execution_options(populate_existing=True))
        group = result.scalar_one_or_none()
        return _group_row(group) if group is not None else None

    async def insert_if_absent(self, group: GroupRow) -> None:
        """Create a group unless one of that name exists (a concurrent create is not an error)."""
        values = {_COLUMN.get(f, f): getattr(group, f) for f in GroupRow.__dataclass_fields__}
        stmt = (
            self._insert(groups).values(**values).on_conflict_do_nothing(index_elements=["topic_id", "name"])
        )
        await self.session.execute(stmt)

    async def set_config(self, group_id: str, config: GroupConfig, at: datetime) -> None:
        await self._update_group(
            group_id, **{f: getattr(config, f) for f in GroupConfig.__dataclass_fields__}, updated_at=at
        )

    async def set_pause(self, group_id: str, reason: str, until_ms: int | None, at: datetime) -> None:
        await self._update_group(group_id, paused_reason=reason, paused_until_ms=until_ms, updated_at=at)

    async def clear_pause(self, group_id: str, breaker_window_ms: int, at: datetime) -> None:
        await self._update_group(
            group_id,
            paused_reason=None,
            paused_until_ms=None,
            breaker_window_ms=breaker_window_ms,
            breaker_acked=0,
            breaker_failed=0,
            updated_at=at,
        )

    async def _update_group(self, group_id: str, **values: Any) -> None:
        # An ORM UPDATE: a group row already read in this unit of work is updated with it.
        await self.session.execute(update(ConsumerGroup).where(ConsumerGroup.id == group_id).values(**values))

    async def all_ids(self) -> set[str]:
        result = await self.session.execute(select(groups.c.id))
        return set(result.scalars().all())

    async def count_for_topic(self, topic_id: str) -> int:
        result = await self.session.execute(
            select(func.count()).select_from(groups).where(groups.c.topic_id == topic_id)
        )
        return int(result.scalar_one())

    async def busiest_topic(self, project_id: str, environment: str) -> tuple[str, int] | None:
        """The topic of a project environment with the most groups (by name on a tie), and its count."""
        count = func.count(groups.c.id)
        stmt = (
            select(Topic.name, count)
            .join(groups, groups.c.topic_id == Topic.id)
            .where(Topic.project_id == project_id, Topic.environment == environment)
            .group_by(Topic.name)
            .order_by(count.desc(), Topic.name)
            .limit(1)
        )
        row = (await self.session.execute(stmt)).first()
        return (str(row[0]), int(row[1])) if row else None

    async def ids_of_project(self, project_id: str) -> list[str]:
        """Ids of every group of a project's topics, in all its environments."""
        result = await self.session.execute(
            select(groups.c.id)
            .join(Topic, Topic.id == groups.c.topic_id)
            .where(Topic.project_id == project_id)
        )
        return list(result.scalars().all())

    async def list_for_topic(self, topic_id: str) -> list[GroupRow]:
        result = await self.session.execute(
            select(ConsumerGroup).where(ConsumerGroup.topic_id == topic_id).order_by(ConsumerGroup.name)
        )
        return [_group_row(g) for g in result.scalars().all()]

    async def set_generation(self, group_id: str, generation: int, partition_count: int) -> None:
        await self.session.execute(
            update(groups)
            .where(groups.c.id == group_id)
            .values(generation=generation, partition_count=partition_count)
        )

    async def remove(self, group_id: str) -> None:
        await self.session.execute(delete(groups).where(groups.c.id == group_id))

    async def caller_view(self, topic_id: str, name: str, member_id: str) -> CallerView | None:
        """The group, the calling member (if present) and the soonest member expiry, in one query."""
        others = members.alias("others")
        soonest = (
            select(func.min(others.c.expires_at_ms))
            .where(others.c.group_id == groups.c.id)
            .correlate(groups)
            .scalar_subquery()
        )
        stmt = (
            select(
                groups.c.id,
                groups.c.generation,
                groups.c.ack_timeout_ms,
                groups.c.partition_count,
                members.c.expires_at_ms,
                members.c.session_timeout_ms,
                soonest,
                groups.c.dead_letter,
                groups.c.max_in_flight,
                groups.c.rate,
                groups.c.filter,
                groups.c.paused_reason,
                groups.c.paused_until_ms,
            )
            .select_from(
                groups.outerjoin(members, and_(members.c.group_id == groups.c.id, members.c.id == member_id))
            )
            .where(groups.c.topic_id == topic_id, groups.c.name == name)
        )
        row = (await self.session.execute(stmt)).first()
        return CallerView(*tuple(row)) if row else None

    # members --------------------------------------------------------------------------------------

    async def live_members(self, group_id: str, now_ms: int) -> list[str]:
        """Live members in join order (the order assignment breaks ties by)."""
        result = await self.session.execute(
            select(members.c.id)
            .where(members.c.group_id == group_id, members.c.expires_at_ms > now_ms)
            .order_by(members.c.joined_at, members.c.id)
        )
        return list(result.scalars().all())

    async def push_members(self, group_id: str, member_ids: Sequence[str]) -> set[str]:
        """Which of these members are push members (they keep leases in memory)."""
        if not member_ids:
            return set()
        result = await self.session.execute(
            select(members.c.id).where(
                members.c.group_id == group_id, members.c.id.in_(member_ids), members.c.push.is_(True)
            )
        )
        return set(result.scalars().all())

    async def live_member_counts(self, group_ids: Sequence[str], now_ms: int) -> dict[str, int]:
        if not group_ids:
            return {}
        result = await self.session.execute(
            select(members.c.group_id, func.count())
            .where(members.c.group_id.in_(group_ids), members.c.expires_at_ms > now_ms)
            .group_by(members.c.group_id)
        )
        return {gid: int(n) for gid, n in result.all()}

    async def remove_expired_members(self, group_id: str, now_ms: int) -> list[str]:
        result = await self.session.execute(
            delete(members)
            .where(members.c.group_id == group_id, members.c.expires_at_ms <= now_ms)
            .returning(members.c.id)
        )
        return list(result.scalars().all())

    async def get_member(self, group_id: str, member_id: str) -> MemberRow | None:
        stmt = select(*(members.c[f] for f in _MEMBER_FIELDS)).where(
            members.c.group_id == group_id, members.c.id == member_id
        )
        row = (await self.session.execute(stmt)).first()
        return MemberRow(*row) if row else None

    async def add_member(self, member: MemberRow) -> None:
        self.session.add(GroupMember(**{f: getattr(member, f) for f in _MEMBER_FIELDS}))
        await self._flush()

    async def save_member(self, member: MemberRow) -> None:
        """Write a rejoined member's session timeout, expiry and push flag (its claim is the flow
        store's)."""
        await self.session.execute(
            update(members)
            .where(members.c.group_id == member.group_id, members.c.id == member.id)
            .values(
                session_timeout=member.session_timeout,
                session_timeout_ms=member.session_timeout_ms,
                expires_at_ms=member.expires_at_ms,
                push=member.push,
            )
        )

    async def remove_member(self, group_id: str, member_id: str) -> bool:
        result = await self.session.execute(
            delete(members).where(members.c.group_id == group_id, members.c.id == member_id)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def touch_member(self, group_id: str, member_id: str, now_ms: int, expires_at_ms: int) -> bool:
        """Move a live member's expiry; False if it is gone or already expired."""
        result = await self.session.execute(
            update(members)
            .where(
                members.c.group_id == group_id, members.c.id == member_id, members.c.expires_at_ms > now_ms
            )
            .values(expires_at_ms=self._greatest(members.c.expires_at_ms, expires_at_ms))
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]
