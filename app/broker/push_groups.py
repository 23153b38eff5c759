"""Push groups: the group config's ``push`` (a URL each message is POSTed to), its signing secrets, and
the recent attempts. The delivery itself is ``app/broker/delivery/url_push.py``.

``push`` is set through the group config ``PUT`` (``set_push``): the first one that sets it generates a
secret and answers it once; describe shows it masked. ``rotate_secret`` makes a new one; the previous
one signs too for ``PREVIOUS_SECRET_MS`` (24 h). Secrets are sealed at rest (``app/kit/sealing.py``).

A push group has no WebSocket or pull members: its members are the URL workers of the API processes
(member ids ``csr_push…``), and any other join is 409 ``GROUP_ACTIVE`` (``refuse_join``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.broker import durations, urls
from app.broker.errors import GroupActive, GroupNotFound, InvalidRequest
from app.kit import standard_webhooks
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.kit.sealing import Sealer
from app.stores.log.protocol import LogEngine
from app.stores.metadata.group_repositories import GroupRepository
from app.stores.metadata.models import PushEndpoint
from app.stores.metadata.partition_repositories import PartitionRepository
from app.stores.metadata.protocol import GroupRow
from app.stores.metadata.push_repositories import PushRepository

if TYPE_CHECKING:
    from app.broker.topics import TopicRef
    from app.settings import Settings

MODES = ("binary", "structured")
DEFAULTS: dict[str, Any] = {
    "maxConcurrency": 16,
    "rate": None,
    "timeout": "10s",
    "ordered": False,
    "mode": "binary",
}
FIELDS = ("url", *DEFAULTS)
MAX_CONCURRENCY = 1000
TIMEOUT = durations.Range(100, 5 * 60_000, "between 100ms and 5m")
PREVIOUS_SECRET_MS = 24 * 3_600_000
WORKER_PREFIX = "csr_push"
MAX_ATTEMPTS_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class PushPolicy:
    """The push rules of one deployment, read from the settings in one place (``from_settings``)."""

    sealer: Sealer
    block_internal: bool  # production: https only, no internal addresses (the alert webhook rules)
    allowed_hosts: tuple[str, ...] = ()
    refresh_seconds: float = 1.0
    attempts_kept: int = 1000
    breaker_threshold: int = 5
    breaker_max_seconds: float = 60.0

    @classmethod
    def from_settings(cls, settings: Settings) -> PushPolicy:
        from app.settings import Environment

        return cls(
            sealer=settings.sealer(),
            block_internal=settings.environment is Environment.production,
            allowed_hosts=tuple(settings.push_allowed_hosts),
            refresh_seconds=settings.push_refresh_seconds,
            attempts_kept=settings.push_attempts_kept,
            breaker_threshold=settings.push_breaker_threshold,
            breaker_max_seconds=settings.push_breaker_max_seconds,
        )

    @property
    def url_rule(self) -> urls.UrlRule:
        return urls.UrlRule("push.url", "push deliveries", self.block_internal, self.allowed_hosts, True)


def is_worker(member_id: str) -> bool:
    """Whether a member is a push group's URL worker (not a customer's consumer)."""
    return member_id.startswith(WORKER_PREFIX)


def _positive_number(value: Any, field: str, *, integer: bool, most: float) -> None:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int if integer else (int, float))
        and math.isfinite(value)
        and 0 < value <= most
    )
    if not ok:
        kind = "an integer" if integer else "a number"
        raise InvalidRequest.field(field, f"must be {kind} greater than 0 and at most {most:g}")


def parse_push(value: Any, current: dict[str, Any] | None) -> dict[str, Any]:
    """A ``push`` object of a config PUT merged over ``current`` (None: a new one, ``url`` required) and
    checked by the rules of every mode; the production address rule is ``check_url``'s."""
    if not isinstance(value, dict):
        raise InvalidRequest.field("push", "expected an object or null")
    unknown = set(value) - set(FIELDS)
    if unknown:
        raise InvalidRequest.field(f"push.{min(unknown)}", "unknown field")
    base = current if current is not None else {**DEFAULTS}
    merged = {**base, **{k: v for k, v in value.items() if v is not None or k == "rate"}}
    if "url" not in merged:
        raise InvalidRequest.field("push.url", "required when push is first set")
    _positive_number(merged["maxConcurrency"], "push.maxConcurrency", integer=True, most=MAX_CONCURRENCY)
    if merged["rate"] is not None:
        _positive_number(merged["rate"], "push.rate", integer=False, most=1_000_000)
    durations.parse(merged["timeout"], "push.timeout", TIMEOUT)
    if not isinstance(merged["ordered"], bool):
        raise InvalidRequest.field("push.ordered", "must be true or false")
    if merged["mode"] not in MODES:
        raise InvalidRequest.field("push.mode", "must be 'binary' or 'structured'")
    return merged


