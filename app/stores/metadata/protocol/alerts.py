"""The port's alert and usage stores: alert endpoints with their breaker, the outbox of alert events and
delivery attempts; usage rollups.

Implemented by ``alert_repositories.py`` and ``usage_repositories.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

GRANULARITIES = ("minute", "hour", "day")
"""The buckets usage rollups come in."""

# values -------------------------------------------------------------------------------------------


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
class EndpointSecret:
    """The stored (sealed, or from before sealing in clear) signing secret of a project environment's
    endpoint."""

    project_id: str
    environment: str
    secret: str


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
class NewAlertEvent:
    """An event entering the outbox: pending, never tried, due at ``due_ms``."""

    id: str
    project_id: str
    environment: str
    type: str
    body: str
    due_ms: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class OutboxClaim:
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

    async def secrets(self) -> list[EndpointSecret]:
        """The stored secret of every endpoint."""

    async def replace_secret(self, project_id: str, environment: str, old: str, new: str) -> None:
        """Store ``new`` in place of ``old`` (not if the endpoint changed meanwhile)."""

    async def add_event(self, event: NewAlertEvent) -> None:
        """Append an event to the outbox (pending, no attempt yet, unclaimed)."""

    async def any_due(self, now_ms: int) -> bool:
        """Whether an event is due and unclaimed (a plain read: an idle dispatcher takes no write
        lock)."""

    async def claim_due(self, now_ms: int, lease_ms: int, limit: int) -> list[OutboxClaim]:
        """Due pending events not held by another dispatcher, taken for ``lease_ms``. On Postgres,
        ``SKIP LOCKED``: concurrent dispatchers take disjoint events."""

    async def release(self, event_ids: Sequence[str], next_attempt_ms: int) -> None:
        """Events claimed but not tried (their endpoint's breaker is open): due again later."""

    async def settle_event(
        self, event_id: str, status: str, attempts_made: int, next_attempt_ms: int
    ) -> None:
        """Record an attempt's outcome on its event and free its claim."""

    async def add_attempt(self, project_id: str, environment: str, attempt: AttemptRow) -> None:
        """Record a delivery attempt of an event of a project environment."""

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
