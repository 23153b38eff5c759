"""Push groups: the group config's ``push`` (a URL each message is POSTed to), its signing secrets, and
the recent attempts. The delivery itself is ``app/broker/delivery/url_push.py``.

``push`` is set through the group config ``PUT`` (``set_push``): the first one that sets it generates a
secret and answers it once; describe shows it masked. ``rotate_secret`` makes a new one; the previous
one signs too for ``PREVIOUS_SECRET_MS`` (24 h). Secrets are sealed at rest (``app/kit/sealing.py``).

A push group has no WebSocket or pull members: its members are the URL workers of the API processes
(member ids ``csr_push…``), and any other join is 409 ``GROUP_ACTIVE`` (``refuse_join``).

Push groups count against the project environment's ``pushGroups`` quota (``quotas.py``): a config ``PUT``
that sets ``push`` locks the project row first (``lock_quota``: project before group, the lock order of
every quota), and the ``set_push`` that turns a group into a push group counts the environment's push
groups under that lock before it adds the endpoint (403 ``QUOTA_EXCEEDED``, nothing changed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.broker import durations, quotas, urls
from app.broker.errors import GroupActive, GroupNotFound, InvalidRequest
from app.broker.quotas import Quota, QuotaLimits
from app.kit import standard_webhooks
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.kit.sealing import Sealer
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import GroupRow, MetadataUnit, PushConfig, PushEndpointRow

if TYPE_CHECKING:
    from app.broker.topics import Scope, TopicRef

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
    """The push rules of one deployment, given as plain values (the settings become one in
    ``app/main.py::build_push_policy``; the domain never reads ``Settings``)."""

    sealer: Sealer
    block_internal: bool  # production: https only, no internal addresses (the alert webhook rules)
    allowed_hosts: tuple[str, ...] = ()
    refresh_seconds: float = 1.0
    attempts_kept: int = 1000
    breaker_threshold: int = 5
    breaker_max_seconds: float = 60.0

    @property
    def url_rule(self) -> urls.UrlRule:
        return urls.UrlRule("push.url", "push deliveries", self.block_internal, self.allowed_hosts, True)


@dataclass(frozen=True, slots=True)
class PushQuota:
    """A project environment's ``pushGroups`` quota, its project row locked (``lock_quota``): what
    ``set_push`` counts against when it turns a group into a push group."""

    project_id: str
    environment: str
    limits: QuotaLimits


async def lock_quota(uow: MetadataUnit, scope: Scope) -> PushQuota:
    """Lock the project row for a config ``PUT`` that sets ``push``, before the group's row is locked
    (project → topic → group, as every quota locks): push groups are then counted one change at a time."""
    return PushQuota(scope.project_id, scope.environment, await quotas.lock_project(uow, scope.project_id))


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


def _config(endpoint: PushEndpointRow) -> dict[str, Any]:
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
    endpoint: PushEndpointRow | None, policy: PushPolicy, revealed: str | None = None
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
    uow: MetadataUnit, policy: PushPolicy, topic: TopicRef, name: str, revealed: str | None = None
) -> dict[str, Any] | None:
    """The group's ``config.push`` (None: not a push group, or no such group)."""
    group = await uow.groups.get(topic.id, name)
    if group is None:
        return None
    return view(await uow.push.get(group.id), policy, revealed)


async def _start_at_latest(uow: MetadataUnit, log: LogEngine, topic: TopicRef, group_id: str) -> None:
    """A group that never consumed delivers what is published from the moment push is set (its workers
    join a moment later, and would otherwise start from their join)."""
    state = await uow.partitions.partitions(group_id)
    if any(s.committed is not None for s in state):
        return
    unset = [s.partition for s in state if s.position is None]
    offsets = {p: (await log.partition_info(topic.id, p)).latest_offset for p in unset}
    await uow.partitions.set_offsets(group_id, offsets)


