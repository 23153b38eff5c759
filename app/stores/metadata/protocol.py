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

The values the protocols answer (``CallerView``, ``PartitionState``, ``LeaseState``, ``DeadLetterRow``, …)
are defined here too, so the domain depends on the contract, not on an implementation.

Implementations, one module per aggregate on one base (``base.py``): ``tenancy_repositories.py`` (users,
projects, keys), ``topic_repositories.py``, ``group_repositories.py``, ``partition_repositories.py``,
``lease_repositories.py``, ``dlq_repositories.py``, ``alert_repositories.py``, ``usage_repositories.py`` —
on Postgres and SQLite alike. The conformance
suite (``tests/stores/metadata/test_conformance.py``) runs every protocol on both databases, and the
check at the end of this module has mypy hold each repository to its protocol, and the SQL unit of work
(``unit.py::SqlMetadataUnit``) to ``MetadataUnit``.

Not every value is frozen yet: topics (``TopicRow``), dashboard sessions (``UserSessionRow``, ``Account``)
and alert endpoints and attempts (``EndpointRow``, ``AttemptRow``) are; other stores still answer the ORM rows of ``models.py`` (#34).

A store that cannot serve raises ``app.stores.errors.StoreUnavailable`` (from ``MetadataStore.session``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from app.stores.metadata.models import (
    ApiKey,
    ConsumerGroup,
    DlqAuditEntry,
    GroupMember,
    Project,
    Topic,
    User,
)

# values -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallerView:
    """What every member call needs to know first, read in one round trip."""

    group_id: str
    generation: int
    ack_timeout_ms: int
    partition_count: int
    member_expires_at_ms: int | None
    member_session_timeout_ms: int | None
    soonest_expiry_ms: int | None
    dead_letter: dict[str, Any] | None = None
    max_in_flight: int | None = None
    rate: float | None = None
    filter: str | None = None
    paused_reason: str | None = None  # a pause (``app/broker/pauses.py``): why, and until when
    paused_until_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A group's partition: its owner and offsets."""

    partition: int
    member_id: str | None
    committed: int | None
    position: int | None


@dataclass(frozen=True, slots=True)
class OwnedPartition:
    """A partition a member owns or holds, with what a push member needs to claim it."""

    partition: int
    member_id: str | None
    held_by: str | None
    epoch: int
    committed: int | None
    position: int | None


@dataclass(frozen=True, slots=True)
class DueLease:
    """An unacked lease whose deadline passed: timed out (``member_id`` still set) or due for a retry."""

    partition: int
    offset: int
    attempt: int
    member_id: str | None
    deadline_ms: int
    reason: str | None
    replay_offset: int | None
    failures: str | None = None  # the failed attempts before this one (``delivery/failures.py``)


@dataclass(frozen=True, slots=True)
class LeaseState:
    """A lease row as stored."""

    partition: int
    offset: int
    member_id: str | None
    attempt: int
    deadline_ms: int
    acked: bool
    failures: str | None = None  # the failed attempts so far (``delivery/failures.py``)


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """A dead letter: the message's place, its copy's offset in the DLQ log, and why."""

    partition: int
    offset: int
    dlq_offset: int
    reason: str
    retry_count: int
    failed_at_ms: int


@dataclass(frozen=True, slots=True)
class Claimed:
    """An outbox event taken for one delivery attempt, with where it goes."""

    id: str
    project_id: str
    environment: str
    type: str
    body: str
    attempts: int
    url: str | None
    secret: str | None
    failures: int
    open_until_ms: int | None


@dataclass(frozen=True, slots=True)
class Rollup:
    """One bucket's counts (a row to add, or a row read back)."""

    project_id: str
    environment: str
    key_id: str
    category: str
    granularity: str
    bucket_start: datetime
    requests: int
    messages: int
    bytes_in: int
    bytes_out: int
    rate_limited: int
    peak_requests_per_second: int = 0


@dataclass(frozen=True, slots=True)
class TopicRow:
    """A topic as stored (its messages live in the log engine under ``id``)."""

    id: str
    project_id: str
    environment: str
    name: str
    partitions: int
    retention: str
    retention_ms: int
    delivery: str
    replicas: int
    status: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class EndpointRow:
    """A project environment's alert endpoint as stored: where events go, the sealed secret they are
    signed with, and its breaker (``failures`` in a row, open until ``open_until_ms``)."""

    project_id: str
    environment: str
    url: str
    secret: str
    failures: int
    open_until_ms: int | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One try at delivering an alert event."""

    id: str
    event_id: str
    event_type: str
    attempt: int
    ok: bool
    status_code: int | None
    error: str | None
    duration_ms: int
    at: datetime


@dataclass(frozen=True, slots=True)
class UserSessionRow:
    """A dashboard session as stored: the SHA-256 of its cookie's token (``id``), its CSRF token, and
    when it began, was last used and ends."""

    id: str
    user_id: str
    csrf: str
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Account:
    """Whom a session belongs to: a user without their password hash."""

    id: str
    email: str
    disabled_at: datetime | None


# tenancy and keys ---------------------------------------------------------------------------------


@runtime_checkable
class UserStore(Protocol):
    """Users (dashboard sign-in)."""

    async def get_by_email(self, email: str) -> User | None:
        """The user with this email, if any."""

    async def add(self, user: User) -> User:
        """Insert a user (flushed: its constraints are checked now)."""

    async def set_disabled(self, user_id: str, at: datetime | None) -> None:
        """Store when the user was disabled (None: enabled)."""


@runtime_checkable
class ProjectStore(Protocol):
    """Projects (tenants)."""

    async def get(self, ref: str, *, for_update: bool = False) -> Project | None:
        """By id or by name."""

    async def lock(self, project_id: str) -> Project | None:
        """By id, its row locked for this unit of work (what quota checks serialise on)."""

    async def list(self) -> Sequence[Project]:
        """Every project, oldest first."""

    async def add(self, project: Project) -> Project:
        """Insert a project (flushed)."""


@runtime_checkable
class ApiKeyStore(Protocol):
    """API keys of project environments (only their hashes are stored)."""

    async def get(self, key_id: str) -> ApiKey | None:
        """A key by id, revoked or not."""

    async def active_for(self, project_id: str, environment: str) -> Sequence[ApiKey]:
        """Active keys of one environment, oldest first."""

    async def list_for_project(self, project_id: str) -> Sequence[ApiKey]:
        """A project's keys, revoked ones included, by environment then age."""

    async def find_active_by_hash(self, key_hash: str) -> tuple[ApiKey, Project] | None:
        """The unrevoked key with this hash, with its project."""

    async def find_active_by_id(self, key_id: str) -> tuple[ApiKey, Project] | None:
        """The unrevoked key with this id, with its project."""

    async def add(self, key: ApiKey) -> ApiKey:
        """Insert a key (flushed)."""

    async def touch_last_used(self, last_used: dict[str, datetime]) -> None:
        """Record last-used times for many keys in one round trip."""

    async def standing_of(self, key_ids: Collection[str]) -> dict[str, tuple[str, dict[str, Any] | None]]:
        """Of ``key_ids``, the unrevoked ones whose project exists: id -> (tier, custom limits)."""


@runtime_checkable
class UserSessionStore(Protocol):
    """Dashboard sessions, by the SHA-256 of their cookie's token."""

    async def add(self, row: UserSessionRow) -> None:
        """Insert a session (flushed)."""

    async def get_with_user(self, session_id: str) -> tuple[UserSessionRow, Account] | None:
        """The session with its user, if any."""

    async def touch(self, session_id: str, at: datetime) -> None:
        """Record that the session was used at ``at``."""

    async def delete(self, session_id: str) -> None:
        """End one session (nothing if it is gone already)."""

    async def delete_for_user(self, user_id: str) -> int:
        """End every session of a user; how many there were."""


# topics -------------------------------------------------------------------------------------------


@runtime_checkable
class TopicStore(Protocol):
    """Topics of project environments."""

    async def get_by_name(self, project_id: str, environment: str, name: str) -> TopicRow | None:
        """A topic of one project environment by name."""

    async def exists(self, topic_id: str) -> bool:
        """Whether the topic with this id exists."""

    async def page(self, project_id: str, environment: str, after: str | None, limit: int) -> list[TopicRow]:
        """Topics ordered by name, strictly after ``after``."""

    async def count(self, project_id: str, environment: str) -> int:
        """How many topics a project environment has."""

    async def partition_sum(self, project_id: str, environment: str) -> int:
        """The partitions of a project environment's topics, summed."""

    async def partitions_of_project(self, project_id: str) -> list[tuple[str, int]]:
        """``(topic id, partitions)`` of every topic of a project, in all its environments."""

    async def lock_with_project(self, topic_id: str) -> tuple[Topic, Project] | None:
        """The topic, its row locked for this unit of work (group creators serialise on it), and its project."""

    async def all_ids(self) -> set[str]:
        """Every topic id (to find logs no topic owns)."""

    async def add(self, topic: TopicRow) -> None:
        """Insert a topic (flushed); ``AlreadyExists`` if its environment has a topic of that name."""

    async def update(
        self,
        topic_id: str,
        *,
        updated_at: datetime,
        partitions: int | None = None,
        retention: tuple[str, int] | None = None,
    ) -> None:
        """Store a topic's new partition count and/or retention (as given, and in milliseconds)."""

    async def remove(self, topic_id: str) -> None:
        """Delete a topic (its groups, members, partitions, leases and dead letters go with it)."""


# groups, members and partitions -------------------------------------------------------------------


@runtime_checkable
class GroupStore(Protocol):
    """Consumer groups and their members (the first two steps of the lock order)."""

    async def get(self, topic_id: str, name: str, *, for_update: bool = False) -> ConsumerGroup | None:
        """A topic's group by name; ``for_update`` locks its row (the first step of the lock order)."""

    async def insert_if_absent(self, values: dict[str, Any]) -> None:
        """Create a group unless one of that name exists (a concurrent create is not an error)."""

    async def set_pause(self, group_id: str, reason: str, until_ms: int | None, at: datetime) -> None:
        """Pause a group (``reason``, until ``until_ms`` or until resumed), replacing any pause."""

    async def clear_pause(self, group_id: str, breaker_window_ms: int, at: datetime) -> None:
        """End a group's pause; its DLQ breaker counts afresh from ``breaker_window_ms``."""

    async def count_for_topic(self, topic_id: str) -> int:
        """How many groups a topic has."""

    async def busiest_topic(self, project_id: str, environment: str) -> tuple[str, int] | None:
        """The topic of a project environment with the most groups, and its count."""

    async def ids_of_project(self, project_id: str) -> list[str]:
        """Ids of every group of a project's topics."""

    async def all_ids(self) -> set[str]:
        """Every group id."""

    async def list_for_topic(self, topic_id: str) -> Sequence[ConsumerGroup]:
        """A topic's groups by name."""

    async def set_generation(self, group_id: str, generation: int, partition_count: int) -> None:
        """Store a rebalance's generation and the partition count it covered."""

    async def remove(self, group_id: str) -> None:
        """Delete a group and everything it owns."""

    async def caller_view(self, topic_id: str, name: str, member_id: str) -> CallerView | None:
        """The group, the calling member (if present) and the soonest member expiry, in one query."""

    async def live_members(self, group_id: str, now_ms: int) -> list[str]:
        """Live members in join order (the order assignment breaks ties by)."""

    async def push_members(self, group_id: str, member_ids: Sequence[str]) -> set[str]:
        """Which of these members are push members (they keep leases in memory)."""

    async def live_member_counts(self, group_ids: Sequence[str], now_ms: int) -> dict[str, int]:
        """Live members per group id (groups without any left out)."""

    async def remove_expired_members(self, group_id: str, now_ms: int) -> list[str]:
        """Delete the members whose session expired; their ids."""

    async def get_member(self, group_id: str, member_id: str) -> GroupMember | None:
        """One member of a group, if present."""

    async def add_member(self, member: GroupMember) -> None:
        """Insert a member (flushed)."""

    async def remove_member(self, group_id: str, member_id: str) -> bool:
        """Delete a member; False if it was not there."""

    async def touch_member(self, group_id: str, member_id: str, now_ms: int, expires_at_ms: int) -> bool:
        """Move a live member's expiry; False if it is gone or already expired."""


@runtime_checkable
class PartitionStore(Protocol):
    """Partition ownership and offsets of groups, push members' fenced checkpoints (the third step)."""

    async def partitions(self, group_id: str) -> list[PartitionState]:
        """A group's partitions with owner and offsets, in partition order."""

    async def add_partitions(self, group_id: str, numbers: Iterable[int]) -> None:
        """Add partition rows (no owner, no offsets yet)."""

    async def lock_partitions(
        self, group_id: str, *, member_id: str | None = None, numbers: Sequence[int] | None = None
    ) -> list[PartitionState]:
        """Lock (Postgres) and read partition rows: those a member owns, or the numbered ones."""

    async def set_owners(
        self, group_id: str, owners: dict[int, str | None], held: dict[int, str] | None = None
    ) -> None:
        """Give partitions new owners (bumping their epoch); ``held`` names, per partition, the push
        member that must release it first. A partition already held keeps its holder: that one has
        not written what it holds yet, whoever owns the partition meanwhile."""

    async def clear_held(self, group_id: str, member_ids: Sequence[str]) -> None:
        """Members gone without releasing: their partitions' last checkpoint is what the new owners
        get."""

    async def bump_epochs(self, group_id: str, numbers: Sequence[int]) -> None:
        """Offsets moved under the owners' feet (seek, reset): fence their in-memory checkpoints,
        and what a holder kept in memory is void (its release would undo the move)."""

    async def set_offsets(
        self, group_id: str, offsets: dict[int, int], *, position_only: bool = False
    ) -> None:
        """Set ``position`` (and, unless ``position_only``, ``committed``) of several partitions."""

    async def advance_committed(self, group_id: str, numbers: Sequence[int]) -> None:
        """``committed`` := the lowest unacked leased offset, at most ``position``; drop acked
        leases below it."""

    async def all_partition_offsets(self) -> Sequence[Any]:
        """Every group's partitions with their topic (for metrics): one row per group and partition,
        ``(project_id, environment, topic_id, topic, group_id, group, partition, committed)``."""

    async def owned_partitions(self, group_id: str, member_id: str) -> list[OwnedPartition]:
        """The partitions a member owns or still holds, with what a push member needs to claim them."""

    async def checkpoint(
        self, group_id: str, member_id: str, partition: int, epoch: int, position: int, *, release: bool
    ) -> bool:
        """Write a push member's ``position`` (everything below is acked or has a lease row) and the
        committed offset it implies. Fenced: the member must still own the partition in ``epoch``,
        or, with ``release``, may also be the member that holds it for its new owner since the move
        that followed ``epoch`` (no seek or reset since; then it lets go)."""

    async def unhold(self, group_id: str, member_id: str, partition: int) -> bool:
        """Let go of a partition held for its new owner, at the stored position."""

    async def lock_owned(self, group_id: str, member_id: str, partition: int, epoch: int) -> bool:
        """Lock a partition row if the member still owns it in ``epoch`` (and holds it for no one)."""


# leases -------------------------------------------------------------------------------------------


@runtime_checkable
class LeaseStore(Protocol):
    """Leases: messages handed out and not yet settled (the last step of the lock order)."""

    async def due_leases(
        self, group_id: str, numbers: Sequence[int], now_ms: int, limit: int
    ) -> list[DueLease]:
        """Unacked leases whose deadline passed (timed out, nacked, or released), in offset order."""

    async def reschedule_leases(
        self,
        group_id: str,
        schedule: Sequence[tuple[int, int, int, str]],
        failures: Mapping[tuple[int, int], str] | None = None,
    ) -> None:
        """Failed attempts waiting for their retry: ``(partition, offset, due_ms, reason)``; no
        holder; with their new failed-attempt histories when given."""

    async def failures_of(self, group_id: str, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
        """The failed-attempt histories kept on these leases."""

    async def mark_acked(self, group_id: str, keys: Sequence[tuple[int, int]]) -> None:
        """Leases done with (dead-lettered): ``advance_committed`` then moves past them."""

    async def add_replayed_leases(
        self, group_id: str, now_ms: int, replays: Sequence[tuple[int, int, int]]
    ) -> None:
        """Replayed dead letters ``(partition, offset, dlq_offset)``: due at once, attempt back at
        1, a fresh retry budget. An acked lease left at that offset is replaced."""

    async def next_deadline(self, group_id: str, numbers: Sequence[int]) -> int | None:
        """The soonest deadline of the unacked leases in these partitions."""

    async def renew_leases(
        self,
        group_id: str,
        member_id: str,
        deadline_ms: int,
        keys: Sequence[tuple[int, int]],
        failures: Mapping[tuple[int, int], str] | None = None,
    ) -> None:
        """Hand due leases to ``member_id`` for one more attempt (the caller holds their
        partitions)."""

    async def add_leases(
        self, group_id: str, member_id: str, deadline_ms: int, keys: Sequence[tuple[int, int]]
    ) -> None:
        """First deliveries (attempt 1, held by ``member_id`` until ``deadline_ms``)."""

    async def drop_leases(self, group_id: str, keys: Sequence[tuple[int, int]]) -> None:
        """Delete these leases."""

    async def drop_partition_leases(self, group_id: str, numbers: Sequence[int]) -> None:
        """Delete every lease of these partitions."""

    async def release_member_leases(
        self, group_id: str, member_ids: Sequence[str], now_ms: int, *, clean: bool = False
    ) -> None:
        """Leases of members that are gone become due at once: given back unspent (``clean``: they left)
        or as ack timeouts (their sessions expired)."""

    async def settle(
        self,
        group_id: str,
        member_id: str,
        now_ms: int,
        keys: Sequence[tuple[int, int]],
        values: dict[str, Any],
    ) -> set[tuple[int, int]]:
        """Update the member's live (unacked, deadline running) leases among ``keys``; which ones
        matched."""

    async def replay_offsets(
        self, group_id: str, keys: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], int]:
        """Of these leases, the replayed dead letters: their copy's offset in the DLQ log."""

    async def leases_among(
        self, group_id: str, keys: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], LeaseState]:
        """The leases among ``keys`` that exist, by key."""

    async def unacked_counts(self) -> dict[str, int]:
        """Unacked leases (messages in flight or waiting for a retry) per group id."""

    async def drop_acked_below_committed(self, group_id: str, numbers: Sequence[int]) -> None:
        """Delete the acked leases below their partition's committed offset."""

    async def leases_from_position(self, group_id: str, numbers: Sequence[int]) -> dict[int, set[int]]:
        """Per partition, the leased offsets at or past ``position`` (a read from there skips them)."""

    async def put_leases(self, group_id: str, rows: Sequence[LeaseState]) -> None:
        """Insert lease rows: one ``executemany`` (a cached statement, sent as multi-row batches by
        the driver layer); a literal multi-row ``VALUES`` would be compiled anew for every call."""


# dead letters -------------------------------------------------------------------------------------


@runtime_checkable
class DeadLetterStore(Protocol):
    """Dead letters of groups, their DLQ alert state and audit trail."""

    async def add(self, group_id: str, rows: Sequence[DeadLetterRow]) -> None:
        """Insert dead-letter rows of a group."""

    async def depth(self, group_id: str) -> int:
        """How many dead letters a group has."""

    async def depths(self) -> dict[str, int]:
        """DLQ depth per group id (for metrics), groups with an empty DLQ left out."""

    async def page(self, group_id: str, after: int | None, limit: int) -> list[DeadLetterRow]:
        """Up to ``limit`` rows in the order they were dead-lettered, after DLQ offset ``after``."""

    async def take(self, group_id: str, keys: Sequence[tuple[int, int]]) -> list[DeadLetterRow]:
        """Remove these messages from the DLQ; the rows that were there."""

    async def max_dlq_offset(self, group_id: str) -> int | None:
        """The highest DLQ offset a group's dead letters have."""

    async def alert_state(self, group_id: str) -> tuple[bool, dict[str, Any] | None, str, str, str, str]:
        """``(armed, dead_letter config, project_id, environment, topic name, group name)`` of a
        group."""

    async def set_alert_armed(self, group_id: str, armed: bool) -> None:
        """Arm or disarm a group's DLQ alert."""

    async def record(self, entry: dict[str, Any]) -> None:
        """Append an audit entry."""

    async def audit_page(self, group_id: str, before: str | None, limit: int) -> Sequence[DlqAuditEntry]:
        """Newest first: ids grow with time."""


# alerts -------------------------------------------------------------------------------------------


@runtime_checkable
class AlertStore(Protocol):
    """Alert endpoints with their breaker, the outbox of events, and delivery attempts."""

    async def endpoint(self, project_id: str, environment: str) -> EndpointRow | None:
        """The endpoint of a project environment, if any."""

    async def save_endpoint(self, endpoint: EndpointRow) -> None:
        """Insert or replace the endpoint of its project environment (flushed)."""

    async def remove_endpoint(self, project_id: str, environment: str) -> bool:
        """Delete an endpoint; False if there was none."""

    async def breaker_outcome(
        self, project_id: str, environment: str, ok: bool, threshold: int, open_until_ms: int
    ) -> None:
        """A success closes the breaker; a failure counts, and opens it at ``threshold`` in a row
        (or reopens it after a failed half-open probe)."""

    async def hold_breaker(self, held: Sequence[tuple[str, str]], until_ms: int) -> None:
        """A half-open endpoint lets one probe go: the others wait until it answered."""

    async def secrets(self) -> list[tuple[str, str, str]]:
        """``(project_id, environment, stored secret)`` of every endpoint."""

    async def replace_secret(self, project_id: str, environment: str, old: str, new: str) -> None:
        """Store ``new`` in place of ``old`` (not if the endpoint changed meanwhile)."""

    async def add_event(self, values: dict[str, Any]) -> None:
        """Append an event to the outbox."""

    async def any_due(self, now_ms: int) -> bool:
        """Whether an event is due and unclaimed (a plain read: an idle dispatcher takes no write
        lock)."""

    async def claim_due(self, now_ms: int, lease_ms: int, limit: int) -> list[Claimed]:
        """Due pending events not held by another dispatcher, taken for ``lease_ms``. On Postgres,
        ``SKIP LOCKED``: concurrent dispatchers take disjoint events."""

    async def release(self, event_ids: Sequence[str], next_attempt_ms: int) -> None:
        """Events claimed but not tried (their endpoint's breaker is open): due again later."""

    async def settle_event(
        self, event_id: str, status: str, attempts_made: int, next_attempt_ms: int
    ) -> None:
        """Record an attempt's outcome on its event and free its claim."""

    async def add_attempt(self, values: dict[str, Any]) -> None:
        """Record a delivery attempt."""

    async def attempts_page(
        self, project_id: str, environment: str, before: str | None, limit: int
    ) -> list[AttemptRow]:
        """Newest first (ids grow with time)."""


# usage --------------------------------------------------------------------------------------------


@runtime_checkable
class UsageStore(Protocol):
    """Usage rollups, added by a compare-and-set on how far into the usage topic they got."""

    async def next_offset(self, source: str) -> int:
        """The next offset of ``source`` to roll up (0 before the first run)."""

    async def add(self, rows: Sequence[Rollup], *, source: str, from_offset: int, next_offset: int) -> bool:
        """Add ``rows`` to the rollups and move ``source`` from ``from_offset`` to ``next_offset``;
        False (and nothing written) when another run moved it first. The caller commits."""

    async def series(
        self,
        project_id: str,
        environment: str,
        granularity: str,
        since: datetime,
        until: datetime,
        *,
        key_id: str | None = None,
        category: str | None = None,
    ) -> list[Rollup]:
        """The buckets of ``[since, until)``, oldest first (one row per bucket, key and category)."""


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


if TYPE_CHECKING:  # mypy holds each SQL repository to its protocol (no runtime import cycle)
    from sqlalchemy.ext.asyncio import AsyncSession

    from app.stores.metadata.alert_repositories import AlertRepository
    from app.stores.metadata.dlq_repositories import DeadLetterRepository
    from app.stores.metadata.group_repositories import GroupRepository
    from app.stores.metadata.lease_repositories import LeaseRepository
    from app.stores.metadata.partition_repositories import PartitionRepository
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
        _unit: MetadataUnit = SqlMetadataUnit(session)
