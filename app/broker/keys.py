"""API keys: issue, revoke, list, and authenticate.

A key is ``pq_live_sk_`` (production) or ``pq_test_sk_`` (development, staging) followed by 32 base62
characters from ``secrets``. Only ``HMAC-SHA256(server secret, key)`` is stored, with a display prefix and
the last four characters; a presented key is found by its hash, so no comparison ever runs over the secret
itself, and the check costs the same whatever the key's content.

Authentication answers from a small cache for at most ``cache_ttl`` seconds (0.5 s by default), so a
revocation made by any process — another API node, the operator CLI — is honoured everywhere within one
second without a database read per request. Last-used times are kept in memory and written in one batch
every few seconds, never per request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import hmac
import logging
import re
import secrets
import string
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.broker import tenancy
from app.broker.errors import ApiKeyNotFound, KeyLimitReached
from app.kit.clock import isoformat_ms, utcnow
from app.kit.ids import new_id
from app.kit.singleflight import SingleFlight
from app.kit.tasks import cancel_and_wait
from app.stores.metadata.protocol import KeyRow, MetadataStore, MetadataUnit, ProjectRow

logger = logging.getLogger("queuecore.keys")

MAX_ACTIVE_KEYS_PER_ENVIRONMENT = 2
_BASE62 = string.digits + string.ascii_letters
_KEY_FORMAT = re.compile(r"^pq_(live|test)_sk_[0-9A-Za-z]{32}$")


def key_prefix(environment: str) -> str:
    return "pq_live_sk_" if environment == "production" else "pq_test_sk_"


def hash_key(secret: bytes, key: str) -> str:
    """HMAC-SHA256 of a presented key under the server secret, in hex (what the store keeps)."""
    # A copy of a keyed HMAC, not ``hmac.digest``: the one-shot call gives up the GIL however short
    # the input, on every request, and the event loop then waits to take it back from the log
    # writer's thread (milliseconds when that thread is busy).
    mac = _keyed(secret).copy()
    mac.update(key.encode("utf-8", "surrogatepass"))
    return mac.hexdigest()


@functools.lru_cache(maxsize=4)
def _keyed(secret: bytes) -> hmac.HMAC:
    return hmac.new(secret, digestmod=hashlib.sha256)


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A key as issued: the secret is shown this once."""

    id: str
    key: str
    environment: str
    project_id: str


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key, its project and environment, and the project's limits."""

    key_id: str
    project_id: str
    environment: str
    tier: str
    custom_limits: dict[str, int] | None


async def create_key(uow: MetadataUnit, secret: bytes, project_ref: str, environment: str) -> IssuedKey:
    """Issue a key; 409 ``KEY_LIMIT_REACHED`` when the environment already has two active."""
    environment = tenancy.parse_environment(environment)
    # Locking the project row serialises concurrent issues, so the limit of two holds under races.
    project = await tenancy.get_project(uow, project_ref, for_update=True)
    if len(await uow.keys.active_for(project.id, environment)) >= MAX_ACTIVE_KEYS_PER_ENVIRONMENT:
        raise KeyLimitReached(environment)
    return await _issue(uow, secret, project.id, environment)


async def rotate_key(uow: MetadataUnit, secret: bytes, project_id: str, environment: str) -> IssuedKey:
    """Issue a key, revoking the oldest active one first when two are active (bootstrap)."""
    active = await uow.keys.active_for(project_id, environment)
    for old in active[: max(0, len(active) - MAX_ACTIVE_KEYS_PER_ENVIRONMENT + 1)]:
        await uow.keys.revoke(old.id, utcnow())
    return await _issue(uow, secret, project_id, environment)


async def _issue(uow: MetadataUnit, secret: bytes, project_id: str, environment: str) -> IssuedKey:
    body = "".join(secrets.choice(_BASE62) for _ in range(32))
    key = key_prefix(environment) + body
    row = KeyRow(
        id=new_id("key"),
        project_id=project_id,
        environment=environment,
        key_hash=hash_key(secret, key),
        prefix=key_prefix(environment),
        last_four=body[-4:],
        created_at=utcnow(),
    )
    await uow.keys.add(row)
    return IssuedKey(id=row.id, key=key, environment=environment, project_id=project_id)


async def revoke_key(uow: MetadataUnit, key_id: str) -> KeyRow:
    """Revoke a key (idempotent); every API process stops accepting it within one second."""
    row = await uow.keys.get(key_id)
    if row is None:
        raise ApiKeyNotFound(key_id)
    if row.revoked_at is None:
        at = utcnow()
        await uow.keys.revoke(row.id, at)
        row = dataclasses.replace(row, revoked_at=at)
    return row


