"""What routes depend on: the services built in lifespan, the caller's key and topics, a metadata unit of
work."""

from __future__ import annotations

import functools
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from app.broker.keys import Principal
from app.broker.rate_limits import Category, limit_for
from app.broker.topics import Scope, TopicDirectory, TopicRef
from app.errors import ApiError
from app.services import Services
from app.stores.metadata.protocol import MetadataUnit


async def get_services(request: Request) -> Services:
    # async: a plain ``def`` dependency would cost a thread-pool hop on every request.
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_unit(services: ServicesDep) -> AsyncIterator[MetadataUnit]:
    """One unit of work per request: committed when the route returns, rolled back on error."""
    async with services.metadata.unit() as uow:
        yield uow


# "function": the unit of work commits when the route returns, before the answer is sent (FastAPI's default
# ends a yield dependency after the response: a 201 could go out before its write was durable, and a
# client acting on it at once could find nothing).
UnitDep = Annotated[MetadataUnit, Depends(get_unit, scope="function")]

_INVALID_KEY = "The API key is missing, malformed, or has been revoked."


def api_key(category: Category) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency authenticating the bearer key and charging it one request of ``category``."""

    async def authenticate(request: Request) -> Principal:
        services: Services = request.app.state.services
        header = request.headers.get("authorization", "")
        return await authenticate_bearer(services, request.scope["state"], header, category)

    return authenticate


async def authenticate_bearer(
    services: Services, state: dict[str, Any], header: str, category: Category
) -> Principal:
    """The caller of an ``Authorization: Bearer`` header, charged one request of ``category``; the
    principal, its rate-limit headers and its usage meter are left in the request ``state``."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ApiError("INVALID_API_KEY", _INVALID_KEY)
    principal = await services.keys.authenticate(token.strip())
    if principal is None:
        raise ApiError("INVALID_API_KEY", _INVALID_KEY)
    state["key_id"] = principal.key_id
    state["principal"] = principal
    state["usage"] = services.usage  # where the envelope records the call
    await charge_state(services, state, principal, category)
    return principal


async def charge(
    services: Services, request: HTTPConnection, principal: Principal, category: Category
) -> None:
    """Count one request against the key's limit for ``category``; 429 when over it."""
    await charge_state(services, request.scope["state"], principal, category)


_REMAINING = {c: b'"%s";r=%%d;t=%%d' % c.value.encode() for c in Category}


@functools.lru_cache(maxsize=256)
def _limit_fields(category: Category, limit: int) -> tuple[tuple[bytes, bytes], tuple[bytes, bytes]]:
    """The fields that depend only on the category and its limit, made once per pair."""
    return (
        (b"ratelimit-limit", b"%d" % limit),
        (b"ratelimit-policy", b'"%s";q=%d;w=1' % (category.value.encode(), limit)),
    )


async def charge_state(
    services: Services, state: dict[str, Any], principal: Principal, category: Category
) -> None:
    """``charge``, given the request's ``state``."""
    limit = limit_for(principal.tier, principal.custom_limits, category)
    decision = await services.limiter.acquire(f"{principal.key_id}:{category.value}", limit)
    # Raw header pairs, as the envelope adds them to the answer: the fields clients read today, and the
    # current IETF draft's (draft-ietf-httpapi-ratelimit-headers: one policy per category, a 1 s window).
    limit_field, policy = _limit_fields(category, decision.limit)
    state["response_headers"] = [
        limit_field,
        (b"ratelimit-remaining", b"%d" % decision.remaining),
        (b"ratelimit-reset", b"%d" % decision.reset_seconds),
        policy,
        (b"ratelimit", _REMAINING[category] % (decision.remaining, decision.reset_seconds)),
    ]
    state["category"] = category.value
    state["accepted_at_us"] = decision.at_us if decision.allowed else None
    if not decision.allowed:
        retry_after = max(1, math.ceil(decision.retry_after_seconds))
        raise ApiError(
            "RATE_LIMIT_EXCEEDED",
            f"Rate limit of {decision.limit} {category.value} requests per second exceeded; "
            f"retry after {retry_after} second{'s' if retry_after != 1 else ''}.",
            headers={"Retry-After": str(retry_after)},
        )


AdminKey = Annotated[Principal, Depends(api_key(Category.admin))]
PublishKey = Annotated[Principal, Depends(api_key(Category.publish))]
ConsumeKey = Annotated[Principal, Depends(api_key(Category.consume))]


def scope_of(principal: Principal) -> Scope:
    return Scope(principal.project_id, principal.environment)


@dataclass(frozen=True, slots=True)
class KeyTopics:
    """The topics of the calling key's project environment, by name.

    A route asks for its topic when it needs it (``await topics.get(name)``) rather than FastAPI
    resolving it before the route runs: FastAPI calls dependencies before it reports a bad body or query,
    so a topic resolved there would answer 404 where the route answers 400 today (a bad body for a topic
    that does not exist), and before the checks some routes make first.
    """

    directory: TopicDirectory
    scope: Scope

    async def get(self, name: str) -> TopicRef:
        """The topic, through the directory's brief cache; ``TopicNotFound`` if the environment has none."""
        return await self.directory.resolve(self.scope, name)


def topics_of(services: Services, principal: Principal) -> KeyTopics:
    """The topics ``principal`` may use (for callers authenticated outside ``AdminKey``/``ConsumeKey``)."""
    return KeyTopics(services.publisher.topics, scope_of(principal))


async def admin_topics(key: AdminKey, services: ServicesDep) -> KeyTopics:
    return topics_of(services, key)


async def consume_topics(key: ConsumeKey, services: ServicesDep) -> KeyTopics:
    return topics_of(services, key)


# The key is authenticated (and charged) once per request, whether the route also takes it or not.
AdminTopics = Annotated[KeyTopics, Depends(admin_topics)]
ConsumeTopics = Annotated[KeyTopics, Depends(consume_topics)]