def _config(endpoint: PushEndpoint) -> dict[str, Any]:
    return {
        "url": endpoint.url,
        "maxConcurrency": endpoint.max_concurrency,
        "rate": endpoint.rate,
        "timeout": endpoint.timeout,
        "ordered": endpoint.ordered,
        "mode": endpoint.mode,
    }


def mask(secret: str) -> str:
    """How describe shows a secret: its prefix and last four characters."""
    return f"{standard_webhooks.PREFIX}…{secret[-4:]}"


def view(
    endpoint: PushEndpoint | None, policy: PushPolicy, revealed: str | None = None
) -> dict[str, Any] | None:
    """``config.push`` of a group answer: the secret in clear only in the answer that made it."""
    if endpoint is None:
        return None
    now = now_ms()
    open_until = endpoint.breaker_open_until_ms
    return {
        **_config(endpoint),
        "secret": revealed if revealed is not None else mask(policy.sealer.open(endpoint.secret)),
        "breaker": "open" if open_until is not None and open_until > now else "closed",
    }


async def push_view(
    session: AsyncSession, policy: PushPolicy, topic: TopicRef, name: str, revealed: str | None = None
) -> dict[str, Any] | None:
    """The group's ``config.push`` (None: not a push group, or no such group)."""
    group = await GroupRepository.from_session(session).get(topic.id, name)
    if group is None:
        return None
    return view(await PushRepository.from_session(session).get(group.id), policy, revealed)


async def _start_at_latest(session: AsyncSession, log: LogEngine, topic: TopicRef, group_id: str) -> None:
    """A group that never consumed delivers what is published from the moment push is set (its workers
    join a moment later, and would otherwise start from their join)."""
    partition_rows = PartitionRepository.from_session(session)
    state = await partition_rows.partitions(group_id)
    if any(s.committed is not None for s in state):
        return
    unset = [s.partition for s in state if s.position is None]
    offsets = {p: (await log.partition_info(topic.id, p)).latest_offset for p in unset}
    await partition_rows.set_offsets(group_id, offsets)


async def set_push(
    session: AsyncSession,
    log: LogEngine,
    policy: PushPolicy,
    topic: TopicRef,
    group: GroupRow,
    value: Any,
) -> str | None:
    """Apply a config PUT's ``push`` to ``group`` (locked by the caller): ``None`` turns push off; an
    object sets or merges it. Returns the secret when this call generated it (answered once)."""
    repo = PushRepository.from_session(session)
    endpoint = await repo.get(group.id)
    if value is None:
        if endpoint is not None:
            await repo.remove(group.id)
        return None
    merged = parse_push(value, _config(endpoint) if endpoint is not None else None)
    await urls.check_url(policy.url_rule, merged["url"])
    timeout_ms = durations.parse(merged["timeout"], "push.timeout", TIMEOUT)
    now = utcnow()
    if endpoint is None:
        live = await GroupRepository.from_session(session).live_members(group.id, now_ms())
        customers = [m for m in live if not is_worker(m)]
        if customers:
            raise GroupActive(
                f"Group '{group.name}' has {len(customers)} connected member"
                f"{'s' if len(customers) != 1 else ''}; a push group has none: stop them first."
            )
        await _start_at_latest(session, log, topic, group.id)
        secret = standard_webhooks.new_secret()
        await repo.add(
            PushEndpoint(
                group_id=group.id,
                url=merged["url"],
                max_concurrency=merged["maxConcurrency"],
                rate=merged["rate"],
                timeout=merged["timeout"],
                timeout_ms=timeout_ms,
                ordered=merged["ordered"],
                mode=merged["mode"],
                secret=policy.sealer.seal(secret),  # kept sealed; signing opens it
                breaker_failures=0,
                created_at=now,
                updated_at=now,
            )
        )
        return secret
    if merged["url"] != endpoint.url:
        endpoint.breaker_failures, endpoint.breaker_open_until_ms = 0, None
    endpoint.url = merged["url"]
    endpoint.max_concurrency = merged["maxConcurrency"]
    endpoint.rate = merged["rate"]
    endpoint.timeout, endpoint.timeout_ms = merged["timeout"], timeout_ms
    endpoint.ordered, endpoint.mode = merged["ordered"], merged["mode"]
    endpoint.updated_at = now
    await session.flush()
    return None


