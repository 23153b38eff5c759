"""Dashboard sign-in plumbing: the session cookie, CSRF tokens and sign-in backoff.

The session itself lives server-side (``app/broker/sessions.py``): the cookie ``qc_session`` holds only
its random token — HttpOnly, SameSite=Lax, Secure outside development, scoped to ``/dashboard``. Every
state-changing request must carry the session's CSRF token (form field ``csrf_token`` or header
``X-CSRF-Token``), which the pages carry and the cookie does not; before sign-in a double-submit cookie
plays that part. Failed sign-ins slow further attempts down (a doubling delay, never a lockout), counted
per account and per client address apart in the shared rate-limit store, so it holds across API nodes;
a browser that signed in to the account before is counted on its own (see "Sign-in backoff").
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from app.broker.sessions import LIFETIME_SECONDS, SignedIn
from app.settings import Settings
from app.stores.limits.protocol import RateLimiter

SESSION_COOKIE = "qc_session"
LOGIN_CSRF_COOKIE = "qc_login_csrf"
COOKIE_PATH = "/dashboard"
SESSION_SECONDS = LIFETIME_SECONDS
# Failed sign-ins per email (or per client address) in the window before each further attempt must wait
# (see "Sign-in backoff" below). Successes never count.
FAILURES_PER_EMAIL = 5
FAILURES_PER_ADDRESS = 30
FAILURE_WINDOW_MS = 15 * 60 * 1000

DashboardSession = SignedIn
"""A signed-in session as the pages see it: ``user_id``, ``email``, ``csrf`` (and ``session_id``)."""


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


# Sign-in backoff -----------------------------------------------------------------------------------
#
# Failed sign-ins are counted per account (the email tried) and per client address, apart, over
# FAILURE_WINDOW_MS, in the shared rate-limit store (so every API node sees them). Up to a bucket's
# free allowance nothing happens; past it, each attempt must come at least a doubling delay after that
# bucket's last failure (1 s, 2 s, 4 s, … at most MAX_DELAY_SECONDS), the right password included, or
# guessing would go on at full speed. Nothing locks: whoever has the password is in within a minute,
# whatever anyone else sends. A browser that signed in to the account before carries a device cookie
# (``qc_device``, nothing readable in it) and is counted on its own instead: failures made elsewhere —
# a guesser at the account, a neighbour behind the same address — never slow it down (OWASP's device
# cookies). Successes never count; one clears the account's and the device's failures.


@dataclass(frozen=True, slots=True)
class _Bucket:
    name: str
    free: int  # failures allowed before any delay


FREE_PER_ACCOUNT = FAILURES_PER_EMAIL
FREE_PER_ADDRESS = FAILURES_PER_ADDRESS
FREE_PER_DEVICE = FAILURES_PER_EMAIL
MAX_DELAY_SECONDS = 60
DEVICE_COOKIE = "qc_device"
DEVICE_SECONDS = 90 * 24 * 3600
_COUNT_ALL = 1_000_000  # a limit no bucket reaches: peeking with it tells how many failures are counted


def delay_seconds(failures: int, free: int) -> int:
    """How long after the last failure the next attempt must wait, once ``failures`` are counted."""
    if failures < free:
        return 0
    return int(min(MAX_DELAY_SECONDS, 2 ** (failures - free)))


def _device_key(settings: Settings) -> bytes:
    return hmac.new(settings.server_secret(), b"queuecore dashboard device v1", hashlib.sha256).digest()


def device_cookie(settings: Settings, email: str, device_id: str | None = None) -> str:
    """The device cookie of a browser that signed in to ``email``: a random id and a MAC binding it to
    the account (the email itself is not in it)."""
    device_id = device_id or secrets.token_urlsafe(16)
    mac = hmac.new(_device_key(settings), f"{device_id}:{email}".encode(), hashlib.sha256).hexdigest()
    return f"{device_id}.{mac}"


def known_device(settings: Settings, cookie: str | None, email: str) -> str | None:
    """The device id when ``cookie`` is this browser's device cookie for ``email``, else None."""
    if not cookie or "." not in cookie or len(cookie) > 200:
        return None
    device_id, _, mac = cookie.partition(".")
    expected = device_cookie(settings, email, device_id).partition(".")[2]
    return device_id if hmac.compare_digest(mac, expected) else None


def _buckets(email: str, address: str, device_id: str | None) -> tuple[_Bucket, ...]:
    if device_id is not None:
        return (_Bucket(f"dashboard-login:device:{device_id}", FREE_PER_DEVICE),)
    return (
        _Bucket(f"dashboard-login:email:{email.strip().lower()}", FREE_PER_ACCOUNT),
        _Bucket(f"dashboard-login:addr:{address}", FREE_PER_ADDRESS),
    )


async def _failures(limiter: RateLimiter, bucket: _Bucket) -> int:
    decision = await limiter.peek(bucket.name, _COUNT_ALL, FAILURE_WINDOW_MS)
    return _COUNT_ALL - decision.remaining


async def backoff(limiter: RateLimiter, email: str, address: str, device_id: str | None) -> int:
    """0 when a sign-in may be tried now, else the seconds to wait first."""
    wait = 0
    for bucket in _buckets(email, address, device_id):
        delay = delay_seconds(await _failures(limiter, bucket), bucket.free)
        if delay:
            last = await limiter.peek(bucket.name + ":last", 1, delay * 1000)
            if not last.allowed:
                wait = max(wait, last.retry_after_seconds)
    return wait


async def count_failure(limiter: RateLimiter, email: str, address: str, device_id: str | None) -> None:
    """A wrong email or password counts against the account and the client address (or the device)."""
    for bucket in _buckets(email, address, device_id):
        await limiter.acquire(bucket.name, _COUNT_ALL, FAILURE_WINDOW_MS)
        delay = delay_seconds(await _failures(limiter, bucket), bucket.free)
        if delay:
            # The time of the last failure, kept as long as the delay it starts (a sliding log of one).
            await limiter.forget(bucket.name + ":last")
            await limiter.acquire(bucket.name + ":last", 1, delay * 1000)


async def clear_failures(limiter: RateLimiter, email: str, device_id: str | None) -> None:
    """A successful sign-in forgets the account's (and the device's) failures. The address's are kept:
    signing in to one's own account must not buy more guesses at another."""
    for bucket in (*_buckets(email, "", None)[:1], *_buckets(email, "", device_id)[:1]):
        await limiter.forget(bucket.name)
        await limiter.forget(bucket.name + ":last")
