"""The port's tenancy stores: users and their dashboard sessions, projects, and API keys.

Everything here crosses as frozen values: ``UserRow``, ``ProjectRow``, ``KeyRow``, ``KeyStanding``,
``UserSessionRow`` and ``Account``. Implemented by ``tenancy_repositories.py``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

# values -------------------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class UserRow:
    """An account user as stored: the argon2 hash of their password, and when they were disabled (None:
    enabled)."""

    id: str
    email: str
    password_hash: str
    created_at: datetime
    disabled_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ProjectRow:
    """A project (tenant) as stored: its tier, an enterprise project's custom limits, its owner."""

    id: str
    name: str
    tier: str
    custom_limits: dict[str, Any] | None
    owner_id: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class KeyRow:
    """An API key as stored: never the key, only its HMAC (``key_hash``), display prefix and last four."""

    id: str
    project_id: str
    environment: str
    key_hash: str
    prefix: str
    last_four: str
    created_at: datetime
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class KeyStanding:
    """What an unrevoked key of an existing project is held to: its project's tier and custom limits."""

    tier: str
    custom_limits: dict[str, Any] | None


# stores -------------------------------------------------------------------------------------------


@runtime_checkable
class UserStore(Protocol):
    """Users (dashboard sign-in)."""

    async def get_by_email(self, email: str) -> UserRow | None:
        """The user with this email, if any."""

    async def add(self, user: UserRow) -> None:
        """Insert a user (flushed: its constraints are checked now; ``AlreadyExists`` if the email is
        taken)."""

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        """Store a user's new password hash."""

    async def set_disabled(self, user_id: str, at: datetime | None) -> None:
        """Store when the user was disabled (None: enabled)."""


@runtime_checkable
class ProjectStore(Protocol):
    """Projects (tenants)."""

    async def get(self, ref: str, *, for_update: bool = False) -> ProjectRow | None:
        """By id or by name."""

    async def lock(self, project_id: str) -> ProjectRow | None:
        """By id, its row locked for this unit of work (what quota checks serialise on)."""

    async def list(self) -> list[ProjectRow]:
        """Every project, oldest first."""

    async def add(self, project: ProjectRow) -> None:
        """Insert a project (flushed)."""

    async def set_plan(self, project_id: str, tier: str, custom_limits: dict[str, Any] | None) -> None:
        """Store a project's tier and custom limits (both: the limits given replace any before)."""

    async def set_owner(self, project_id: str, owner_id: str) -> None:
        """Store the user a project belongs to."""


@runtime_checkable
class ApiKeyStore(Protocol):
    """API keys of project environments (only their hashes are stored)."""

    async def get(self, key_id: str) -> KeyRow | None:
        """A key by id, revoked or not."""

    async def active_for(self, project_id: str, environment: str) -> list[KeyRow]:
        """Active keys of one environment, oldest first."""

    async def list_for_project(self, project_id: str) -> list[KeyRow]:
        """A project's keys, revoked ones included, by environment then age."""

    async def find_active_by_hash(self, key_hash: str) -> tuple[KeyRow, ProjectRow] | None:
        """The unrevoked key with this hash, with its project."""

    async def find_active_by_id(self, key_id: str) -> tuple[KeyRow, ProjectRow] | None:
        """The unrevoked key with this id, with its project."""

    async def add(self, key: KeyRow) -> None:
        """Insert a key (flushed)."""

    async def revoke(self, key_id: str, at: datetime) -> None:
        """Store that a key was revoked at ``at``."""

    async def touch_last_used(self, last_used: dict[str, datetime]) -> None:
        """Record last-used times for many keys in one round trip."""

    async def standing_of(self, key_ids: Collection[str]) -> dict[str, KeyStanding]:
        """Of ``key_ids``, the unrevoked ones whose project exists, with their project's plan."""


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
