"""A project environment's alert endpoint: an http(s) URL and a signing secret, and the SSRF rule.

The secret is given, or generated and answered once; it is kept sealed (``AlertPolicy.sealer``). Under
the SSRF rule (``AlertPolicy.block_internal``, production) the URL may not resolve to a loopback,
private, link-local or otherwise internal address unless its host is in ``allowed_hosts``; checked when
it is set and again before every delivery (DNS can change), resolving off the event loop. A delivery
connects to the address the check approved (no rebinding in between). Redirects are not followed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import socket
import string
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy.ext.asyncio import AsyncSession

from app.broker.alerts.policy import AlertPolicy
from app.broker.errors import AlertEndpointNotFound, InvalidRequest
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.stores.metadata.alert_repositories import AlertRepository
from app.stores.metadata.models import AlertEndpoint

_BASE62 = string.ascii_letters + string.digits


def new_secret() -> str:
    return "whsec_" + "".join(secrets.choice(_BASE62) for _ in range(32))


# SSRF --------------------------------------------------------------------------------------------


def _allowed(host: str, addresses: list[str], allow: tuple[str, ...]) -> bool:
    for entry in allow:
        if entry.lower() == host.lower():
            return True
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if any(ipaddress.ip_address(a) in network for a in addresses):
            return True
    return False


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries and may be routed to: mapped (``::ffff:a.b.c.d``),
    6to4 (``2002::/16``), Teredo (its server and client) and NAT64 (``64:ff9b::/96``)."""
    found = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    if ip in _NAT64:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def _internal_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


def _internal(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded:  # judged by where it leads: a 6to4 address of 127.0.0.1 is the loopback
            return any(_internal_ip(v4) for v4 in embedded) or (
                ip.ipv4_mapped is None and _internal_ip(ip) and not ip.sixtofour and not ip.teredo
            )
    return _internal_ip(ip)


async def _resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


class BlockedUrl(InvalidRequest):
    """An alert URL the SSRF rule refuses."""


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a delivery connects: the URL as set, or (production) pinned to the address the SSRF check
    approved, with the original host in the ``Host`` header and for TLS (SNI)."""

    url: str
    host_header: str | None = None
    sni_hostname: str | None = None


async def check_url(policy: AlertPolicy, url: Any) -> Destination:
    """Where ``url`` may receive alerts; else ``INVALID_REQUEST`` saying why."""
    if not isinstance(url, str) or not url or len(url) > 2048:
        raise InvalidRequest.field("url", "expected an http(s) URL of at most 2048 characters")
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidRequest.field("url", "not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest.field("url", "expected an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise InvalidRequest.field("url", "credentials in the URL are not allowed; sign with the secret")
    host = parts.hostname.rstrip(".")
    try:  # the HTTP client must read the very host this check reads (no parser differential)
        same_host = httpx.URL(url).host.rstrip(".").lower() == host.lower()
    except (httpx.InvalidURL, ValueError):
        same_host = False
    if not same_host:
        raise InvalidRequest.field("url", "not a valid URL")
    if not policy.block_internal:
        return Destination(url)
    try:
        addresses = await _resolve(host, port)
    except (OSError, ValueError):
        raise InvalidRequest.field("url", f"the host '{host}' does not resolve") from None
    if not addresses:
        raise InvalidRequest.field("url", f"the host '{host}' does not resolve")
    if not _allowed(host, addresses, policy.allowed_hosts) and any(_internal(a) for a in addresses):
        # Which address the host resolved to is not said: the answer is no DNS oracle for callers.
        raise BlockedUrl.field("url", "the address is not allowed; alerts go to public hosts only")
    # Connect to the address just checked: a second DNS answer (rebinding) cannot differ from it.
    pinned = ipaddress.ip_address(addresses[0].split("%", 1)[0])
    literal = f"[{pinned}]" if pinned.version == 6 else str(pinned)
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    return Destination(
        urlunsplit(parts._replace(netloc=netloc)),
        host_header=parts.netloc.rsplit("@", 1)[-1],
        sni_hostname=host if parts.scheme == "https" else None,
    )


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


def _view(endpoint: AlertEndpoint, policy: AlertPolicy, secret: str | None = None) -> EndpointView:
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
    session: AsyncSession,
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
    repo = AlertRepository.from_session(session)
    endpoint = await repo.endpoint(project_id, environment)
    sealer = policy.sealer
    now = utcnow()
    revealed = None
    if endpoint is None:
        revealed = new_secret() if secret is None else None
        chosen = str(secret) if revealed is None else revealed
        endpoint = AlertEndpoint(
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
        if url != endpoint.url:
            endpoint.failures, endpoint.open_until_ms = 0, None
        endpoint.url = url
        if secret is not None:
            endpoint.secret = sealer.seal(secret)
        endpoint.updated_at = now
    await repo.save_endpoint(endpoint)
    return _view(endpoint, policy, revealed)


async def get_endpoint(
    session: AsyncSession, policy: AlertPolicy, project_id: str, environment: str
) -> EndpointView:
    endpoint = await AlertRepository.from_session(session).endpoint(project_id, environment)
    if endpoint is None:
        raise AlertEndpointNotFound(f"{NO_ENDPOINT}; set one with PUT /v1/alerts/endpoint.")
    return _view(endpoint, policy)


async def delete_endpoint(session: AsyncSession, project_id: str, environment: str) -> None:
    if not await AlertRepository.from_session(session).remove_endpoint(project_id, environment):
        raise AlertEndpointNotFound(f"{NO_ENDPOINT}.")
