"""SQL of topics: one project environment's named topics, paged by name."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, func, select

from app.stores.metadata.base import Repository
from app.stores.metadata.models import (
    ConsumerGroup,
    DeadLetter,
    GroupLease,
    GroupMember,
    GroupPartition,
    Project,
    Topic,
)


class TopicRepository(Repository):
    """Topics of project environments."""

    async def get_by_name(self, project_id: str, environment: str, name: str) -> Topic | None:
        result = await self.session.execute(
            select(Topic).where(
                Topic.project_id == project_id, Topic.environment == environment, Topic.name == name
            )
        )
        return result.scalar_one_or_none()

    async def page(self, project_id: str, environment: str, after: str | None, limit: int) -> Sequence[Topic]:
        """Topics ordered by name, strictly after ``after``."""
        stmt = select(Topic).where(Topic.project_id == project_id, Topic.environment == environment)
        if after is not None:
            stmt = stmt.where(Topic.name > after)
        result = await self.session.execute(stmt.order_by(Topic.name).limit(limit))
        return result.scalars().all()

    async def count(self, project_id: str, environment: str) -> int:
        result = await self.session.execute(
            select(func.count())
            .select_from(Topic)
            .where(Topic.project_id == project_id, Topic.environment == environment)
        )
        return int(result.scalar_one())

    async def partition_sum(self, project_id: str, environment: str) -> int:
        """The partitions of a project environment's topics, summed."""
        result = await self.session.execute(
            select(func.coalesce(func.sum(Topic.partitions), 0)).where(
                Topic.project_id == project_id, Topic.environment == environment
            )
        )
        return int(result.scalar_one())

    async def partitions_of_project(self, project_id: str) -> list[tuple[str, int]]:
        """``(topic id, partitions)`` of every topic of a project, in all its environments."""
        result = await self.session.execute(
            select(Topic.id, Topic.partitions).where(Topic.project_id == project_id)
        )
        return [(topic_id, int(n)) for topic_id, n in result.all()]

    async def lock_with_project(self, topic_id: str) -> tuple[Topic, Project] | None:
        """The topic, its row locked for this unit of work (``FOR NO KEY UPDATE``), and its project."""
        stmt = (
            select(Topic, Project)
            .join(Project, Project.id == Topic.project_id)
            .where(Topic.id == topic_id)
            .with_for_update(key_share=True, of=Topic)
        )
        row = (await self.session.execute(stmt.execution_options(populate_existing=True))).first()
        return (row[0], row[1]) if row else None

    async def all_ids(self) -> set[str]:
        result = await self.session.execute(select(Topic.id))
        return set(result.scalars().all())

    async def add(self, topic: Topic) -> Topic:
        self.session.add(topic)
        await self.session.flush()
        return topic

    async def remove(self, topic_id: str) -> None:
        """Delete the topic and everything of its groups, taking row locks in the lock order of every
        consumer call (group -> members -> partitions -> leases, ``group_repositories``) rather than in
        the order of the foreign keys' cascades: a cascade locks each group row for delete before its
        members, and a poll holding its member row then waiting for its group (the foreign-key check of
        a lease it inserts) deadlocked with it, so the DELETE of a topic being consumed failed."""
        group_ids = select(ConsumerGroup.id).where(ConsumerGroup.topic_id == topic_id)
        # FOR NO KEY UPDATE: serialised with rebalances, compatible with the polls' foreign-key checks.
        await self.session.execute(group_ids.order_by(ConsumerGroup.id).with_for_update(key_share=True))
        for child in (GroupMember, GroupPartition, GroupLease, DeadLetter):
            await self.session.execute(delete(child).where(child.group_id.in_(group_ids)))
        await self.session.execute(delete(Topic).where(Topic.id == topic_id))