async def list_keys(uow: MetadataUnit, project_ref: str) -> Sequence[KeyRow]:
    project = await tenancy.get_project(uow, project_ref)
    return await uow.keys.list_for_project(project.id)


def key_view(row: KeyRow) -> dict[str, Any]:
    """A key as listed: never the secret, only its display prefix and last four."""
    return {
        "id": row.id,
        "projectId": row.project_id,
        "environment": row.environment,
        "display": f"{row.prefix}…{row.last_four}",
        "status": "revoked" if row.revoked_at else "active",
        "createdAt": isoformat_ms(row.created_at),
        "revokedAt": isoformat_ms(row.revoked_at) if row.revoked_at else None,
        "lastUsedAt": isoformat_ms(row.last_used_at) if row.last_used_at else None,
    }


def _principal(key: KeyRow, project: ProjectRow) -> Principal:
    return Principal(
        key_id=key.id,
        project_id=project.id,
        environment=key.environment,
        tier=project.tier,
        custom_limits=project.custom_limits,
    )


class KeyAuthenticator:
    """Turns a presented key into a ``Principal``; caches briefly and batches last-used writes."""

    def __init__(
        self,
        metadata: MetadataStore,
        secret: bytes,
        *,
        cache_ttl: float = 0.5,
        cache_size: int = 10_000,
        flush_interval: float = 5.0,
    ) -> None:
        self._metadata = metadata
        self._secret = secret
        self._ttl = cache_ttl
        self._size = cache_size
        self._flush_interval = flush_interval
        self._cache: OrderedDict[str, tuple[float, Principal | None]] = OrderedDict()
        self._inflight: SingleFlight[str, Principal | None] = SingleFlight()
        self._last_used: dict[str, float] = {}  # key id -> unix seconds (a datetime per request costs more)
        self._flusher: asyncio.Task[None] | None = None

    async def authenticate(self, key: str) -> Principal | None:
        """The principal for a key, or None for a malformed, unknown or revoked one."""
        # Hash whatever was presented, well-formed or not, so the path costs the same for every input.
        digest = hash_key(self._secret, key[:256])
        well_formed = _KEY_FORMAT.fullmatch(key) is not None
        principal = await self._lookup(digest) if well_formed else None
        if principal is not None and not hmac.compare_digest(key[:11], key_prefix(principal.environment)):
            principal = None
        if principal is not None:
            self._last_used[principal.key_id] = time.time()
        return principal

    async def _lookup(self, digest: str) -> Principal | None:
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        # One database read per key per TTL, however many requests arrive together.
        principal = await self._inflight.do(digest, lambda: self._load(digest))
        self._cache[digest] = (now + self._ttl, principal)
        self._cache.move_to_end(digest)
        while len(self._cache) > self._size:
            self._cache.popitem(last=False)
        return principal

    async def _load(self, digest: str) -> Principal | None:
        async with self._metadata.unit(readonly=True) as uow:
            found = await uow.keys.find_active_by_hash(digest)
        if found is None:
            return None
        key, project = found
        if not hmac.compare_digest(key.key_hash, digest):
            return None
        return _principal(key, project)

    async def principal_by_id(self, key_id: str) -> Principal | None:
        """The principal of an active key named by its id (for tokens minted from it), read now."""
        async with self._metadata.unit(readonly=True) as uow:
            found = await uow.keys.find_active_by_id(key_id)
        return _principal(*found) if found is not None else None

    def forget(self) -> None:
        """Drop every cached answer (after a local revoke, so this process honours it at once)."""
        self._cache.clear()

    def start(self) -> None:
        self._flusher = asyncio.create_task(self._flush_forever(), name="key-last-used-flush")

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self._flush_interval)
            try:
                await self.flush()
            except Exception:
                logger.warning("could not record API key last-used times; will retry", exc_info=True)

    async def flush(self) -> None:
        """Write pending last-used times in one batch."""
        if not self._last_used:
            return
        pending, self._last_used = self._last_used, {}
        try:
            async with self._metadata.unit() as uow:
                await uow.keys.touch_last_used(
                    {key_id: datetime.fromtimestamp(at, UTC) for key_id, at in pending.items()}
                )
        except Exception:
            for key_id, at in pending.items():
                self._last_used.setdefault(key_id, at)
            raise

    async def close(self) -> None:
        if self._flusher is not None:
            await cancel_and_wait(self._flusher)
        try:
            await self.flush()
        except Exception:
            logger.warning("could not record API key last-used times at shutdown", exc_info=True)
