"""WebSocket tokens: short-lived JWTs standing in for an API key where headers cannot be set (browsers).

A token is HS256 over a key derived from the server secret (``HMAC(secret, "queuecore websocket token")``,
so it never signs with the secret that keys API-key hashes). Claims: ``sub`` the key id, ``prj`` project,
``env`` environment, ``tid``/``topic`` the topic's id and name, ``grp`` the group when bound to one,
``aud`` ``queuecore:websocket``, ``iat`` and ``exp`` (at most five minutes later). It is accepted only for
its topic (and group), only while its key is still active, and never after ``exp`` (no leeway).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

import jwt

from app.kit.clock import now_ms

TTL_SECONDS = 300
AUDIENCE = "queuecore:websocket"
_ALGORITHM = "HS256"


@dataclass(frozen=True, slots=True)
class IssuedToken:
    token: str
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class TokenClaims:
    key_id: str
    project_id: str
    environment: str
    topic_id: str
    topic: str
    group: str | None


def _signing_key(secret: bytes) -> bytes:
    return hmac.new(secret, b"queuecore websocket token", hashlib.sha256).digest()


def issue(
    secret: bytes,
    *,
    key_id: str,
    project_id: str,
    environment: str,
    topic_id: str,
    topic: str,
    group: str | None,
    ttl_seconds: int = TTL_SECONDS,
) -> IssuedToken:
    """Sign a token for one topic (and group) of one key, valid ``ttl_seconds`` (≤ 5 minutes)."""
    ttl_seconds = min(ttl_seconds, TTL_SECONDS)
    issued = now_ms() // 1000
    claims: dict[str, Any] = {
        "sub": key_id,
        "prj": project_id,
        "env": environment,
        "tid": topic_id,
        "topic": topic,
        "aud": AUDIENCE,
        "iat": issued,
        "exp": issued + ttl_seconds,
    }
    if group is not None:
        claims["grp"] = group
    token = jwt.encode(claims, _signing_key(secret), algorithm=_ALGORITHM)
    return IssuedToken(token, (issued + ttl_seconds) * 1000)


def verify(secret: bytes, token: str) -> TokenClaims | None:
    """The claims of a well-signed, unexpired token; None for anything else."""
    try:
        claims = jwt.decode(
            token,
            _signing_key(secret),
            algorithms=[_ALGORITHM],
            audience=AUDIENCE,
            options={"require": ["exp", "iat", "sub", "aud"]},
        )
    except jwt.PyJWTError:
        return None
    try:
        group = claims.get("grp")
        return TokenClaims(
            key_id=str(claims["sub"]),
            project_id=str(claims["prj"]),
            environment=str(claims["env"]),
            topic_id=str(claims["tid"]),
            topic=str(claims["topic"]),
            group=str(group) if group is not None else None,
        )
    except KeyError:
        return None
