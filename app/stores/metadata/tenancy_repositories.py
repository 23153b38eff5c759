"""SQL of tenancy: users, projects and API keys (only a key's hash is stored)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update

from app.stores.metadata.base import Repository
from app.stores.metadata.models import ApiKey, Project, User, UserSession
from app.stores.metadata.protocol import Account, KeyRow, KeyStanding, ProjectRow, UserRow, UserSessionRow


def _user_row(user: User) -> UserRow:
    return UserRow(**{f: getattr(user, f) for f in UserRow.__dataclass_fields__})


def _key_row(key: ApiKey) -> KeyRow:
    return KeyRow(**{f: getattr(key, f) for f in KeyRow.__dataclass_fields__})


def _project_row(project: Project) -> ProjectRow:
    return ProjectRow(**{f: getattr(project, f) for f in ProjectRow.__dataclass_fields__})


class UserRepository(Repository):
    """Users (dashboard sign-in)."""

    async def get_by_email(self, email: str) -> UserRow | None:
        result = await self.session.execute(select(User).where(User.email == email))
        user = result.scalar_one_or_none()
        return _user_row(user) if user is not None else None

    async def add(self, user: UserRow) -> None:
        self.session.add(User(**{f: getattr(user, f) for f in UserRow.__dataclass_fields__}))
        await self._flush()

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        await self.session.execute(update(User).where(User.id == user_id).values(password_hash=password_hash))

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

    async def get(self, ref: str, *, for_update: bool = False) -> ProjectRow | None:
        """By id or by name."""
        stmt = select(Project).where((Project.id == ref) | (Project.name == ref))
        if for_update:
            stmt = stmt.with_for_update()
        result = await self.session.execute(stmt)
        project = result.scalars().first()
        return _project_row(project) if project is not None else None

    async def lock(self, project_id: str) -> ProjectRow | None:
        """By id, its row locked for this unit of work (``FOR NO KEY UPDATE``: inserts of rows that
        refer to it are not blocked; whoever else locks it waits)."""
        stmt = select(Project).where(Project.id == project_id).with_for_update(key_share=True)
        result = await self.session.execute(stmt.execution_options(populate_existing=True))
        project = result.scalar_one_or_none()
        return _project_row(project) if project is not None else None

    async def list(self) -> list[ProjectRow]:
        result = await self.session.execute(select(Project).order_by(Project.created_at, Project.id))
        return [_project_row(p) for p in result.scalars().all()]

    async def add(self, project: ProjectRow) -> None:
        self.session.add(Project(**{f: getattr(project, f) for f in ProjectRow.__dataclass_fields__}))
        await self._flush()

    async def set_plan(self, project_id: str, tier: str, custom_limits: dict[str, Any] | None) -> None:
        # ORM UPDATEs: a row of this project already read in this unit of work is updated with it.
        await self.session.execute(
            update(Project).where(Project.id == project_id).values(tier=tier, custom_limits=custom_limits)
        )

    async def set_owner(self, project_id: str, owner_id: str) -> None:
        await self.session.execute(update(Project).where(Project.id == project_id).values(owner_id=owner_id))


class ApiKeyRepository(Repository):
    """API keys of project environments."""

    async def get(self, key_id: str) -> KeyRow | None:
        key = await self.session.get(ApiKey, key_id)
        return _key_row(key) if key is not None else None

    async def active_for(self, project_id: str, environment: str) -> list[KeyRow]:
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
        return [_key_row(k) for k in result.scalars().all()]

    async def list_for_project(self, project_id: str) -> list[KeyRow]:
        result = await self.session.execute(
            select(ApiKey)
            .where(ApiKey.project_id == project_id)
            .order_by(ApiKey.environment, ApiKey.created_at)
        )
        return [_key_row(k) for k in result.scalars().all()]

    async def find_active_by_hash(self, key_hash: str) -> tuple[KeyRow, ProjectRow] | None:
        result = await self.session.execute(
            select(ApiKey, Project)
            .join(Project, Project.id == ApiKey.project_id)
            .where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
        )
        row = result.first()
        return (_key_row(row[0]), _project_row(row[1])) if row else None

    async def find_active_by_id(self, key_id: str) -> tuple[KeyRow, ProjectRow] | None:
        result = await self.session.execute(
            select(ApiKey, Project)
            .join(Project, Project.id == ApiKey.project_id)
            .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
        )
        row = result.first()
        return (_key_row(row[0]), _project_row(row[1])) if row else None

    async def standing_of(self, key_ids: Collection[str]) -> dict[str, KeyStanding]:
        """Of ``key_ids``, those still active with their project: key id -> its project's plan. A key
        revoked, deleted or whose project is gone is absent. One round trip per 500 ids."""
        found: dict[str, KeyStanding] = {}
        ids = list(key_ids)
        for start in range(0, len(ids), 500):
            result = await self.session.execute(
                select(ApiKey.id, Project.tier, Project.custom_limits)
                .join(Project, Project.id == ApiKey.project_id)
                .where(ApiKey.id.in_(ids[start : start + 500]), ApiKey.revoked_at.is_(None))
            )
            for key_id, tier, custom_limits in result.all():
                found[key_id] = KeyStanding(tier, custom_limits)
        return found

    async def add(self, key: KeyRow) -> None:
        self.session.add(ApiKey(**{f: getattr(key, f) for f in KeyRow.__dataclass_fields__}))
        await self._flush()

    async def revoke(self, key_id: str, at: datetime) -> None:
        # An ORM UPDATE: a row of this key already read in this unit of work is updated with it.
        await self.session.execute(update(ApiKey).where(ApiKey.id == key_id).values(revoked_at=at))

    async def touch_last_used(self, last_used: dict[str, datetime]) -> None:
        """Record last-used times for many keys in one round trip."""
        if not last_used:
            return
        await self.session.execute(
            update(ApiKey),
            [{"id": key_id, "last_used_at": at} for key_id, at in last_used.items()],
        )
