"""A project environment's alert endpoint: an http(s) URL and a signing secret, and the SSRF rule.

The secret is given, or generated and answered once; it is kept sealed (``AlertPolicy.sealer``). Under
the SSRF rule (``AlertPolicy.block_internal``, production) the URL may not resolve to a loopback,
private, link-local or otherwise internal address unless its host is in ``allowed_hosts`` (the rule is
``app/broker/urls.py``, shared with push groups); checked when it is set and again before every delivery
(DNS can change). A delivery connects to the address the check approved (no rebinding in between).
Redirects are not followed.
"""

from __future__ import annotations

import dataclasses
import secrets
import string
from dataclasses import dataclass
from typing import Any

from app.broker import urls
from app.broker.alerts.policy import AlertPolicy
from app.broker.errors import AlertEndpointNotFound, InvalidRequest
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.stores.metadata.protocol import EndpointRow, MetadataUnit

_BASE62 = string.ascii_letters + string.digits


def new_secret() -> str:
    return "whsec_" + "".join(secrets.choice(_BASE62) for _ in range(32))


# SSRF (the shared rule: app/broker/urls.py) -------------------------------------------------------

BlockedUrl = urls.BlockedUrl
Destination = urls.Destination


def url_rule(policy: AlertPolicy) -> urls.UrlRule:
    return urls.UrlRule("url", "alerts", policy.block_internal, policy.allowed_hosts)


async def check_url(policy: AlertPolicy, url: Any) -> Destination:
    """Where ``url`` may receive alerts; else ``INVALID_REQUEST`` saying why."""
    return await urls.check_url(url_rule(policy), url)


# the endpoint ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndpointView:
    url: str
    secret_hint: str
    state: str
    created_at: str
    updated_at: str
    secret: str | None = None  # only in the answer that generated it

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "url": self.url,
            "secretHint": self.secret_hint,
            "state": self.state,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }
        if self.secret is not None:
            wire["secret"] = self.secret
        return wire


def breaker_state(failures: int, open_until_ms: int | None, threshold: int, now: int) -> str:
    if open_until_ms is None or failures < threshold:
        return "closed"
    return "open" if open_until_ms > now else "half-open"


def _view(endpoint: EndpointRow, policy: AlertPolicy, secret: str | None = None) -> EndpointView:
    return EndpointView(
        endpoint.url,
        policy.sealer.open(endpoint.secret)[-4:],
        breaker_state(endpoint.failures, endpoint.open_until_ms, policy.breaker_threshold, now_ms()),
        isoformat_ms(endpoint.created_at),
        isoformat_ms(endpoint.updated_at),
        secret,
    )


NO_ENDPOINT = "This environment has no alert endpoint"


async def set_endpoint(
    uow: MetadataUnit,
    policy: AlertPolicy,
    project_id: str,
    environment: str,
    url: Any,
    secret: Any = None,
) -> EndpointView:
    """Create or replace the environment's endpoint. Without ``secret``, a new one is generated on
    creation (and answered once); an update without it keeps the current one. A new URL resets the
    breaker."""
    await check_url(policy, url)
    if secret is not None and (not isinstance(secret, str) or not 16 <= len(secret) <= 255):
        raise InvalidRequest.field("secret", "expected a string of 16 to 255 characters")
    endpoint = await uow.alerts.endpoint(project_id, environment)
    sealer = policy.sealer
    now = utcnow()
    revealed = None
    if endpoint is None:
        revealed = new_secret() if secret is None else None
        chosen = str(secret) if revealed is None else revealed
        endpoint = EndpointRow(
            project_id=project_id,
            environment=environment,
            url=url,
            secret=sealer.seal(chosen),  # kept sealed; signing opens it
            failures=0,
            open_until_ms=None,
            created_at=now,
            updated_at=now,
        )
    else:
        moved = url != endpoint.url  # a new URL resets the breaker
        endpoint = dataclasses.replace(
            endpoint,
            url=url,
            secret=endpoint.secret if secret is None else sealer.seal(secret),
            failures=0 if moved else endpoint.failures,
            open_until_ms=None if moved else endpoint.open_until_ms,
            updated_at=now,
        )
    await uow.alerts.save_endpoint(endpoint)
    return _view(endpoint, policy, revealed)


async def get_endpoint(
    uow: MetadataUnit, policy: AlertPolicy, project_id: str, environment: str
) -> EndpointView:
    endpoint = await uow.alerts.endpoint(project_id, environment)
    if endpoint is None:
        raise AlertEndpointNotFound(f"{NO_ENDPOINT}; set one with PUT /v1/alerts/endpoint.")
    return _view(endpoint, policy)


async def delete_endpoint(uow: MetadataUnit, project_id: str, environment: str) -> None:
    if not await uow.alerts.remove_endpoint(project_id, environment):
        raise AlertEndpointNotFound(f"{NO_ENDPOINT}.")
