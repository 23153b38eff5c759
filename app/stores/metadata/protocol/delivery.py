"""The port's delivery-state stores: leases (the last step of the lock order), push members'
checkpoints, and dead letters.

Implemented by ``lease_repositories.py``, ``checkpoint_writer.py`` (``MetadataStore.checkpoint_writer``:
a checkpoint is written outside a unit of work when it can be) and ``dead_letter_repositories.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

# values -------------------------------------------------------------------------------------------


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
class LeaseSettlement:
    """What ``LeaseStore.settle`` writes on each live lease it matches (fields left unset: unchanged). An
    ack sets ``acked``; a nack gives the lease back (``released``: no holder) due at ``deadline_ms`` with
    its ``reason``; an extend moves ``deadline_ms``."""

    acked: bool = False
    deadline_ms: int | None = None
    released: bool = False
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionCheckpoint:
    """What a push member's checkpoint writes of one partition it owns in ``epoch``."""

    partition: int
    epoch: int
    position: int  # the member's floor: everything below is acked or has a lease row
    acked_above: Sequence[int] = ()  # offsets acked at or above ``position``: written as acked lease rows
    drop_acked_below: bool = False  # acked rows written earlier may lie below ``position`` now


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """A dead letter: the message's place, its copy's offset in the DLQ log, and why."""

    partition: int
    offset: int
    dead_letter_offset: int
    reason: str
    retry_count: int
    failed_at_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetterAuditRow:
    """Who replayed or deleted what in a group's DLQ (one message, or ``count`` of them), and when."""

    id: str
    group_id: str
    action: str  # replay | delete | replay_all
    message_id: str | None
    count: int | None
    actor_type: str
    actor_id: str
    at: datetime


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
        """Replayed dead letters ``(partition, offset, dead_letter_offset)``: due at once, attempt back at
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
        settlement: LeaseSettlement,
    ) -> set[tuple[int, int]]:
        """Write ``settlement`` on the member's live (unacked, deadline running) leases among ``keys``
        (one ``UPDATE``); which ones matched."""

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

    async def held_count(self, group_id: str, member_id: str, now_ms: int) -> int:
        """Leases ``member_id`` holds unacked with their deadline still running (its in-flight window)."""

    async def drop_acked_below_committed(self, group_id: str, numbers: Sequence[int]) -> None:
        """Delete the acked leases below their partition's committed offset."""

    async def leases_from_position(self, group_id: str, numbers: Sequence[int]) -> dict[int, set[int]]:
        """Per partition, the leased offsets at or past ``position`` (a read from there skips them)."""

    async def put_leases(self, group_id: str, rows: Sequence[LeaseState]) -> None:
        """Insert lease rows: one ``executemany`` (a cached statement, sent as multi-row batches by
        the driver layer); a literal multi-row ``VALUES`` would be compiled anew for every call."""


# checkpoints --------------------------------------------------------------------------------------


@runtime_checkable
class CheckpointStore(Protocol):
    """Push members' checkpoints, written in a transaction of their own (how is the store's choice)."""

    async def write(
        self, group_id: str, member_id: str, checkpoints: Sequence[PartitionCheckpoint]
    ) -> set[int]:
        """Write ``checkpoints`` of a member (all or none), each fenced by its partition's owner and
        epoch; the partitions fenced (nothing is written for those)."""


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

    async def max_dead_letter_offset(self, group_id: str) -> int | None:
        """The highest DLQ offset a group's dead letters have."""

    async def alert_state(self, group_id: str) -> tuple[bool, dict[str, Any] | None, str, str, str, str]:
        """``(armed, dead_letter config, project_id, environment, topic name, group name)`` of a
        group."""

    async def set_alert_armed(self, group_id: str, armed: bool) -> None:
        """Arm or disarm a group's DLQ alert."""

    async def record(self, entry: DeadLetterAuditRow) -> None:
        """Append an audit entry."""

    async def audit_page(self, group_id: str, before: str | None, limit: int) -> list[DeadLetterAuditRow]:
        """Newest first: ids grow with time."""


# expiry -------------------------------------------------------------------------------------------
