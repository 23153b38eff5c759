"""Alert webhooks: a project's endpoint, the outbox of events, and the dispatcher that signs and sends them.

- **Endpoint**: one per project, an http(s) URL and a signing secret (given, or generated and shown once).
  In production the URL may not resolve to a loopback, private, link-local or otherwise internal address
  (SSRF), unless its host is in ``alert_allowed_hosts``; checked when it is set and again before every
  delivery (DNS can change), resolving off the event loop. Redirects are not followed.
- **Outbox**: ``enqueue`` writes the event in the caller's transaction (the one that moved a DLQ past its
  threshold), so an alert exists exactly when what raised it committed, and no restart loses it.
- **Dispatcher**: one task per server process claims due events (``SKIP LOCKED`` on Postgres, so several
  processes never send one event at once), POSTs them signed
  ``QueueCore-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``, records every attempt,
  retries failures with exponential backoff and jitter up to ``alert_max_attempts``, and keeps a circuit
  breaker per endpoint in the metadata store: open after ``alert_breaker_threshold`` failures in a row,
  half-open after ``alert_breaker_cooldown_seconds`` (one probe goes), closed by a success. Events wait
  while the breaker is open; they are not dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import random
import secrets
import socket
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from app.broker.errors import CODED_ERRORS, AlertEndpointNotFound, InvalidRequest
from app.broker.topics import decode_cursor, encode_cursor
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.kit.ids import new_id
from app.settings import Environment, Settings
from app.stores.metadata.alert_repositories import AlertRepository, Claimed
from app.stores.metadata.database import MetadataStore
from app.stores.metadata.models import AlertEndpoint

logger = logging.getLogger("queuecore.alerts")

SIGNATURE_HEADER = "QueueCore-Signature"
USER_AGENT = "QueueCore-Webhooks/1"
_BASE62 = string.ascii_letters + string.digits
_CLAIM = 20
_CLAIM_LEASE_MS = 60_000


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``QueueCore-Signature`` header value of ``body`` sent at ``timestamp`` (unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def new_secret() -> str:
    return "whsec_" + "".join(secrets.choice(_BASE62) for _ in range(32))


# SSRF --------------------------------------------------------------------------------------------


def _allowed(host: str, addresses: list[str], allow: list[str]) -> bool:
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


def _internal(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


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


async def check_url(settings: Settings, url: Any) -> Destination:
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
    if settings.environment is not Environment.production:
        return Destination(url)
    try:
        addresses = await _resolve(host, port)
    except (OSError, ValueError):
        raise InvalidRequest.field("url", f"the host '{host}' does not resolve") from None
    if not addresses:
        raise InvalidRequest.field("url", f"the host '{host}' does not resolve")
    if not _allowed(host, addresses, settings.alert_allowed_hosts):
        internal = [a for a in addresses if _internal(a)]
        if internal:
            raise BlockedUrl.field(
                "url",
                f"'{host}' resolves to an internal address ({internal[0]}); alerts go to public hosts only",
            )
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


def _view(endpoint: AlertEndpoint, settings: Settings, secret: str | None = None) -> EndpointView:
    return EndpointView(
        endpoint.url,
        settings.sealer().open(endpoint.secret)[-4:],
        breaker_state(endpoint.failures, endpoint.open_until_ms, settings.alert_breaker_threshold, now_ms()),
        isoformat_ms(endpoint.created_at),
        isoformat_ms(endpoint.updated_at),
        secret,
    )


_NO_ENDPOINT = "This environment has no alert endpoint"


async def set_endpoint(
    session: AsyncSession, settings: Settings, project_id: str, environment: str, url: Any, secret: Any = None
) -> EndpointView:
    """Create or replace the environment's endpoint. Without ``secret``, a new one is generated on
    creation (and answered once); an update without it keeps the current one. A new URL resets the
    breaker."""
    await check_url(settings, url)
    if secret is not None and (not isinstance(secret, str) or not 16 <= len(secret) <= 255):
        raise InvalidRequest.field("secret", "expected a string of 16 to 255 characters")
    repo = AlertRepository.from_session(session)
    endpoint = await repo.endpoint(project_id, environment)
    sealer = settings.sealer()
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
    return _view(endpoint, settings, revealed)


async def get_endpoint(
    session: AsyncSession, settings: Settings, project_id: str, environment: str
) -> EndpointView:
    endpoint = await AlertRepository.from_session(session).endpoint(project_id, environment)
    if endpoint is None:
        raise AlertEndpointNotFound(f"{_NO_ENDPOINT}; set one with PUT /v1/alerts/endpoint.")
    return _view(endpoint, settings)


async def delete_endpoint(session: AsyncSession, project_id: str, environment: str) -> None:
    if not await AlertRepository.from_session(session).remove_endpoint(project_id, environment):
        raise AlertEndpointNotFound(f"{_NO_ENDPOINT}.")


# the outbox --------------------------------------------------------------------------------------


async def enqueue(
    session: AsyncSession, *, project_id: str, environment: str, event_type: str, data: dict[str, Any]
) -> str:
    """Write an event to the outbox in the caller's unit of work; its id. An environment without an
    endpoint gets no event (nothing could receive it; "" is answered)."""
    repo = AlertRepository.from_session(session)
    if await repo.endpoint(project_id, environment) is None:
        return ""
    event_id = new_id("evt")
    now = now_ms()
    body = orjson.dumps(
        {
            "id": event_id,
            "type": event_type,
            "createdAt": isoformat_ms(now),
            "projectId": project_id,
            "environment": environment,
            "data": data,
        }
    )
    await repo.add_event(
        {
            "id": event_id,
            "project_id": project_id,
            "environment": environment,
            "type": event_type,
            "body": body.decode(),
            "status": "pending",
            "attempts": 0,
            "next_attempt_ms": now,
            "claimed_until_ms": 0,
            "created_at": utcnow(),
        }
    )
    return event_id


async def send_test_event(session: AsyncSession, project_id: str, environment: str) -> str:
    """Queue a ``test`` event for the environment's endpoint."""
    if await AlertRepository.from_session(session).endpoint(project_id, environment) is None:
        raise AlertEndpointNotFound(f"{_NO_ENDPOINT}; set one with PUT /v1/alerts/endpoint.")
    return await enqueue(
        session,
        project_id=project_id,
        environment=environment,
        event_type="test",
        data={"message": "This is a test event from QueueCore."},
    )


