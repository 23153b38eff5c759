"""Outbound URLs the service calls on a customer's behalf (alert webhooks, push groups) and the SSRF rule.

Every mode: an ``http(s)://`` URL with a host and no user info, read the same way by this check and by
the HTTP client. Under the SSRF rule (``block_internal``, production) the host may not resolve to a
loopback, private, link-local or otherwise internal address unless it is in ``allowed_hosts``; checked
when a URL is set and again when a delivery connects (DNS can change: rebinding), resolving off the event
loop: ``check_public`` is that connect-time check for push deliveries (``delivery/url_client.py``, which
connects to the very address approved; TLS still verifies the URL's host name).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from app.broker.errors import InvalidRequest

MAX_URL = 2048


def _allowed(host: str, addresses: list[str], allow: tuple[str, ...]) -> bool:
    for entry in allow:
        if entry.lower() == host.lower():
            return True
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if any(ipaddress.ip_address(a.split("%", 1)[0]) in network for a in addresses):
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


def internal(address: str) -> bool:
    """Whether an address is one the SSRF rule keeps deliveries away from."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded:  # judged by where it leads: a 6to4 address of 127.0.0.1 is the loopback
            return any(_internal_ip(v4) for v4 in embedded) or (
                ip.ipv4_mapped is None and _internal_ip(ip) and not ip.sixtofour and not ip.teredo
            )
    return _internal_ip(ip)


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, looked up off the event loop."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


class BlockedUrl(InvalidRequest):
    """A URL the SSRF rule refuses."""


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a delivery connects: the URL as set, or (production) pinned to the address the SSRF check
    approved, with the original host in the ``Host`` header and for TLS (SNI)."""

    url: str
    host_header: str | None = None
    sni_hostname: str | None = None


@dataclass(frozen=True, slots=True)
class UrlRule:
    """How one kind of outbound URL is checked: the field named in errors, what it is for (said in the
    refusal), and the SSRF rule's switches."""

    field: str
    purpose: str
    block_internal: bool
    allowed_hosts: tuple[str, ...] = ()
    https_only: bool = False


def parse(rule: UrlRule, url: Any) -> tuple[Any, str, int]:
    """The checks of every mode; the URL's parts, its host and port. ``INVALID_REQUEST`` on ``rule.field``."""
    field = rule.field
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise InvalidRequest.field(field, f"expected an http(s) URL of at most {MAX_URL} characters")
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidRequest.field(field, "not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest.field(field, "expected an http:// or https:// URL with a host")
    if parts.username or parts.password or "@" in parts.netloc:
        raise InvalidRequest.field(field, "credentials in the URL are not allowed; sign with the secret")
    host = parts.hostname.rstrip(".")
    try:  # the HTTP client must read the very host this check reads (no parser differential)
        same_host = httpx.URL(url).host.rstrip(".").lower() == host.lower()
    except (httpx.InvalidURL, ValueError):
        same_host = False
    if not same_host:
        raise InvalidRequest.field(field, "not a valid URL")
    if rule.https_only and rule.block_internal and parts.scheme != "https":
        raise InvalidRequest.field(field, "expected an https:// URL")
    return parts, host, port


async def check_public(rule: UrlRule, host: str, port: int) -> list[str]:
    """The addresses of ``host`` when the SSRF rule lets deliveries go there; else ``INVALID_REQUEST``."""
    try:
        addresses = await resolve(host, port)
    except (OSError, ValueError):
        raise InvalidRequest.field(rule.field, f"the host '{host}' does not resolve") from None
    if not addresses:
        raise InvalidRequest.field(rule.field, f"the host '{host}' does not resolve")
    if not _allowed(host, addresses, rule.allowed_hosts) and any(internal(a) for a in addresses):
        # Which address the host resolved to is not said: the answer is no DNS oracle for callers.
        raise BlockedUrl.field(
            rule.field, f"the address is not allowed; {rule.purpose} go to public hosts only"
        )
    return addresses


async def check_url(rule: UrlRule, url: Any) -> Destination:
    """Where ``url`` may be called; else ``INVALID_REQUEST`` on ``rule.field`` saying why."""
    parts, host, port = parse(rule, url)
    if not rule.block_internal:
        return Destination(url)
    addresses = await check_public(rule, host, port)
    # Connect to the address just checked: a second DNS answer (rebinding) cannot differ from it.
    pinned = ipaddress.ip_address(addresses[0].split("%", 1)[0])
    literal = f"[{pinned}]" if pinned.version == 6 else str(pinned)
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    return Destination(
        urlunsplit(parts._replace(netloc=netloc)),
        host_header=parts.netloc.rsplit("@", 1)[-1],
        sni_hostname=host if parts.scheme == "https" else None,
    )
