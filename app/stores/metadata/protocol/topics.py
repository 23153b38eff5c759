"""The port's topic and group stores: topics, consumer groups with their members, and the groups'
partitions and offsets (the first three steps of the lock order: group → members → partitions).

Frozen values: ``TopicRow``, ``GroupRow`` (and ``GroupConfig``, what a config ``PUT`` stores),
``MemberRow``, ``CallerView``, ``PartitionState``, ``OwnedPartition``. Implemented by
``topic_repositories.py``, ``group_repositories.py`` and ``partition_repositories.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from app.stores.metadata.protocol.tenancy import ProjectRow

# values -------------------------------------------------------------------------------------------


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
class GroupConfig:
    """A group's config as a ``PUT`` sets it: durations as given (``"30s"``) and in milliseconds,
    ``deadLetter`` with its defaults filled in, flow control and filter (None: none)."""

    ack_timeout: str
    ack_timeout_ms: int
    session_timeout: str
    session_timeout_ms: int
    dead_letter: dict[str, Any] | None
    max_in_flight: int | None
    rate: float | None
    filter: str | None


@dataclass(frozen=True, slots=True)
class GroupRow:
    """A consumer group as stored: its config, generation, pause and DLQ breaker counts."""

    id: str
    topic_id: str
    name: str
    generation: int
    partition_count: int
    ack_timeout: str
    ack_timeout_ms: int
    session_timeout: str
    session_timeout_ms: int
    dead_letter: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    max_in_flight: int | None = None
    rate: float | None = None
    filter: str | None = None
    dead_letter_alert_armed: bool = True
    paused_reason: str | None = None
    paused_until_ms: int | None = None
    breaker_window_ms: int = 0
    breaker_acked: int = 0
    breaker_failed: int = 0


@dataclass(frozen=True, slots=True)
class MemberRow:
    """A member of a group (``csr_…``) as stored: its session, when it expires without a heartbeat,
    whether it is a push member (it keeps first-delivery leases in memory), and its share of the group's
    ``maxInFlight`` (``in_flight_claim``: written by ``FlowStore.set_claim`` only)."""

    group_id: str
    id: str
    session_timeout: str
    session_timeout_ms: int
    expires_at_ms: int
    joined_at: datetime
    push: bool = False
    in_flight_claim: int | None = None


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

    async def lock_with_project(self, topic_id: str) -> tuple[TopicRow, ProjectRow] | None:
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

    async def get(self, topic_id: str, name: str, *, for_update: bool = False) -> GroupRow | None:
        """A topic's group by name; ``for_update`` locks its row (the first step of the lock order)."""

    async def insert_if_absent(self, group: GroupRow) -> None:
        """Create a group unless one of that name exists (a concurrent create is not an error)."""

    async def set_config(self, group_id: str, config: GroupConfig, at: datetime) -> None:
        """Store a group's config (all of it), changed at ``at``."""

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

    async def list_for_topic(self, topic_id: str) -> list[GroupRow]:
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

    async def get_member(self, group_id: str, member_id: str) -> MemberRow | None:
        """One member of a group, if present."""

    async def add_member(self, member: MemberRow) -> None:
        """Insert a member (flushed); ``AlreadyExists`` if the group has a member of that id."""

    async def save_member(self, member: MemberRow) -> None:
        """Write a member's session timeout, expiry and push flag (a rejoin); its claim is
        ``FlowStore.set_claim``'s."""

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
