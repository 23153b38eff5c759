"""The port's delivery-control stores: members' in-flight claims (``maxInFlight``), TTL expiry counts,
push groups' endpoints and attempts, and a group's pause and DLQ breaker state.

Claims grow only under ``FlowStore.lock_group`` and ``GroupControlStore.lock`` locks the group row: both
the first step of the lock order (group → members → partitions → leases). Frozen values: ``PushTarget``,
``PushEndpointRow`` (and ``PushConfig``, what a config ``PUT`` sets of it), ``NewPushAttempt`` (an attempt to
record) and ``PushAttemptRow`` (one recorded). Implemented by
``flow_repositories.py``, ``expiry_repositories.py``, ``push_repositories.py`` and
``group_control_repositories.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

# values -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PushTarget:
    """A push group as the delivery workers see it: where it is, and its endpoint row's fields."""

    group_id: str
    group_name: str
    topic_id: str
    topic_name: str
    partitions: int
    delivery: str
    replicas: int
    url: str
    max_concurrency: int
    rate: float | None
    timeout_ms: int
    ordered: bool
    mode: str
    secret: str
    previous_secret: str | None
    previous_until_ms: int | None


@dataclass(frozen=True, slots=True)
class PushConfig:
    """What a group config ``PUT`` sets of a push group's endpoint: the URL, how it is delivered to
    (``timeout`` as given, ``"10s"``, and in milliseconds)."""

    url: str
    max_concurrency: int
    rate: float | None
    timeout: str
    timeout_ms: int
    ordered: bool
    mode: str


@dataclass(frozen=True, slots=True)
class PushEndpointRow:
    """A push group's endpoint as stored: its config, the sealed secrets deliveries are signed with
    (``previous_secret`` signs too until ``previous_until_ms``), and its breaker (``breaker_failures`` in
    a row, open until ``breaker_open_until_ms``)."""

    group_id: str
    url: str
    max_concurrency: int
    rate: float | None
    timeout: str
    timeout_ms: int
    ordered: bool
    mode: str
    secret: str
    previous_secret: str | None
    previous_until_ms: int | None
    breaker_failures: int
    breaker_open_until_ms: int | None
    created_at: datetime
    updated_at: datetime

    @property
    def config(self) -> PushConfig:
        """The endpoint's config (what a config ``PUT`` merges over)."""
        return PushConfig(
            self.url, self.max_concurrency, self.rate, self.timeout, self.timeout_ms, self.ordered, self.mode
        )


@dataclass(frozen=True, slots=True)
class PushAttemptRow:
    """One POST of a message to a push group's URL: what came back (``status`` None: no answer), how
    long it took, and why it failed."""

    id: int
    group_id: str
    message_id: str
    attempt: int
    at: datetime
    status: int | None
    latency_ms: int
    error: str | None


@dataclass(frozen=True, slots=True)
class NewPushAttempt:
    """An attempt to record (``PushStore.add_attempts``): a ``PushAttemptRow`` before the store gives it
    its ``id``."""

    group_id: str
    message_id: str
    attempt: int
    at: datetime
    status: int | None
    latency_ms: int
    error: str | None


# stores -------------------------------------------------------------------------------------------


@runtime_checkable
class FlowStore(Protocol):
    """Members' in-flight claims on their group's ``maxInFlight`` (``delivery/flow.py``). A claim grows
    only under ``lock_group``, the first step of the lock order."""

    async def lock_group(self, group_id: str) -> None:
        """Lock the group row for this unit of work (claim changes of one group are serialised)."""

    async def held(self, group_id: str, member_id: str, now_ms: int) -> int:
        """Lease rows the member holds: delivered to it, not acked, deadline still running."""

    async def others(self, group_id: str, member_id: str, now_ms: int) -> tuple[int, int]:
        """The claims of the group's other live members added up, and how many live members it has."""

    async def set_claim(self, group_id: str, member_id: str, claim: int | None) -> None:
        """Store a member's claim (None: the group has no ``maxInFlight``)."""


@runtime_checkable
class ExpiryStore(Protocol):
    """Messages that expired before delivery (TTL), counted per group partition (``delivery/delays.py``)."""

    async def add_expired(self, group_id: str, counts: Mapping[int, int]) -> None:
        """Add ``counts`` (partition → messages) in one statement; the caller holds the partitions' rows."""

    async def expired(self, group_id: str) -> int:
        """Messages of the group that expired before delivery, since its creation."""

    async def expired_by_group(self) -> dict[str, int]:
        """Every group's expired count (for ``/metrics``)."""

    async def dead_letter_config(self, group_id: str) -> dict[str, Any] | None:
        """The group's ``deadLetter`` config (None: no DLQ)."""


@runtime_checkable
class PushStore(Protocol):
    """Push groups' endpoints (``push_endpoints``) and their recent attempts (``push_attempts``)."""

    async def get(self, group_id: str) -> PushEndpointRow | None:
        """A push group's endpoint, if the group has one."""

    async def add(self, endpoint: PushEndpointRow) -> None:
        """Insert an endpoint (flushed); ``AlreadyExists`` if the group has one."""

    async def set_config(
        self, group_id: str, config: PushConfig, at: datetime, *, reset_breaker: bool = False
    ) -> None:
        """Store an endpoint's config, changed at ``at``; ``reset_breaker`` closes its breaker (a new URL
        starts with no failures)."""

    async def rotate_secret(self, group_id: str, secret: str, previous_until_ms: int, at: datetime) -> None:
        """Store a new (sealed) secret; the current one becomes the previous, signing until
        ``previous_until_ms``."""

    async def remove(self, group_id: str) -> bool:
        """Delete a group's endpoint; False if there was none."""

    async def targets(self) -> list[PushTarget]:
        """Every push group of the deployment, with its topic (what each node's workers poll)."""

    async def count(self, project_id: str, environment: str) -> int:
        """The push groups of a project environment's topics (the ``pushGroups`` quota's use)."""

    async def sealed_secrets(self) -> list[tuple[str, str, str | None]]:
        """Every push group's ``(group_id, secret, previous_secret)`` as stored (sealed)."""

    async def replace_secrets(self, group_id: str, secret: str, previous_secret: str | None) -> None:
        """Store a group's (sealed) secret and the previous one."""

    async def set_breaker(self, group_id: str, failures: int, open_until_ms: int | None) -> None:
        """Store an endpoint's breaker: failures in a row, open until ``open_until_ms``."""

    async def add_attempts(self, rows: Sequence[NewPushAttempt]) -> None:
        """Record delivery attempts (one batched ``INSERT``)."""

    async def trim_attempts(self, group_ids: Sequence[str], keep: int) -> None:
        """Keep the newest ``keep`` attempts of each group."""

    async def recent_attempts(self, group_id: str, limit: int) -> list[PushAttemptRow]:
        """A group's latest attempts, newest first by when they began."""
