"""The port's delivery-control stores: members' in-flight claims (``maxInFlight``), TTL expiry counts,
push groups' endpoints and attempts, and a group's pause and DLQ breaker state.

Claims grow only under ``FlowStore.lock_group`` and ``GroupControlStore.lock`` locks the group row: both
the first step of the lock order (group → members → partitions → leases). Frozen value: ``PushTarget``;
push endpoints and attempts, and a locked group, still cross as ORM rows (#34). Implemented by
``flow_repositories.py``, ``expiry_repositories.py``, ``push_repositories.py`` and
``group_control_repositories.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from app.stores.metadata.models import PushAttempt, PushEndpoint

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

    async def get(self, group_id: str) -> PushEndpoint | None:
        """A push group's endpoint, if the group has one."""

    async def add(self, endpoint: PushEndpoint) -> None:
        """Insert an endpoint (flushed)."""

    async def remove(self, group_id: str) -> bool:
        """Delete a group's endpoint; False if there was none."""

    async def targets(self) -> list[PushTarget]:
        """Every push group of the deployment, with its topic (what each node's workers poll)."""

    async def sealed_secrets(self) -> list[tuple[str, str, str | None]]:
        """Every push group's ``(group_id, secret, previous_secret)`` as stored (sealed)."""

    async def replace_secrets(self, group_id: str, secret: str, previous_secret: str | None) -> None:
        """Store a group's (sealed) secret and the previous one."""

    async def set_breaker(self, group_id: str, failures: int, open_until_ms: int | None) -> None:
        """Store an endpoint's breaker: failures in a row, open until ``open_until_ms``."""

    async def add_attempts(self, rows: Sequence[dict[str, Any]]) -> None:
        """Record delivery attempts (one multi-row ``INSERT``)."""

    async def trim_attempts(self, group_ids: Sequence[str], keep: int) -> None:
        """Keep the newest ``keep`` attempts of each group."""

    async def recent_attempts(self, group_id: str, limit: int) -> list[PushAttempt]:
        """A group's latest attempts, newest first by when they began."""
