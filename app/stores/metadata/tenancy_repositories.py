"""SQL of tenancy: users, projects and API keys (only a key's hash is stored)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import ApiKey, Project, User, UserSession
from app.stores.metadata.protocol import Account, UserSessionRow


class UserRepository(Repository):
    """Users (dashboard sign-in)."""

    async def get_by_email(self, email: str) -> User | None:
        result = await self.session.execute(select(User).where(User.email == email))
        return result.scalar_one_or_none()

    async def add(self, user: User) -> User:
        self.session.add(user)
        await self._flush()
        return user

    async def set_disabled(self, user_id: str, at: datetime | None) -> None:
        # An ORM UPDATE: a row of this user already read in this unit of work is updated with it.
        await self.session.execute(update(User).where(User.id == user_id).values(disabled_at=at))


class UserSessionRepository(Repository):
    """Dashboard sessions, by the hash of their cookie's token."""

    async def add(self, row: UserSessionRow) -> None:
        self.session.add(
            UserSession(
                id=row.id,
                user_id=row.user_id,
                csrf=row.csrf,
                created_at=row.created_at,
                last_seen_at=row.last_seen_at,
                expires_at=row.expires_at,
            )
        )
        await self._flush()

    async def get_with_user(self, session_id: str) -> tuple[UserSessionRow, Account] | None:
        result = await self.session.execute(
            select(UserSession, User)
            .join(User, User.id == UserSession.user_id)
            .where(UserSession.id == session_id)
        )
        row = result.first()
        if row is None:
            return None
        found, user = row[0], row[1]
        return (
            UserSessionRow(
                found.id, found.user_id, found.csrf, found.created_at, found.last_seen_at, found.expires_at
            ),
            Account(user.id, user.email, user.disabled_at),
        )

    async def touch(self, session_id: str, at: datetime) -> None:
        await self.session.execute(
            update(UserSession).where(UserSession.id == session_id).values(last_seen_at=at)
        )

    async def delete(self, session_id: str) -> None:
        await self.session.execute(delete(UserSession).where(UserSession.id == session_id))

    async def delete_for_user(self, user_id: str) -> int:
        """End every session of the user; how many there were."""
        result = await self.session.execute(delete(UserSession).where(UserSession.user_id == user_id))
        return int(getattr(result, "rowcount", 0) or 0)


class ProjectRepository(Repository):
    """Projects (tenants)."""

    async def get(self, ref: str, *, for_update: bool = False) -> Project | None:
        """By id or by name."""
        stmt = select(Project).where((Project.id == ref) | (Project.name == ref))
        if for_update:
            stmt = stmt.with_for_update()
        result = await self.session.execute(stmt)
        return result.scalars().first()

    async def lock(self, project_id: str) -> Project | None:
        """By id, its row locked for this unit of work (``FOR NO KEY UPDATE``: inserts of rows that
        refer to it are not blocked; whoever else locks it waits)."""
        stmt = select(Project).where(Project.id == project_id).with_for_update(key_share=True)
        result = await self.session.execute(stmt.execution_options(populate_existing=True))
        return result.scalar_one_or_none()

    async def list(self) -> Sequence[Project]:
        result = await self.session.execute(select(Project).order_by(Project.created_at, Project.id))
        return result.scalars().all()

    async def add(self, project: Project) -> Project:
        self.session.add(project)
        await self._flush()
        return project


class ApiKeyRepository(Repository):
    """API keys of project environments."""

    async def get(self, key_id: str) -> ApiKey | None:
        return await self.session.get(ApiKey, key_id)

    async def active_for(self, project_id: str, environment: str) -> Sequence[ApiKey]:
        """Active keys of one environment, oldest first."""
        result = await self.session.execute(
            select(ApiKey)
            .where(
                ApiKey.project_id == project_id,
                ApiKey.environment == environment,
                ApiKey.revoked_at.is_(None),
            )
            .order_by(ApiKey.created_at, ApiKey.id)
        )
        return result.scalars().all()

    async def list_for_project(self, project_id: str) -> Sequence[ApiKey]:
        result = await self.session.execute(
            select(ApiKey)
            .where(ApiKey.project_id == project_id)
            .order_by(ApiKey.environment, ApiKey.created_at)
        )
        return result.scalars().all()

    async def find_active_by_hash(self, key_hash: str) -> tuple[ApiKey, Project] | None:
        result = await self.session.execute(
            select(ApiKey, Project)
            .join(Project, Project.id == ApiKey.project_id)
            .where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
        )
        row = result.first()
        return (row[0], row[1]) if row else None

    async def find_active_by_id(self, key_id: str) -> tuple[ApiKey, Project] | None:
        result = await self.session.execute(
            select(ApiKey, Project)
            .join(Project, Project.id == ApiKey.project_id)
            .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
        )
        row = result.first()
        return (row[0], row[1]) if row else None

    async def standing_of(self, key_ids: Collection[str]) -> dict[str, tuple[str, dict[str, Any] | None]]:
        """Of ``key_ids``, those still active with their project: key id -> (tier, custom limits). A key
        revoked, deleted or whose project is gone is absent. One round trip per 500 ids."""
        found: dict[str, tuple[str, dict[str, Any] | None]] = {}
        ids = list(key_ids)
        for start in range(0, len(ids), 500):
            result = await self.session.execute(
                select(ApiKey.id, Project.tier, Project.custom_limits)
                .join(Project, Project.id == ApiKey.project_id)
                .where(ApiKey.id.in_(ids[start : start + 500]), ApiKey.revoked_at.is_(None))
            )
            for key_id, tier, custom_limits in result.all():
                found[key_id] = (tier, custom_limits)
        return found

    async def add(self, key: ApiKey) -> ApiKey:
        self.session.add(key)
        await self._flush()
        return key

    async def touch_last_used(self, last_used: dict[str, datetime]) -> None:
        """Record last-used times for many keys in one round trip."""
        if not last_used:
            return
        await self.session.execute(
            update(ApiKey),
            [{"id": key_id, "last_used_at": at} for key_id, at in last_used.items()],
        )
