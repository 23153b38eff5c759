"""The metadata store's port: a unit of work (``MetadataUnit``) holding one small store per aggregate.

The broker asks ``MetadataStore.unit()`` for one transaction and reaches every aggregate through it:
``async with metadata.unit() as uow: await uow.topics.get_by_name(...)``. The unit commits when the
block ends without an error and rolls back otherwise (``MetadataStore.session`` is the one place that
opens and commits a transaction; ``MetadataStore.run_unit`` runs one again after a lock conflict).

A protocol names what the domain asks of one aggregate's rows: tenancy and keys, topics, groups with
their members and partitions, leases, dead letters, alerts and usage rollups. Every method runs on its
unit of work, which owns the transaction; none commits. The lock order is the aggregates' order here:
group → members → partitions → leases. A write that would take a unique name or key twice raises
``app.stores.errors.AlreadyExists``, never a driver's error.

The protocols and the values they answer (``CallerView``, ``PartitionState``, ``LeaseState``,
``DeadLetterRow``, …) live in this package, one module per group of aggregates, so the domain depends on
the contract, not on an implementation: ``tenancy.py`` (users, dashboard sessions, projects, keys),
``topics.py`` (topics, groups with their members and partitions), ``delivery.py`` (leases, dead
letters), ``controls.py`` (in-flight claims, expiry counts, push endpoints, group controls),
``alerts.py`` (alert endpoints, outbox and attempts; usage rollups), ``schedules.py`` (schedules and their
runs). This module holds the unit
of work and re-exports them all: ``from app.stores.metadata.protocol import TopicRow``.

Implementations, one module per aggregate on one base (``base.py``): ``tenancy_repositories.py`` (users,
projects, keys), ``topic_repositories.py``, ``group_repositories.py``, ``partition_repositories.py``,
``lease_repositories.py``, ``dlq_repositories.py``, ``alert_repositories.py``, ``usage_repositories.py``,
``schedule_repositories.py``, ``flow_repositories.py``, ``expiry_repositories.py``,
``push_repositories.py``, ``group_control_repositories.py`` — on Postgres and SQLite alike. The
conformance suite (``tests/stores/metadata/test_conformance.py``) runs every protocol on both databases
(the schedules and group controls stores in ``test_schedules.py`` and ``test_group_controls.py``), and the
check at the end of this module has mypy hold each repository to its protocol, and the SQL unit of work
(``unit.py::SqlMetadataUnit``) to ``MetadataUnit``.

Not every value is frozen yet: users, projects and keys (``UserRow``, ``ProjectRow``, ``KeyRow``), topics
(``TopicRow``), groups (``GroupRow``, ``GroupConfig``), dashboard sessions (``UserSessionRow``,
``Account``), alert endpoints and attempts (``EndpointRow``, ``AttemptRow``), schedules and their runs
(``ScheduleRow``, ``ScheduleRunRow``, ``DueRun``), the DLQ audit (``DlqAuditRow``) and the breaker's counts
(``BreakerState``) are; other stores still answer the ORM rows of ``models.py`` (#34).

A store that cannot serve raises ``app.stores.errors.StoreUnavailable`` (from ``MetadataStore.session``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from app.stores.metadata.protocol.alerts import (
    AlertStore,
    AttemptRow,
    Claimed,
    EndpointRow,
    Rollup,
    UsageStore,
)
from app.stores.metadata.protocol.controls import ExpiryStore, FlowStore, PushStore, PushTarget
from app.stores.metadata.protocol.delivery import (
    DeadLetterRow,
    DeadLetterStore,
    DlqAuditRow,
    DueLease,
    LeaseState,
    LeaseStore,
)
from app.stores.metadata.protocol.group_controls import BreakerState, GroupControlStore
from app.stores.metadata.protocol.schedules import DueRun, ScheduleRow, ScheduleRunRow, ScheduleStore
from app.stores.metadata.protocol.tenancy import (
    Account,
    ApiKeyStore,
    KeyRow,
    ProjectRow,
    ProjectStore,
    UserRow,
    UserSessionRow,
    UserSessionStore,
    UserStore,
)
from app.stores.metadata.protocol.topics import (
    CallerView,
    GroupConfig,
    GroupRow,
    GroupStore,
    OwnedPartition,
    PartitionState,
    PartitionStore,
    TopicRow,
    TopicStore,
)

__all__ = [
    "Account",
    "AlertStore",
    "ApiKeyStore",
    "AttemptRow",
    "BreakerState",
    "CallerView",
    "Claimed",
    "DeadLetterRow",
    "DeadLetterStore",
    "DlqAuditRow",
    "DueLease",
    "DueRun",
    "EndpointRow",
    "ExpiryStore",
    "FlowStore",
    "GroupConfig",
    "GroupControlStore",
    "GroupRow",
    "GroupStore",
    "KeyRow",
    "LeaseState",
    "LeaseStore",
    "MetadataUnit",
    "OwnedPartition",
    "PartitionState",
    "PartitionStore",
    "ProjectRow",
    "ProjectStore",
    "PushStore",
    "PushTarget",
    "Rollup",
    "ScheduleRow",
    "ScheduleRunRow",
    "ScheduleStore",
    "TopicRow",
    "TopicStore",
    "UsageStore",
    "UserRow",
    "UserSessionRow",
    "UserSessionStore",
    "UserStore",
]


# the unit of work ---------------------------------------------------------------------------------


@runtime_checkable
class MetadataUnit(Protocol):
    """One transaction of the metadata store and the stores that work in it (``MetadataStore.unit()``).

    Committed when the ``async with`` block ends without an error, rolled back otherwise; the stores are
    built on first use."""

    @property
    def users(self) -> UserStore:
        """Users."""

    @property
    def user_sessions(self) -> UserSessionStore:
        """Dashboard sessions."""

    @property
    def projects(self) -> ProjectStore:
        """Projects."""

    @property
    def keys(self) -> ApiKeyStore:
        """API keys."""

    @property
    def topics(self) -> TopicStore:
        """Topics."""

    @property
    def groups(self) -> GroupStore:
        """Consumer groups and their members."""

    @property
    def partitions(self) -> PartitionStore:
        """Groups' partitions and offsets."""

    @property
    def leases(self) -> LeaseStore:
        """Leases."""

    @property
    def dead_letters(self) -> DeadLetterStore:
        """Dead letters."""

    @property
    def alerts(self) -> AlertStore:
        """Alert endpoints, the outbox and attempts."""

    @property
    def usage(self) -> UsageStore:
        """Usage rollups."""

    @property
    def schedules(self) -> ScheduleStore:
        """Schedules and their runs."""

    @property
    def group_controls(self) -> GroupControlStore:
        """Groups' DLQ breaker counters (and the configs they are judged by)."""

    @property
    def flow(self) -> FlowStore:
        """Members' in-flight claims (flow control)."""

    @property
    def expiry(self) -> ExpiryStore:
        """Expired-message counts."""

    @property
    def push(self) -> PushStore:
        """Push groups' endpoints and attempts."""