@dataclass(frozen=True, slots=True)
class AttemptPage:
    entries: list[dict[str, Any]]
    next_cursor: str | None


async def deliveries(
    session: AsyncSession, project_id: str, environment: str, *, limit: int = 50, cursor: str | None = None
) -> AttemptPage:
    """Every delivery attempt of the environment's alerts, newest first."""
    if not 1 <= limit <= 1000:
        raise InvalidRequest.field("limit", "must be between 1 and 1000")
    before = decode_cursor(cursor) if cursor else None
    repo = AlertRepository.from_session(session)
    rows = list(await repo.attempts_page(project_id, environment, before, limit + 1))
    more = len(rows) > limit
    rows = rows[:limit]
    entries = [
        {
            "id": r.id,
            "eventId": r.event_id,
            "eventType": r.event_type,
            "attempt": r.attempt,
            "ok": r.ok,
            "statusCode": r.status_code,
            "error": r.error,
            "durationMs": r.duration_ms,
            "at": isoformat_ms(r.at),
        }
        for r in rows
    ]
    return AttemptPage(entries, encode_cursor(rows[-1].id) if more and rows else None)


# the dispatcher ----------------------------------------------------------------------------------


def backoff_ms(settings: Settings, attempts_made: int, rng: Callable[[], float] = random.random) -> int:
    """Wait after the ``attempts_made``-th failure: base × 2^(n−1), ±20 % jitter, capped."""
    base = settings.alert_backoff_base_seconds * 1000 * float(1 << min(attempts_made - 1, 30))
    capped = min(base, settings.alert_backoff_max_seconds * 1000)
    return max(1, round(capped * (0.8 + 0.4 * rng())))


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    status_code: int | None
    error: str | None
    duration_ms: int


