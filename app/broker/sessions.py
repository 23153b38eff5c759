"""Dashboard sessions of account users, kept server-side.

A session is opened at sign-in and lives as a row (``user_sessions``): the browser's cookie holds only
a random token (nothing readable: no email, no CSRF token), the row the token's SHA-256, the session's
CSRF token, and when it began, was last used and ends. A session ends:

- at sign-out (its row is deleted: a cookie replayed afterwards opens nothing);
- at a password change (every session of the account; the browser that changed it gets a new one);
- when an operator disables the account (``queuecore-server users disable``), at once;
- after ``idle_seconds`` without a request (``QUEUECORE_DASHBOARD_IDLE_TIMEOUT_SECONDS``, 30 min);
- ``LIFETIME_SECONDS`` (12 h) after sign-in, however busy.

Using a session moves its last-seen time, written at most every ``_TOUCH_EVERY`` seconds (a page of live
charts polls every 2 s; one write a minute keeps the idle timeout honest to a minute).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from app.broker.errors import UserNotFound
from app.kit.clock import utcnow
from app.stores.metadata.protocol import Account, MetadataUnit, UserSessionRow

LIFETIME_SECONDS = 12 * 3600
_TOUCH_EVERY = 60.0


@dataclass(frozen=True, slots=True)
class SignedIn:
    """Who a session belongs to, and its CSRF token (rendered into the pages, never in the cookie)."""

    session_id: str
    user_id: str
    email: str
    csrf: str


def _session_id(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _aware(at: datetime) -> datetime:
    # SQLite hands back naive datetimes (stored as UTC).
    return at if at.tzinfo is not None else at.replace(tzinfo=utcnow().tzinfo)


class User(Protocol):
    """Whom a session is opened for (a user as the tenancy calls answer it)."""

    @property
    def id(self) -> str: ...

    @property
    def email(self) -> str: ...


async def open_session(uow: MetadataUnit, user: User, *, now: datetime | None = None) -> tuple[str, SignedIn]:
    """A new session for ``user``: the cookie's token (shown to this browser only) and the session."""
    now = now or utcnow()
    token = secrets.token_urlsafe(32)
    row = UserSessionRow(
        id=_session_id(token),
        user_id=user.id,
        csrf=secrets.token_urlsafe(32),
        created_at=now,
        last_seen_at=now,
        expires_at=now + timedelta(seconds=LIFETIME_SECONDS),
    )
    await uow.user_sessions.add(row)
    return token, SignedIn(row.id, user.id, user.email, row.csrf)


async def resolve(
    uow: MetadataUnit, token: str | None, *, idle_seconds: float, now: datetime | None = None
) -> SignedIn | None:
    """The session a cookie's token opens, or None: unknown, ended, idle too long, past its lifetime, or
    its account disabled. A session found too old is deleted."""
    if not token or len(token) > 256:
        return None
    now = now or utcnow()
    sessions = uow.user_sessions
    found = await sessions.get_with_user(_session_id(token))
    if found is None:
        return None
    row, user = found
    last_seen = _aware(row.last_seen_at)
    if (
        user.disabled_at is not None
        or _aware(row.expires_at) <= now
        or last_seen + timedelta(seconds=idle_seconds) <= now
    ):
        await sessions.delete(row.id)
        return None
    if (now - last_seen).total_seconds() >= min(_TOUCH_EVERY, idle_seconds / 10):
        await sessions.touch(row.id, now)
    return SignedIn(row.id, user.id, user.email, row.csrf)


async def end(uow: MetadataUnit, session_id: str) -> None:
    """Sign-out: the session is gone; its cookie opens nothing any more."""
    await uow.user_sessions.delete(session_id)


async def end_all(uow: MetadataUnit, user_id: str) -> int:
    """End every session of an account (a password change, a disabled account); how many ended."""
    return await uow.user_sessions.delete_for_user(user_id)


async def set_disabled(uow: MetadataUnit, email: str, disabled: bool) -> tuple[Account, int]:
    """Disable (every session ends at once, sign-in refused) or enable an account; the account and how
    many sessions ended."""
    user = await uow.users.get_by_email(email.strip().lower())
    if user is None:
        raise UserNotFound(f"No user with the email '{email.strip().lower()}'.")
    ended = 0
    at = (user.disabled_at or utcnow()) if disabled else None  # disabling again keeps the first time
    await uow.users.set_disabled(user.id, at)
    if disabled:
        ended = await end_all(uow, user.id)
    return Account(user.id, user.email, at), ended