if TYPE_CHECKING:  # mypy holds each SQL repository to its protocol (no runtime import cycle)
    from sqlalchemy.ext.asyncio import AsyncSession

    from app.stores.metadata.alert_repositories import AlertRepository
    from app.stores.metadata.dlq_repositories import DeadLetterRepository
    from app.stores.metadata.expiry_repositories import ExpiryRepository
    from app.stores.metadata.flow_repositories import FlowRepository
    from app.stores.metadata.group_control_repositories import GroupControlRepository
    from app.stores.metadata.group_repositories import GroupRepository
    from app.stores.metadata.lease_repositories import LeaseRepository
    from app.stores.metadata.partition_repositories import PartitionRepository
    from app.stores.metadata.push_repositories import PushRepository
    from app.stores.metadata.schedule_repositories import ScheduleRepository
    from app.stores.metadata.tenancy_repositories import ApiKeyRepository, ProjectRepository, UserRepository
    from app.stores.metadata.topic_repositories import TopicRepository
    from app.stores.metadata.unit import SqlMetadataUnit
    from app.stores.metadata.usage_repositories import UsageRollupRepository

    def _implementations(session: AsyncSession) -> None:
        _users: UserStore = UserRepository(session)
        _projects: ProjectStore = ProjectRepository(session)
        _keys: ApiKeyStore = ApiKeyRepository(session)
        _topics: TopicStore = TopicRepository(session)
        _groups: GroupStore = GroupRepository(session)
        _partitions: PartitionStore = PartitionRepository(session)
        _leases: LeaseStore = LeaseRepository(session)
        _dead_letters: DeadLetterStore = DeadLetterRepository(session)
        _alerts: AlertStore = AlertRepository(session)
        _usage: UsageStore = UsageRollupRepository(session)
        _schedules: ScheduleStore = ScheduleRepository(session)
        _group_controls: GroupControlStore = GroupControlRepository(session)
        _expiry: ExpiryStore = ExpiryRepository(session)
        _flow: FlowStore = FlowRepository(session)
        _push: PushStore = PushRepository(session)
        _unit: MetadataUnit = SqlMetadataUnit(session)
