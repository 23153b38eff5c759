"""The SQL unit of work: one session of ``SqlMetadataStore``, and the repositories over it as the stores of
``protocol.MetadataUnit``.

Each repository is built on first use and kept for the unit's life, so a unit that touches two aggregates
builds two. The unit neither opens nor commits its transaction: ``SqlMetadataStore.session`` does, and
``SqlMetadataStore.unit`` hands this wrapper out. Code not yet moved onto the port (#34) that holds a session
of its own wraps it here to call code that is: ``SqlMetadataUnit(session)`` shares that transaction.
"""

from __future__ import annotations

from functools import cached_property

from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.metadata.alert_repositories import AlertRepository
from app.stores.metadata.dead_letter_repositories import DeadLetterRepository
from app.stores.metadata.expiry_repositories import ExpiryRepository
from app.stores.metadata.flow_repositories import FlowRepository
from app.stores.metadata.group_control_repositories import GroupControlRepository
from app.stores.metadata.group_repositories import GroupRepository
from app.stores.metadata.lease_repositories import LeaseRepository
from app.stores.metadata.partition_repositories import PartitionRepository
from app.stores.metadata.push_repositories import PushRepository
from app.stores.metadata.schedule_repositories import ScheduleRepository
from app.stores.metadata.tenancy_repositories import (
    ApiKeyRepository,
    ProjectRepository,
    UserRepository,
    UserSessionRepository,
)
from app.stores.metadata.topic_repositories import TopicRepository
from app.stores.metadata.usage_repositories import UsageRollupRepository


class SqlMetadataUnit:
    """The metadata stores of one SQL session (``protocol.MetadataUnit``)."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    @cached_property
    def users(self) -> UserRepository:
        return UserRepository(self.session)

    @cached_property
    def user_sessions(self) -> UserSessionRepository:
        return UserSessionRepository(self.session)

    @cached_property
    def projects(self) -> ProjectRepository:
        return ProjectRepository(self.session)

    @cached_property
    def keys(self) -> ApiKeyRepository:
        return ApiKeyRepository(self.session)

    @cached_property
    def topics(self) -> TopicRepository:
        return TopicRepository(self.session)

    @cached_property
    def groups(self) -> GroupRepository:
        return GroupRepository(self.session)

    @cached_property
    def partitions(self) -> PartitionRepository:
        return PartitionRepository(self.session)

    @cached_property
    def leases(self) -> LeaseRepository:
        return LeaseRepository(self.session)

    @cached_property
    def dead_letters(self) -> DeadLetterRepository:
        return DeadLetterRepository(self.session)

    @cached_property
    def alerts(self) -> AlertRepository:
        return AlertRepository(self.session)

    @cached_property
    def usage(self) -> UsageRollupRepository:
        return UsageRollupRepository(self.session)

    @cached_property
    def schedules(self) -> ScheduleRepository:
        return ScheduleRepository(self.session)

    @cached_property
    def flow(self) -> FlowRepository:
        return FlowRepository(self.session)

    @cached_property
    def expiry(self) -> ExpiryRepository:
        return ExpiryRepository(self.session)

    @cached_property
    def push(self) -> PushRepository:
        return PushRepository(self.session)

    @cached_property
    def group_controls(self) -> GroupControlRepository:
        return GroupControlRepository(self.session)