class AlertDispatcher:
    """Sends due outbox events; one per server process (see the module docstring)."""

    def __init__(
        self,
        metadata: MetadataStore,
        settings: Settings,
        *,
        clock: Callable[[], int] = now_ms,
        unix_time: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._metadata = metadata
        self._settings = settings
        self._sealer = settings.sealer()
        self._clock = clock
        self._unix_time = unix_time
        self._http = httpx.AsyncClient(
            timeout=settings.alert_timeout_seconds, follow_redirects=False, transport=transport
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run_forever(), name="alert-dispatcher")

    def wake(self) -> None:
        """Look at the outbox now (after a commit that queued an event)."""
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._sending):  # unrecorded attempts are retried once their claim runs out
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)
        await self._http.aclose()

    async def reseal(self) -> int:
        """Seal under the current key every signing secret kept in clear (from before sealing) or under
        the previous key (a rotation); how many were."""
        async with self._metadata.session() as session:
            repo = AlertRepository.from_session(session)
            done = 0
            for project_id, environment, stored in await repo.secrets():
                if self._sealer.stale(stored):
                    fresh = self._sealer.seal(self._sealer.open(stored))
                    await repo.replace_secret(project_id, environment, stored, fresh)
                    done += 1
        if done:
            logger.info("alert signing secrets sealed under the current key", extra={"count": done})
        return done

    async def _run_forever(self) -> None:
        try:
            await self.reseal()
        except Exception:  # a secret no key opens is reported; delivery of the others goes on
            logger.exception("alert signing secrets could not all be sealed again")
        while True:
            self._wake.clear()
            try:
                # Sends run on as tasks: an endpoint that hangs until the timeout holds up no other.
                sent = await self.run_once(wait=False)
            except CODED_ERRORS as error:  # the metadata store is down: try again shortly
                logger.warning("alert dispatcher paused: %s", error.code)
                sent = 0
            except Exception:  # never let the loop die
                logger.exception("alert dispatcher pass failed")
                sent = 0
            if sent:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._settings.alert_poll_seconds)

    async def run_once(self, *, wait: bool = True) -> int:
        """One pass: claim what is due and send it, each event recording its own outcome; the number of
        attempts started. With ``wait`` (tests), returns once they are all recorded."""
        settings = self._settings
        now = self._clock()
        async with self._metadata.session(readonly=True) as session:
            if not await AlertRepository.from_session(session).any_due(now):
                return 0
        async with self._metadata.session() as session:
            repo = AlertRepository.from_session(session)
            claimed = await repo.claim_due(now, _CLAIM_LEASE_MS, _CLAIM)
            waiting: list[str] = []
            sending: list[Claimed] = []
            probing: set[tuple[str, str]] = set()  # endpoints (project, environment) probed this pass
            for event in claimed:
                state = breaker_state(
                    event.failures, event.open_until_ms, settings.alert_breaker_threshold, now
                )
                if event.url is None:
                    sending.append(event)  # settled below as failed: nowhere to send
                elif state == "open" or (
                    state == "half-open" and (event.project_id, event.environment) in probing
                ):
                    waiting.append(event.id)
                else:
                    if state == "half-open":
                        probing.add((event.project_id, event.environment))
                    sending.append(event)
            cooldown = round(settings.alert_breaker_cooldown_seconds * 1000)
            # The half-open probe holds the breaker open meanwhile: one probe per endpoint at a time.
            await repo.hold_breaker(sorted(probing), now + cooldown)
            await repo.release(waiting, now + min(cooldown, 1000))
        if not sending:
            return 0
        tasks = [asyncio.ensure_future(self._attempt(event)) for event in sending]
        self._sending.update(tasks)
        for task in tasks:
            task.add_done_callback(self._sending.discard)
        if wait:
            await asyncio.gather(*tasks)
        return len(sending)

    async def _attempt(self, event: Claimed) -> None:
        """Send one event and record the outcome (its claim keeps other passes off it meanwhile)."""
        try:
            outcome = await self._deliver(event)
            async with self._metadata.session() as session:
                await self._record(AlertRepository.from_session(session), event, outcome, self._clock())
        except Exception:  # the claim runs out and the event is tried again
            logger.exception("alert %s: attempt not recorded", event.id)

    async def _deliver(self, event: Claimed) -> Outcome:
        started = time.monotonic()

        def took() -> int:
            return round((time.monotonic() - started) * 1000)

        if event.url is None or event.secret is None:
            return Outcome(False, None, "no alert endpoint", 0)
        try:
            destination = await check_url(self._settings, event.url)
        except InvalidRequest as error:
            return Outcome(False, None, error.message[:500], took())
        body = event.body.encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "QueueCore-Event-Id": event.id,
            SIGNATURE_HEADER: sign(self._sealer.open(event.secret), int(self._unix_time()), body),
        }
        extensions: dict[str, Any] = {}
        if destination.host_header:
            headers["Host"] = destination.host_header
        if destination.sni_hostname:
            extensions["sni_hostname"] = destination.sni_hostname
        request = self._http.build_request(
            "POST", destination.url, content=body, headers=headers, extensions=extensions
        )
        try:
            async with asyncio.timeout(self._settings.alert_timeout_seconds):
                # Streamed and never read: the answer's body is of no use, whatever its size.
                response = await self._http.send(request, stream=True)
                await response.aclose()
        except TimeoutError:
            return Outcome(False, None, f"timed out after {self._settings.alert_timeout_seconds:g} s", took())
        except httpx.HTTPError as error:
            return Outcome(
                False, None, f"{type(error).__name__}: {error}"[:500] or "connection failed", took()
            )
        ok = 200 <= response.status_code < 300
        return Outcome(ok, response.status_code, None if ok else f"HTTP {response.status_code}", took())

    async def _record(self, repo: AlertRepository, event: Claimed, outcome: Outcome, now: int) -> None:
        settings = self._settings
        made = event.attempts + 1
        await repo.add_attempt(
            {
                "id": f"att_{now:012x}{secrets.token_hex(5)}",
                "project_id": event.project_id,
                "environment": event.environment,
                "event_id": event.id,
                "event_type": event.type,
                "attempt": made,
                "ok": outcome.ok,
                "status_code": outcome.status_code,
                "error": outcome.error,
                "duration_ms": outcome.duration_ms,
                "at": utcnow(),
            }
        )
        if outcome.ok:
            await repo.settle_event(event.id, "delivered", made, now)
        elif event.url is None or made >= settings.alert_max_attempts:
            await repo.settle_event(event.id, "failed", made, now)
            logger.warning("alert %s given up after %d attempts", event.id, made)
        else:
            await repo.settle_event(event.id, "pending", made, now + backoff_ms(settings, made))
        if event.url is not None:
            await repo.breaker_outcome(
                event.project_id,
                event.environment,
                outcome.ok,
                settings.alert_breaker_threshold,
                now + round(settings.alert_breaker_cooldown_seconds * 1000),
            )