async def _endpoint(
    session: AsyncSession, topic: TopicRef, name: str, *, for_update: bool = False
) -> PushEndpoint:
    group = await GroupRepository.from_session(session).get(topic.id, name, for_update=for_update)
    if group is None:
        raise GroupNotFound(f"No consumer group '{name}' on topic '{topic.name}'.")
    endpoint = await PushRepository.from_session(session).get(group.id)
    if endpoint is None:
        raise InvalidRequest.field(
            "push", f"group '{name}' is not a push group; set push in its config first"
        )
    return endpoint


async def reseal(session: AsyncSession, sealer: Sealer) -> int:
    """Seal under the current key every push secret kept under the previous one (a rotation of
    ``QUEUECORE_SECRET_KEY``); how many groups' were."""
    repo = PushRepository.from_session(session)
    done = 0
    for group_id, secret, previous in await repo.sealed_secrets():
        if sealer.stale(secret) or (previous is not None and sealer.stale(previous)):
            fresh_previous = sealer.seal(sealer.open(previous)) if previous is not None else None
            await repo.replace_secrets(group_id, sealer.seal(sealer.open(secret)), fresh_previous)
            done += 1
    return done


async def endpoint_of(session: AsyncSession, topic: TopicRef, name: str) -> PushEndpoint:
    """A push group's endpoint row (``GROUP_NOT_FOUND``; 400 when the group is not a push group)."""
    return await _endpoint(session, topic, name)


async def rotate_secret(session: AsyncSession, policy: PushPolicy, topic: TopicRef, name: str) -> str:
    """A new signing secret, answered once; the current one keeps signing beside it for 24 h."""
    endpoint = await _endpoint(session, topic, name, for_update=True)
    secret = standard_webhooks.new_secret()
    endpoint.previous_secret = endpoint.secret
    endpoint.previous_until_ms = now_ms() + PREVIOUS_SECRET_MS
    endpoint.secret = policy.sealer.seal(secret)
    endpoint.updated_at = utcnow()
    await session.flush()
    return secret


async def recent_attempts(
    session: AsyncSession, topic: TopicRef, name: str, limit: int
) -> list[dict[str, Any]]:
    """The group's newest POSTs, newest first: ``{messageId, attempt, at, status, latencyMs, error}``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ATTEMPTS_LIMIT:
        raise InvalidRequest.field("limit", f"must be between 1 and {MAX_ATTEMPTS_LIMIT}")
    endpoint = await _endpoint(session, topic, name)
    rows = await PushRepository.from_session(session).recent_attempts(endpoint.group_id, limit)
    return [
        {
            "messageId": row.message_id,
            "attempt": row.attempt,
            "at": isoformat_ms(row.at),
            "status": row.status,
            "latencyMs": row.latency_ms,
            "error": row.error,
        }
        for row in rows
    ]


async def refuse_join(session: AsyncSession, group_id: str, member_id: str | None, url_worker: bool) -> None:
    """The join rule of push groups: only their URL workers join them (409 ``GROUP_ACTIVE``), and no
    consumer takes a worker's id."""
    if url_worker:
        return
    if member_id is not None and is_worker(member_id):
        raise InvalidRequest.field("memberId", "not a member id issued by QueueCore (csr_…)")
    if await PushRepository.from_session(session).get(group_id) is not None:
        raise push_group_active()


def push_group_active() -> GroupActive:
    """The refusal of a consumer joining a push group."""
    return GroupActive(
        "This is a push group (its config sets push): messages are POSTed to its URL, and it takes "
        "no WebSocket, SSE or pull members. Set push to null to consume it yourself."
    )
