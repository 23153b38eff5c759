"""Dashboard sessions: a signed cookie, a CSRF token per session, and sign-in backoff.

The session cookie is ``base64url(json) "." hex(HMAC-SHA256)`` under a key derived from the server secret
(never the secret itself), HttpOnly, SameSite=Lax, Secure outside development, scoped to ``/dashboard``;
it carries the user id and email, a CSRF token and an expiry. Every state-changing request must carry the
token (form field ``csrf_token`` or header ``X-CSRF-Token``); before sign-in a double-submit cookie plays
that part. Sign-in attempts per email and per client address go through the shared rate-limit store, so
the lockout holds across API nodes.
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
# At most this many sign-in attempts per email in the window (then refused until the window empties).
ATTEMPTS_PER_EMAIL = 5
ATTEMPTS_PER_ADDRESS = 30
ATTEMPT_WINDOW_MS = 15 * 60 * 1000


@dataclass(frozen=True, slots=True)
class DashboardSession:
    user_id: str
    email: str
    csrf: str
    expires: int


def _key(settings: Settings) -> bytes:
    return hmac.new(settings.server_secret(), b"queuecore dashboard session v1", hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(settings: Settings, session: DashboardSession) -> str:
    body = _b64(
        orjson.dumps({"u": session.user_id, "e": session.email, "c": session.csrf, "x": session.expires})
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
        session = DashboardSession(str(data["u"]), str(data["e"]), str(data["c"]), int(data["x"]))
    except (ValueError, KeyError, TypeError):
        return None
    return session if session.expires > time.time() else None


def new_session(user_id: str, email: str) -> DashboardSession:
    return DashboardSession(user_id, email, secrets.token_urlsafe(32), int(time.time()) + SESSION_SECONDS)


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


async def allow_attempt(limiter: RateLimiter, email: str, address: str) -> int:
    """Count one sign-in attempt; 0 when allowed, else the seconds to wait."""
    for bucket, limit in (
        (f"dashboard-login:email:{email.strip().lower()}", ATTEMPTS_PER_EMAIL),
        (f"dashboard-login:addr:{address}", ATTEMPTS_PER_ADDRESS),
    ):
        decision = await limiter.acquire(bucket, limit, ATTEMPT_WINDOW_MS)
        if not decision.allowed:
            return max(1, decision.retry_after_seconds)
    return 0
