"""Dashboard sessions: a signed cookie, a CSRF token per session, and sign-in backoff.

The session cookie is ``base64url(json) "." hex(HMAC-SHA256)`` under a key derived from the server secret
(never the secret itself), HttpOnly, SameSite=Lax, Secure outside development, scoped to ``/dashboard``;
it carries the user id and email, a CSRF token and an expiry. Every state-changing request must carry the
token (form field ``csrf_token`` or header ``X-CSRF-Token``); before sign-in a double-submit cookie plays
that part. Failed sign-ins per email and per client address are counted in the shared rate-limit store, so
the lockout holds across API nodes; a success clears the email's count.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

import orjson

from app.settings import Settings
from app.stores.limits.protocol import RateLimiter

SESSION_COOKIE = "qc_session"
LOGIN_CSRF_COOKIE = "qc_login_csrf"
COOKIE_PATH = "/dashboard"
SESSION_SECONDS = 12 * 3600
# After this many failed sign-ins per email (or per client address) in the window, sign-in is refused,
# even with the right password, until the oldest failure leaves the window. Successes never count.
FAILURES_PER_EMAIL = 5
FAILURES_PER_ADDRESS = 30
FAILURE_WINDOW_MS = 15 * 60 * 1000


@dataclass(frozen=True, slots=True)
class DashboardSession:
    user_id: str
    email: str
    csrf: str
    expires: int
    # A mark of the password the session was opened with: a password change ends every other session.
    pw: str = ""


def _key(settings: Settings) -> bytes:
    return hmac.new(settings.server_secret(), b"queuecore dashboard session v1", hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(settings: Settings, session: DashboardSession) -> str:
    body = _b64(
        orjson.dumps(
            {
                "u": session.user_id,
                "e": session.email,
                "c": session.csrf,
                "x": session.expires,
                "p": session.pw,
            }
        )
    )
    mac = hmac.new(_key(settings), body.encode(), hashlib.sha256).hexdigest()
    return f"{body}.{mac}"


def open_session(settings: Settings, cookie: str | None) -> DashboardSession | None:
    """The session a cookie carries, or None for a missing, forged or expired one."""
    if not cookie or "." not in cookie:
        return None
    body, _, mac = cookie.rpartition(".")
    expected = hmac.new(_key(settings), body.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac, expected):
        return None
    try:
        data: dict[str, Any] = orjson.loads(_unb64(body))
        session = DashboardSession(
            str(data["u"]), str(data["e"]), str(data["c"]), int(data["x"]), str(data.get("p", ""))
        )
    except (ValueError, KeyError, TypeError):
        return None
    return session if session.expires > time.time() else None


def new_session(user_id: str, email: str, pw: str = "") -> DashboardSession:
    return DashboardSession(user_id, email, secrets.token_urlsafe(32), int(time.time()) + SESSION_SECONDS, pw)


def password_mark(settings: Settings, password_hash: str) -> str:
    """What a session keeps of the password it was opened with (an HMAC, never the hash itself)."""
    return hmac.new(_key(settings), b"password " + password_hash.encode(), hashlib.sha256).hexdigest()[:24]


def still_valid(settings: Settings, session: DashboardSession, password_hash: str) -> bool:
    """False once the password changed after the session was opened."""
    return hmac.compare_digest(session.pw, password_mark(settings, password_hash))


def new_token() -> str:
    return secrets.token_urlsafe(32)


def tokens_match(expected: str | None, presented: str | None) -> bool:
    return bool(expected) and bool(presented) and hmac.compare_digest(str(expected), str(presented))


def cookie_options(settings: Settings, max_age: int) -> dict[str, Any]:
    return {
        "max_age": max_age,
        "path": COOKIE_PATH,
        "httponly": True,
        "samesite": "lax",
        "secure": settings.environment.value != "development",
    }


def _attempt_buckets(email: str, address: str) -> tuple[tuple[str, int], ...]:
    return (
        (f"dashboard-login:email:{email.strip().lower()}", FAILURES_PER_EMAIL),
        (f"dashboard-login:addr:{address}", FAILURES_PER_ADDRESS),
    )


async def locked_out(limiter: RateLimiter, email: str, address: str) -> int:
    """0 when a sign-in may be tried, else the seconds until the oldest failure leaves the window."""
    for bucket, limit in _attempt_buckets(email, address):
        decision = await limiter.peek(bucket, limit, FAILURE_WINDOW_MS)
        if not decision.allowed:
            return max(1, decision.retry_after_seconds)
    return 0


async def count_failure(limiter: RateLimiter, email: str, address: str) -> None:
    """A wrong email or password counts against the account and the client address."""
    for bucket, limit in _attempt_buckets(email, address):
        await limiter.acquire(bucket, limit, FAILURE_WINDOW_MS)


async def clear_failures(limiter: RateLimiter, email: str) -> None:
    """A successful sign-in forgets the account's failures. The address's are kept: signing in to one's
    own account must not buy more guesses at another."""
    bucket, _ = _attempt_buckets(email, "")[0]
    await limiter.forget(bucket)
