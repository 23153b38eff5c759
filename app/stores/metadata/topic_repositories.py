"""SQL of topics: one project environment's named topics, paged by name."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update

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
from app.stores.metadata.protocol import ProjectRow, TopicRow


def _row(topic: Topic) -> TopicRow:
    return TopicRow(
        topic.id,
        topic.project_id,
        topic.environment,
        topic.name,
        topic.partitions,
        topic.retention,
        topic.retention_ms,
        topic.delivery,
        topic.replicas,
        topic.status,
        topic.created_at,
        topic.updated_at,
    )


class TopicRepository(Repository):
    """Topics of project environments."""

    async def get_by_name(self, project_id: str, environment: str, name: str) -> TopicRow | None:
        result = await self.session.execute(
            select(Topic).where(
                Topic.project_id == project_id, Topic.environment == environment, Topic.name == name
            )
        )
        topic = result.scalar_one_or_none()
        return _row(topic) if topic is not None else None

    async def exists(self, topic_id: str) -> bool:
        return await self.session.get(Topic, topic_id) is not None

    async def page(self, project_id: str, environment: str, after: str | None, limit: int) -> list[TopicRow]:
        """Topics ordered by name, strictly after ``after``."""
        stmt = select(Topic).where(Topic.project_id == project_id, Topic.environment == environment)
        if after is not None:
            stmt = stmt.where(Topic.name > after)
        result = await self.session.execute(stmt.order_by(Topic.name).limit(limit))
        return [_row(topic) for topic in result.scalars().all()]

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

    async def lock_with_project(self, topic_id: str) -> tuple[TopicRow, ProjectRow] | None:
        """The topic, its row locked for this unit of work (``FOR NO KEY UPDATE``), and its project."""
        stmt = (
            select(Topic, Project)
            .join(Project, Project.id == Topic.project_id)
            .where(Topic.id == topic_id)
            .with_for_update(key_share=True, of=Topic)
        )
        row = (await self.session.execute(stmt.execution_options(populate_existing=True))).first()
        if not row:
            return None
        project: Project = row[1]
        return _row(row[0]), ProjectRow(**{f: getattr(project, f) for f in ProjectRow.__dataclass_fields__})

    async def all_ids(self) -> set[str]:
        result = await self.session.execute(select(Topic.id))
        return set(result.scalars().all())

    async def add(self, topic: TopicRow) -> None:
        self.session.add(
            Topic(
                id=topic.id,
                project_id=topic.project_id,
                environment=topic.environment,
                name=topic.name,
                partitions=topic.partitions,
                retention=topic.retention,
                retention_ms=topic.retention_ms,
                delivery=topic.delivery,
                replicas=topic.replicas,
                status=topic.status,
                created_at=topic.created_at,
                updated_at=topic.updated_at,
            )
        )
        await self._flush()

    async def update(
        self,
        topic_id: str,
        *,
        updated_at: datetime,
        partitions: int | None = None,
        retention: tuple[str, int] | None = None,
    ) -> None:
        values: dict[str, Any] = {"updated_at": updated_at}
        if partitions is not None:
            values["partitions"] = partitions
        if retention is not None:
            values["retention"], values["retention_ms"] = retention
        # An ORM UPDATE: a row of this topic already read in this unit of work is updated with it.
        await self.session.execute(update(Topic).where(Topic.id == topic_id).values(**values))

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
