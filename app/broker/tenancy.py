"""Accounts, projects and their environments: who owns what, and on which tier."""

from __future__ import annotations

import asyncio
import enum
import functools
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerifyMismatchError
from sqlalchemy.ext.asyncio import AsyncSession

from app.broker.errors import InvalidRequest, ProjectAlreadyExists, ProjectNotFound, UserAlreadyExists
from app.broker.rate_limits import Category, Tier
from app.kit.clock import utcnow
from app.kit.digits import is_ascii_digits
from app.kit.ids import new_id
from app.stores.metadata.models import Project, User
from app.stores.metadata.tenancy_repositories import ProjectRepository, UserRepository

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
_PROJECT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}$")
_passwords = PasswordHasher()


class EnvironmentName(enum.StrEnum):
    """The three environments every project has; nothing crosses them."""

    development = "development"
    staging = "staging"
    production = "production"


ENVIRONMENTS: tuple[str, ...] = tuple(e.value for e in EnvironmentName)


@dataclass(frozen=True, slots=True)
class ProjectView:
    """A project and its plan as callers outside the domain see it: read once, detached from the session."""

    id: str
    name: str
    tier: str
    custom_limits: dict[str, int] | None

    @classmethod
    def of(cls, project: Project) -> ProjectView:
        limits = project.custom_limits
        return cls(project.id, project.name, project.tier, dict(limits) if limits is not None else None)


def parse_environment(value: str) -> str:
    if value not in ENVIRONMENTS:
        raise InvalidRequest.field("environment", f"must be one of {', '.join(ENVIRONMENTS)}")
    return value


def parse_tier(value: str) -> Tier:
    try:
        return Tier(value)
    except ValueError:
        raise InvalidRequest.field("tier", "must be one of developer, pro, enterprise") from None


def parse_custom_limits(value: str) -> dict[str, int]:
    """``publish=N,consume=N,admin=N`` → a mapping of category to requests per second; ``connections=N``
    sets the key's cap on open push connections per API process (``app/broker/connections.py``)."""
    limits: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, _, number = part.partition("=")
        categories = {c.value for c in Category} | {"connections"}
        if name not in categories or not is_ascii_digits(number) or int(number) < 1:
            raise InvalidRequest.field("limits", "expected publish=N,consume=N,admin=N with positive N")
        limits[name] = int(number)
    if not limits:
        raise InvalidRequest.field("limits", "expected publish=N,consume=N,admin=N with positive N")
    return limits


async def create_user(session: AsyncSession, email: str, password: str) -> User:
    """An account user with an argon2-hashed password."""
    email = email.strip().lower()
    if not _EMAIL.fullmatch(email):
        raise InvalidRequest.field("email", "not an email address")
    if len(password) < 8:
        raise InvalidRequest.field("password", "must be at least 8 characters")
    users = UserRepository.from_session(session)
    if await users.get_by_email(email):
        raise UserAlreadyExists(email)
    user: User = await users.add(
        User(id=new_id("usr"), email=email, password_hash=_passwords.hash(password), created_at=utcnow())
    )
    return user


async def set_password(session: AsyncSession, user: User, password: str) -> None:
    user.password_hash = _passwords.hash(password)
    await session.flush()


def verify_password(user: User, password: str) -> bool:
    return _verify(user.password_hash, password)


def _verify(password_hash: str, password: str) -> bool:
    try:
        return _passwords.verify(password_hash, password)
    except (VerifyMismatchError, InvalidHashError):
        return False


@functools.cache
def _stand_in_hash() -> str:
    """A hash of a random password, made with the same parameters as every user's: what an unknown
    email's sign-in is checked against, so it costs the same argon2 work as a known one."""
    return _passwords.hash(secrets.token_urlsafe(16))


async def authenticate_user(session: AsyncSession, email: str, password: str) -> User | None:
    """The user whose email and password these are, or None.

    Unknown emails run the same argon2 verification (against a stand-in hash) as known ones: answering
    them at once told which emails have accounts (known 207–271 ms, unknown 6–9 ms). The hash runs in a
    worker thread (argon2 releases the GIL): ~100 ms of CPU must not stall the API's event loop. A
    disabled account (``users disable``) signs in with nothing, after the same work.
    """
    user = await get_user_by_email(session, email) if email else None
    password_hash = user.password_hash if user is not None else _stand_in_hash()
    matches = await asyncio.to_thread(_verify, password_hash, password)
    if user is None or not matches or user.disabled_at is not None:
        return None
    return user


async def get_user_by_email(session: AsyncSession, email: str) -> User | None:
    return await UserRepository.from_session(session).get_by_email(email.strip().lower())


async def create_project(
    session: AsyncSession, name: str, tier: Tier = Tier.developer, owner_id: str | None = None
) -> Project:
    if not _PROJECT_NAME.fullmatch(name):
        raise InvalidRequest.field("name", "1–100 chars of letters, digits, space, '.', '_' or '-'")
    projects = ProjectRepository.from_session(session)
    if await projects.get(name):
        raise ProjectAlreadyExists(name)
    project = Project(
        id=new_id("prj"),
        name=name,
        tier=tier.value,
        custom_limits=None,
        owner_id=owner_id,
        created_at=utcnow(),
    )
    return await projects.add(project)


async def get_project(session: AsyncSession, ref: str, *, for_update: bool = False) -> Project:
    """A project by id or name."""
    project = await ProjectRepository.from_session(session).get(ref, for_update=for_update)
    if project is None:
        raise ProjectNotFound(ref)
    return project


async def describe_project(session: AsyncSession, ref: str) -> ProjectView:
    """A project by id or name, as a view."""
    return ProjectView.of(await get_project(session, ref))


async def list_projects(session: AsyncSession) -> Sequence[Project]:
    return await ProjectRepository.from_session(session).list()


async def set_tier(
    session: AsyncSession, ref: str, tier: Tier, custom_limits: dict[str, int] | None = None
) -> ProjectView:
    """Change a project's tier; custom limits apply to the enterprise tier only."""
    if custom_limits and tier is not Tier.enterprise:
        raise InvalidRequest.field("limits", "custom limits apply to the enterprise tier only")
    project = await get_project(session, ref, for_update=True)
    project.tier = tier.value
    project.custom_limits = dict(custom_limits) if custom_limits else None
    await session.flush()
    return ProjectView.of(project)


def project_view(project: Project | ProjectView) -> dict[str, Any]:
    return {
        "id": project.id,
        "name": project.name,
        "tier": project.tier,
        "customLimits": project.custom_limits,
    }
