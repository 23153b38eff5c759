"""The alert dispatcher: one task per server process sends the outbox's due events.

It claims due events (``SKIP LOCKED`` on Postgres, so several processes never send one event at once),
POSTs them signed ``QueueCore-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`` to the
address the SSRF rule approved, records every attempt, retries failures with exponential backoff and
jitter up to ``AlertPolicy.max_attempts``, and keeps a circuit breaker per endpoint in the metadata
store: open after ``breaker_threshold`` failures in a row, half-open after ``breaker_cooldown_seconds``
(one probe goes), closed by a success. Events wait while the breaker is open; they are not dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from app.broker.alerts.endpoint import breaker_state, check_url
from app.broker.alerts.policy import AlertPolicy
from app.broker.errors import CODED_ERRORS, InvalidRequest
from app.kit.clock import now_ms, utcnow
from app.kit.tasks import cancel_and_wait
from app.stores.metadata.protocol import AlertStore, AttemptRow, MetadataStore, OutboxClaim

logger = logging.getLogger("queuecore.alerts")

SIGNATURE_HEADER = "QueueCore-Signature"
USER_AGENT = "QueueCore-Webhooks/1"
_CLAIM = 20
_CLAIM_LEASE_MS = 60_000


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``QueueCore-Signature`` header value of ``body`` sent at ``timestamp`` (unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def backoff_ms(policy: AlertPolicy, attempts_made: int, rng: Callable[[], float] = random.random) -> int:
    """Wait after the ``attempts_made``-th failure: base × 2^(n−1), ±20 % jitter, capped."""
    base = policy.backoff_base_seconds * 1000 * float(1 << min(attempts_made - 1, 30))
    capped = min(base, policy.backoff_max_seconds * 1000)
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
        policy: AlertPolicy,
        *,
        clock: Callable[[], int] = now_ms,
        unix_time: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._metadata = metadata
        self.policy = policy  # the edge sets and shows endpoints by the same rules
        self._sealer = policy.sealer
        self._clock = clock
        self._unix_time = unix_time
        self._http = httpx.AsyncClient(
            timeout=policy.timeout_seconds, follow_redirects=False, transport=transport
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
            await cancel_and_wait(self._task)
        for task in list(self._sending):  # unrecorded attempts are retried once their claim runs out
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)
        await self._http.aclose()

    async def reseal(self) -> int:
        """Seal under the current key every signing secret kept in clear (from before sealing) or under
        the previous key (a rotation); how many were."""
        async with self._metadata.unit() as uow:
            done = 0
            for stored in await uow.alerts.secrets():
                if self._sealer.stale(stored.secret):
                    fresh = self._sealer.seal(self._sealer.open(stored.secret))
                    await uow.alerts.replace_secret(
                        stored.project_id, stored.environment, stored.secret, fresh
                    )
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
                await asyncio.wait_for(self._wake.wait(), self.policy.poll_seconds)

    async def run_once(self, *, wait: bool = True) -> int:
        """One pass: claim what is due and send it, each event recording its own outcome; the number of
        attempts started. With ``wait`` (tests), returns once they are all recorded."""
        policy = self.policy
        now = self._clock()
        async with self._metadata.unit(readonly=True) as uow:
            if not await uow.alerts.any_due(now):
                return 0
        async with self._metadata.unit() as uow:
            claimed = await uow.alerts.claim_due(now, _CLAIM_LEASE_MS, _CLAIM)
            waiting: list[str] = []
            sending: list[OutboxClaim] = []
            probing: set[tuple[str, str]] = set()  # endpoints (project, environment) probed this pass
            for event in claimed:
                state = breaker_state(event.failures, event.open_until_ms, policy.breaker_threshold, now)
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
            cooldown = round(policy.breaker_cooldown_seconds * 1000)
            # The half-open probe holds the breaker open meanwhile: one probe per endpoint at a time.
            await uow.alerts.hold_breaker(sorted(probing), now + cooldown)
            await uow.alerts.release(waiting, now + min(cooldown, 1000))
        if not sending:
            return 0
        tasks = [asyncio.ensure_future(self._attempt(event)) for event in sending]
        self._sending.update(tasks)
        for task in tasks:
            task.add_done_callback(self._sending.discard)
        if wait:
            await asyncio.gather(*tasks)
        return len(sending)

    async def _attempt(self, event: OutboxClaim) -> None:
        """Send one event and record the outcome (its claim keeps other passes off it meanwhile)."""
        try:
            outcome = await self._deliver(event)
            async with self._metadata.unit() as uow:
                await self._record(uow.alerts, event, outcome, self._clock())
        except Exception:  # the claim runs out and the event is tried again
            logger.exception("alert %s: attempt not recorded", event.id)

    async def _deliver(self, event: OutboxClaim) -> Outcome:
        started = time.monotonic()

        def took() -> int:
            return round((time.monotonic() - started) * 1000)

        if event.url is None or event.secret is None:
            return Outcome(False, None, "no alert endpoint", 0)
        try:
            destination = await check_url(self.policy, event.url)
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
            async with asyncio.timeout(self.policy.timeout_seconds):
                # Streamed and never read: the answer's body is of no use, whatever its size.
                response = await self._http.send(request, stream=True)
                await response.aclose()
        except TimeoutError:
            return Outcome(False, None, f"timed out after {self.policy.timeout_seconds:g} s", took())
        except httpx.HTTPError as error:
            return Outcome(
                False, None, f"{type(error).__name__}: {error}"[:500] or "connection failed", took()
            )
        ok = 200 <= response.status_code < 300
        return Outcome(ok, response.status_code, None if ok else f"HTTP {response.status_code}", took())

    async def _record(self, store: AlertStore, event: OutboxClaim, outcome: Outcome, now: int) -> None:
        policy = self.policy
        made = event.attempts + 1
        await store.add_attempt(
            event.project_id,
            event.environment,
            AttemptRow(
                id=f"att_{now:012x}{secrets.token_hex(5)}",
                event_id=event.id,
                event_type=event.type,
                attempt=made,
                ok=outcome.ok,
                status_code=outcome.status_code,
                error=outcome.error,
                duration_ms=outcome.duration_ms,
                at=utcnow(),
            ),
        )
        if outcome.ok:
            await store.settle_event(event.id, "delivered", made, now)
        elif event.url is None or made >= policy.max_attempts:
            await store.settle_event(event.id, "failed", made, now)
            logger.warning("alert %s given up after %d attempts", event.id, made)
        else:
            await store.settle_event(event.id, "pending", made, now + backoff_ms(policy, made))
        if event.url is not None:
            await store.breaker_outcome(
                event.project_id,
                event.environment,
                outcome.ok,
                policy.breaker_threshold,
                now + round(policy.breaker_cooldown_seconds * 1000),
            )
