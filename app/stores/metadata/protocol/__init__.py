"""The metadata store's port: a unit of work (``MetadataUnit``) holding one small store per aggregate.

The broker asks ``MetadataStore.unit()`` for one transaction and reaches every aggregate through it:
``async with metadata.unit() as uow: await uow.topics.get_by_name(...)``. The unit commits when the
block ends without an error and rolls back otherwise (``SqlMetadataStore.session`` is the one place that
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
``lease_repositories.py``, ``dead_letter_repositories.py``, ``alert_repositories.py``, ``usage_repositories.py``,
``schedule_repositories.py``, ``flow_repositories.py``, ``expiry_repositories.py``,
``push_repositories.py``, ``group_control_repositories.py`` — on Postgres and SQLite alike. The
conformance suite (``tests/stores/metadata/test_conformance.py``) runs every protocol on both databases
(the schedules and group controls stores in ``test_schedules.py`` and ``test_group_controls.py``), and the
check at the end of this module has mypy hold each repository to its protocol, and the SQL unit of work
(``unit.py::SqlMetadataUnit``) to ``MetadataUnit``.

Every value is frozen: users, projects and keys (``UserRow``, ``ProjectRow``, ``KeyRow``), topics
(``TopicRow``), groups and their members (``GroupRow``, ``GroupConfig``, ``MemberRow``), dashboard
sessions (``UserSessionRow``, ``Account``), alert endpoints and attempts (``EndpointRow``, ``AttemptRow``),
push endpoints and attempts (``PushEndpointRow``, ``PushConfig``, ``NewPushAttempt``, ``PushAttemptRow``),
leases settled (``LeaseSettlement``), schedules and their
runs (``ScheduleRow``, ``ScheduleRunRow``, ``DueRun``), the DLQ audit (``DeadLetterAuditRow``) and the breaker's
counts (``BreakerState``); no store answers an ORM row of ``models.py``.

A store that cannot serve raises ``app.stores.errors.StoreUnavailable`` (from ``SqlMetadataStore.session``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from app.stores.metadata.protocol.alerts import (
    GRANULARITIES,
    AlertStore,
    AttemptRow,
    EndpointRow,
    EndpointSecret,
    NewAlertEvent,
    OutboxClaim,
    Rollup,
    UsageStore,
)
from app.stores.metadata.protocol.controls import (
    ExpiryStore,
    FlowStore,
    NewPushAttempt,
    PushAttemptRow,
    PushConfig,
    PushEndpointRow,
    PushStore,
    PushTarget,
)
from app.stores.metadata.protocol.delivery import (
    CheckpointStore,
    DeadLetterAuditRow,
    DeadLetterRow,
    DeadLetterStore,
    DueLease,
    LeaseSettlement,
    LeaseState,
    LeaseStore,
    PartitionCheckpoint,
)
from app.stores.metadata.protocol.group_controls import BreakerState, GroupControlStore
from app.stores.metadata.protocol.schedules import DueRun, ScheduleRow, ScheduleRunRow, ScheduleStore
from app.stores.metadata.protocol.tenancy import (
    Account,
    ApiKeyStore,
    KeyRow,
    KeyStanding,
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
    MemberRow,
    OwnedPartition,
    PartitionState,
    PartitionStore,
    TopicRow,
    TopicStore,
)

__all__ = [
    "GRANULARITIES",
    "Account",
    "AlertStore",
    "ApiKeyStore",
    "AttemptRow",
    "BreakerState",
    "CallerView",
    "CheckpointStore",
    "DeadLetterAuditRow",
    "DeadLetterRow",
    "DeadLetterStore",
    "DueLease",
    "DueRun",
    "EndpointRow",
    "EndpointSecret",
    "ExpiryStore",
    "FlowStore",
    "GroupConfig",
    "GroupControlStore",
    "GroupRow",
    "GroupStore",
    "KeyRow",
    "KeyStanding",
    "LeaseSettlement",
    "LeaseState",
    "LeaseStore",
    "MemberRow",
    "MetadataStore",
    "MetadataUnit",
    "NewAlertEvent",
    "NewPushAttempt",
    "OutboxClaim",
    "OwnedPartition",
    "PartitionCheckpoint",
    "PartitionState",
    "PartitionStore",
    "ProjectRow",
    "ProjectStore",
    "PushAttemptRow",
    "PushConfig",
    "PushEndpointRow",
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


T = TypeVar("T")


class MetadataStore(Protocol):
    """The metadata store as the domain sees it: units of work, its health, and its end.

    Which database, and how a transaction is opened and committed, is the implementation's
    (``database.py::SqlMetadataStore``, the one place it is decided)."""

    @property
    def checkpoint_writer(self) -> CheckpointStore:
        """How a push member's checkpoint is written (fenced, off the unit of work when it can be)."""

    def unit(self, *, readonly: bool = False) -> AbstractAsyncContextManager[MetadataUnit]:
        """One unit of work: committed when the block ends without an error, rolled back otherwise.
        ``readonly`` units (lookups on hot paths) never wait for a writer's lock."""

    async def run_unit(self, work: Callable[[MetadataUnit], Awaitable[T]], *, attempts: int = ...) -> T:
        """``work`` in a unit of work, run again (up to ``attempts`` times) when the database broke a lock
        conflict by failing it; ``work`` must do nothing but metadata work. Still failing:
        ``app.stores.errors.StoreConflict``."""

    async def check(self, timeout: float = 2.0) -> bool:
        """Whether the store answers a trivial query within ``timeout`` seconds."""

    async def close(self) -> None:
        """Write what is pending and let go of the connections."""


if TYPE_CHECKING:  # mypy holds each SQL repository to its protocol (no runtime import cycle)
    from sqlalchemy.ext.asyncio import AsyncSession

    from app.stores.metadata.alert_repositories import AlertRepository
    from app.stores.metadata.database import SqlMetadataStore
    from app.stores.metadata.dead_letter_repositories import DeadLetterRepository
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

    def _store(store: SqlMetadataStore) -> None:
        _store: MetadataStore = store