async def set_push(
    uow: MetadataUnit,
    log: LogEngine,
    policy: PushPolicy,
    topic: TopicRef,
    group: GroupRow,
    value: Any,
    quota: PushQuota | None,
) -> str | None:
    """Apply a config PUT's ``push`` to ``group`` (locked by the caller): ``None`` turns push off; an
    object sets or merges it. Turning a group into a push group counts against ``quota`` (the caller
    took it with ``lock_quota`` before it locked the group): 403 ``QUOTA_EXCEEDED`` past it. Returns the
    secret when this call generated it (answered once)."""
    endpoint = await uow.push.get(group.id)
    if value is None:
        if endpoint is not None:
            await uow.push.remove(group.id)
        return None
    merged = parse_push(value, _config(endpoint) if endpoint is not None else None)
    await urls.check_url(policy.url_rule, merged["url"])
    config = PushConfig(
        url=merged["url"],
        max_concurrency=merged["maxConcurrency"],
        rate=merged["rate"],
        timeout=merged["timeout"],
        timeout_ms=durations.parse(merged["timeout"], "push.timeout", TIMEOUT),
        ordered=merged["ordered"],
        mode=merged["mode"],
    )
    now = utcnow()
    if endpoint is None:
        if quota is None:
            raise RuntimeError("a group turned into a push group needs its project locked first (lock_quota)")
        used = await uow.push.count(quota.project_id, quota.environment)
        quotas.check(Quota.push_groups, quota.limits, used)
        live = await uow.groups.live_members(group.id, now_ms())
        customers = [m for m in live if not is_worker(m)]
        if customers:
            raise GroupActive(
                f"Group '{group.name}' has {len(customers)} connected member"
                f"{'s' if len(customers) != 1 else ''}; a push group has none: stop them first."
            )
        await _start_at_latest(uow, log, topic, group.id)
        secret = standard_webhooks.new_secret()
        await uow.push.add(
            PushEndpointRow(
                group_id=group.id,
                url=config.url,
                max_concurrency=config.max_concurrency,
                rate=config.rate,
                timeout=config.timeout,
                timeout_ms=config.timeout_ms,
                ordered=config.ordered,
                mode=config.mode,
                secret=policy.sealer.seal(secret),  # kept sealed; signing opens it
                previous_secret=None,
                previous_until_ms=None,
                breaker_failures=0,
                breaker_open_until_ms=None,
                created_at=now,
                updated_at=now,
            )
        )
        return secret
    await uow.push.set_config(group.id, config, now, reset_breaker=config.url != endpoint.url)
    return None


async def _endpoint(
    uow: MetadataUnit, topic: TopicRef, name: str, *, for_update: bool = False
) -> PushEndpointRow:
    group = await uow.groups.get(topic.id, name, for_update=for_update)
    if group is None:
        raise GroupNotFound(f"No consumer group '{name}' on topic '{topic.name}'.")
    endpoint = await uow.push.get(group.id)
    if endpoint is None:
        raise InvalidRequest.field(
            "push", f"group '{name}' is not a push group; set push in its config first"
        )
    return endpoint


async def reseal(uow: MetadataUnit, sealer: Sealer) -> int:
    """Seal under the current key every push secret kept under the previous one (a rotation of
    ``QUEUECORE_SECRET_KEY``); how many groups' were."""
    done = 0
    for group_id, secret, previous in await uow.push.sealed_secrets():
        if sealer.stale(secret) or (previous is not None and sealer.stale(previous)):
            fresh_previous = sealer.seal(sealer.open(previous)) if previous is not None else None
            await uow.push.replace_secrets(group_id, sealer.seal(sealer.open(secret)), fresh_previous)
            done += 1
    return done


async def endpoint_of(uow: MetadataUnit, topic: TopicRef, name: str) -> PushEndpointRow:
    """A push group's endpoint (``GROUP_NOT_FOUND``; 400 when the group is not a push group)."""
    return await _endpoint(uow, topic, name)


async def rotate_secret(uow: MetadataUnit, policy: PushPolicy, topic: TopicRef, name: str) -> str:
    """A new signing secret, answered once; the current one keeps signing beside it for 24 h."""
    endpoint = await _endpoint(uow, topic, name, for_update=True)
    secret = standard_webhooks.new_secret()
    await uow.push.rotate_secret(
        endpoint.group_id, policy.sealer.seal(secret), now_ms() + PREVIOUS_SECRET_MS, utcnow()
    )
    return secret


async def recent_attempts(uow: MetadataUnit, topic: TopicRef, name: str, limit: int) -> list[dict[str, Any]]:
    """The group's newest POSTs, newest first: ``{messageId, attempt, at, status, latencyMs, error}``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ATTEMPTS_LIMIT:
        raise InvalidRequest.field("limit", f"must be between 1 and {MAX_ATTEMPTS_LIMIT}")
    endpoint = await _endpoint(uow, topic, name)
    rows = await uow.push.recent_attempts(endpoint.group_id, limit)
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


async def refuse_join(uow: MetadataUnit, group_id: str, member_id: str | None, url_worker: bool) -> None:
    """The join rule of push groups: only their URL workers join them (409 ``GROUP_ACTIVE``), and no
    consumer takes a worker's id."""
    if url_worker:
        return
    if member_id is not None and is_worker(member_id):
        raise InvalidRequest.field("memberId", "not a member id issued by QueueCore (csr_…)")
    if await uow.push.get(group_id) is not None:
        raise push_group_active()


def push_group_active() -> GroupActive:
    """The refusal of a consumer joining a push group."""
    return GroupActive(
        "This is a push group (its config sets push): messages are POSTed to its URL, and it takes "
        "no WebSocket, SSE or pull members. Set push to null to consume it yourself."
    )
