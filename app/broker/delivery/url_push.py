"""Push to URLs: one worker per push group on each API process, a server-side pull member of the group.

The worker joins the group like a pull consumer (``membership.join``, member id ``csr_push…``) and takes
messages with the pull path's ``leases.poll_once``: ownership, fencing, retries and their backoff, the
DLQ, and every gate the pull path's poll applies (delays, filters, pause, flow control) hold for push
groups unchanged. Each message is POSTed to the group's URL (``Delivery``); a 2xx is an ack (acks of many
deliveries go in one call), anything else a nack: a failed attempt under the group's retry and DLQ rules,
after the ``Retry-After`` of a 429 or 503 when one came (≤ 1 day). A worker killed with its process leaves
its leases to time out; after ``sessionTimeout`` the group's other workers own its partitions and
deliver everything not acked.

Flow: at most ``maxConcurrency`` POSTs in flight per process; ``rate`` shared by the processes in
proportion to the partitions each owns; ``ordered``: one in flight per partition, in offset order. A
breaker per endpoint (``Breaker``) stops taking messages after failures in a row, for a while that doubles
with each reopening (capped), then lets one probe through: a failing endpoint is backed off as a whole,
and its messages wait unleased instead of spending their retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import secrets
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import orjson

from app.broker.delivery import leases, membership
from app.broker.delivery.membership import MemberRef
from app.broker.delivery.url_client import DeliveryClient, DeliveryError
from app.broker.errors import CODED_ERRORS, GroupNotFound, MemberNotFound, StaleGeneration
from app.broker.push_groups import WORKER_PREFIX, PushPolicy
from app.broker.topics import TopicRef
from app.kit import standard_webhooks
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import MetadataStore, PushEndpointRow, PushTarget

logger = logging.getLogger("queuecore.push")

USER_AGENT = "QueueCore-Push/1"
MAX_RETRY_AFTER_MS = 86_400_000  # a day
ANSWER_BYTES = 512  # of a failed answer's body, kept as the attempt's error; the rest is not read
_MAX_POLL = 100
_LEASE_MARGIN_MS = 2000
_MAX_PAUSE_S = 30.0
_ALPHANUMERIC = string.ascii_letters + string.digits


def worker_id() -> str:
    """A fresh URL worker member id (``csr_push`` + 20 random characters)."""
    return WORKER_PREFIX + "".join(secrets.choice(_ALPHANUMERIC) for _ in range(20))


# one delivery ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one POST came to: ``status`` None when no answer came; ``retry_after_ms`` from a 429/503."""

    ok: bool
    status: int | None
    latency_ms: int
    error: str | None = None
    retry_after_ms: int | None = None

    @property
    def endpoint_failed(self) -> bool:
        """Whether this counts against the endpoint (its breaker), not just against the message."""
        return not self.ok and (self.status is None or self.status >= 500 or self.status in (408, 429))


def retry_after_ms(value: str | None, now: float) -> int | None:
    """A ``Retry-After`` (seconds or an HTTP date) in milliseconds, capped at a day; None if unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(int(value) * 1000, MAX_RETRY_AFTER_MS)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(max(0, round((when.timestamp() - now) * 1000)), MAX_RETRY_AFTER_MS)


# What a CloudEvents HTTP header value may hold as it is (binding 3.1.3.2): printable ASCII but space,
# '"' and '%'; everything else is percent-encoded (UTF-8), as a key may hold anything.
_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"%')


def _header_value(value: str) -> str:
    return quote(value, safe=_HEADER_SAFE)


def request_of(
    message: dict[str, Any], target: PushTarget, keys: list[bytes], timestamp: int
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one delivery (PRODUCT.md "Push to URLs"): CloudEvents binary mode (or
    structured), ``queuecore-attempt``, and the Standard Webhooks signature by every secret in force."""
    message_id = message["id"]
    ce = {
        "specversion": "1.0",
        "id": message_id,
        "source": f"/v1/topics/{message['topic']}",
        "type": "queuecore.message",
        "time": message["timestamp"],
        "subject": f"{message['partition']}/{message['offset']}",
    }
    if message["key"] is not None:
        ce["partitionkey"] = message["key"]
    binary = {name: _header_value(value) for name, value in ce.items()}
    headers = {"user-agent": USER_AGENT, "queuecore-attempt": str(message["attempt"])}
    if target.mode == "structured":
        body = orjson.dumps({**ce, "datacontenttype": "application/json", "data": message["data"]})
        headers["content-type"] = "application/cloudevents+json"
    else:
        body = orjson.dumps(message["data"])
        headers["content-type"] = "application/json"
        headers.update({f"ce-{name}": value for name, value in binary.items()})
    headers["webhook-id"] = message_id
    headers["webhook-timestamp"] = str(timestamp)
    headers["webhook-signature"] = standard_webhooks.header(keys, message_id, timestamp, body)
    return body, headers


async def post(
    client: DeliveryClient, url: str, body: bytes, headers: dict[str, str], timeout_s: float
) -> Outcome:
    """POST once; no redirects followed, at most ``ANSWER_BYTES`` of a failed answer kept."""
    started = time.monotonic()

    def took() -> int:
        return round((time.monotonic() - started) * 1000)

    try:
        async with asyncio.timeout(timeout_s):
            answer = await client.post(url, body, headers, ANSWER_BYTES)
    except TimeoutError:
        return Outcome(False, None, took(), f"timed out after {timeout_s:g} s")
    except DeliveryError as error:
        return Outcome(False, None, took(), str(error)[:500] or "connection failed")
    status = answer.status
    if 200 <= status < 300:
        return Outcome(True, status, took())
    text = answer.body.decode("utf-8", "replace").strip()
    wait = retry_after_ms(answer.headers.get("retry-after"), time.time()) if status in (429, 503) else None
    said = f"HTTP {status}" + (f": {text}" if text else "")
    return Outcome(False, status, took(), said[:500], wait)


async def send_test_event(
    client: DeliveryClient, policy: PushPolicy, endpoint: PushEndpointRow, topic: str, group: str
) -> Outcome:
    """POST a signed test event (``ce-type: queuecore.test``, no message behind it) to a push group's URL
    now, as a delivery would go; what came back. Nothing is recorded or retried."""
    event_id = "evt_test_" + secrets.token_hex(8)
    body = orjson.dumps({"test": True, "topic": topic, "group": group})
    keys = [standard_webhooks.key_of(policy.sealer.open(endpoint.secret))]
    if endpoint.previous_secret and (endpoint.previous_until_ms or 0) > now_ms():
        keys.append(standard_webhooks.key_of(policy.sealer.open(endpoint.previous_secret)))
    timestamp = int(time.time())
    headers = {
        "user-agent": USER_AGENT,
        "content-type": "application/json",
        "ce-specversion": "1.0",
        "ce-id": event_id,
        "ce-source": f"/v1/topics/{_header_value(topic)}",
        "ce-type": "queuecore.test",
        "ce-time": isoformat_ms(now_ms()),
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": standard_webhooks.header(keys, event_id, timestamp, body),
    }
    return await post(client, endpoint.url, body, headers, endpoint.timeout_ms / 1000)


# the breaker -------------------------------------------------------------------------------------


class Breaker:
    """A per-endpoint circuit breaker: ``threshold`` endpoint failures in a row open it for a cooldown
    that starts at 1 s and doubles with each reopening (up to ``max_ms``); then one probe may go
    (half-open), whose success closes it."""

    def __init__(self, threshold: int, max_ms: int, clock: Callable[[], int] = now_ms) -> None:
        self.threshold = threshold
        self.max_ms = max_ms
        self._clock = clock
        self.failures = 0
        self.open_until_ms: int | None = None
        self._cooldown_ms = 1000
        self.probing = False

    @property
    def state(self) -> str:
        if self.open_until_ms is None:
            return "closed"
        return "open" if self.open_until_ms > self._clock() else "half-open"

    def record(self, outcome: Outcome) -> bool:
        """Count an outcome; whether the state changed (worth writing down)."""
        before = (self.failures >= self.threshold, self.open_until_ms)
        if outcome.ok or not outcome.endpoint_failed:
            if outcome.ok:
                self.failures, self.open_until_ms, self._cooldown_ms = 0, None, 1000
        else:
            self.failures += 1
            if self.failures >= self.threshold and (self.open_until_ms is None or self.probing):
                self.open_until_ms = self._clock() + self._cooldown_ms
                self._cooldown_ms = min(self._cooldown_ms * 2, self.max_ms)
        self.probing = False
        return before != (self.failures >= self.threshold, self.open_until_ms)


class RateGate:
    """A token bucket of ``rate`` per second (None: no limit), one second of burst."""

    def __init__(self) -> None:
        self.rate: float | None = None
        self._tokens = 0.0
        self._at = time.monotonic()

    def set(self, rate: float | None) -> None:
        if rate != self.rate:
            self.rate, self._tokens, self._at = rate, min(self._tokens, rate or 0.0), time.monotonic()

    def available(self) -> int:
        if self.rate is None:
            return _MAX_POLL
        self._refill()
        return max(1, int(self._tokens))

    def _refill(self) -> None:
        assert self.rate is not None
        now = time.monotonic()
        self._tokens = min(max(self.rate, 1.0), self._tokens + (now - self._at) * self.rate)
        self._at = now

    async def take(self) -> None:
        while self.rate is not None:
            self._refill()
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await asyncio.sleep((1 - self._tokens) / self.rate)


# the worker --------------------------------------------------------------------------------------


Record = Callable[[str, str, int, Outcome, datetime], None]


class UrlWorker:
    """Delivers one push group's messages from this process (see the module docstring)."""

    def __init__(
        self,
        metadata: MetadataStore,
        log: LogEngine,
        policy: PushPolicy,
        http: DeliveryClient,
        record: Record,
        target: PushTarget,
        topic: TopicRef,
    ) -> None:
        self._metadata = metadata
        self._log = log
        self._policy = policy
        self._http = http
        self._record = record
        self.target = target
        self.topic = topic
        self._keys = self._open_keys(target)
        self.member_id = worker_id()
        self._member: MemberRef | None = None
        self._assignments: list[int] = []
        self._session_ms = 10_000
        self.breaker = Breaker(policy.breaker_threshold, round(policy.breaker_max_seconds * 1000))
        self._rate = RateGate()
        self._in_flight = 0
        self._freed = asyncio.Event()
        self._tails: dict[int, asyncio.Future[None]] = {}  # ordered: the last delivery per partition
        self._acks: list[str] = []
        self._acking = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._main: asyncio.Task[None] | None = None
        self._closing = False
        self._contact = 0.0  # when the last poll or heartbeat went out (monotonic)

    # lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._main = asyncio.create_task(self._run(), name=f"push-{self.target.group_id}")

    def update(self, target: PushTarget, topic: TopicRef) -> None:
        """A changed config (or topic): applies from the next delivery."""
        self.target, self.topic = target, topic
        self._keys = self._open_keys(target)
        self._update_rate()

    async def close(self) -> None:
        """Stop taking messages, let deliveries under way finish (up to their timeout), ack, and leave."""
        self._closing = True
        self._freed.set()
        if self._main is not None:
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._main
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=self.target.timeout_ms / 1000 + 1)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._flush_acks()
        if self._member is not None:
            with contextlib.suppress(Exception):
                await membership.leave(self._metadata, self.topic, self.target.group_name, self.member_id)

    def _open_keys(self, target: PushTarget) -> list[bytes]:
        sealer = self._policy.sealer
        keys = [standard_webhooks.key_of(sealer.open(target.secret))]
        if target.previous_secret and (target.previous_until_ms or 0) > now_ms():
            keys.append(standard_webhooks.key_of(sealer.open(target.previous_secret)))
        return keys

    def _update_rate(self) -> None:
        rate = self.target.rate
        if rate is not None and self.topic.partitions:
            # Each process delivers its share of the group's rate: the share of partitions it owns.
            rate = rate * max(1, len(self._assignments)) / self.topic.partitions
        self._rate.set(rate)

    # the loop -----------------------------------------------------------------------------------

    async def _join(self) -> None:
        joined = await membership.join(
            self._metadata,
            self._log,
            self.topic,
            self.target.group_name,
            member_id=self.member_id,
            start_from="latest",
            url_worker=True,
        )
        self._member = MemberRef(self.topic, self.target.group_name, joined.member_id, joined.generation)
        self._assignments = joined.assignments
        self._session_ms = joined.session_timeout_ms
        self._update_rate()
        if self._acks:
            self._acking.set()

    async def _run(self) -> None:
        acker = asyncio.create_task(self._ack_loop())
        pause = 0.0
        failing: str | None = None  # the code of the error every pass has met since the last good one
        try:
            while not self._closing:
                try:
                    if pause:
                        await asyncio.sleep(pause)
                    if self._member is None:
                        await self._join()
                    await self._pass()
                    pause, failing = 0.0, None
                except (StaleGeneration, MemberNotFound):
                    self._member = None  # join again with the same member id, at once
                    pause = 0.0
                except GroupNotFound:
                    pause = 1.0  # deleted: the manager stops this worker on its next look
                except CODED_ERRORS as error:
                    # Logged once per streak of one error, not at every retry. A log gone under a topic the
                    # metadata still lists (a deletion under way, or a log lost) does not come back soon:
                    # retried ever less often, up to _MAX_PAUSE_S; an outage is retried every second.
                    if error.code != failing:
                        logger.warning("push group %s: %s", self.target.group_id, error.code)
                        failing, pause = error.code, 0.0
                    lasting = error.code == "TOPIC_NOT_FOUND"
                    pause = min(_MAX_PAUSE_S, max(1.0, pause * 2)) if lasting else 1.0
                except asyncio.CancelledError:
                    raise
                except Exception:  # never let the loop die
                    logger.exception("push group %s: delivery pass failed", self.target.group_id)
                    pause = 1.0
        finally:
            acker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acker

    async def _pass(self) -> None:
        """Take what is due (as many as free slots, the rate and the breaker allow) and start its POSTs;
        with nothing to take, wait for data, a freed slot or the next lease deadline."""
        assert self._member is not None
        heartbeat_s = max(0.5, self._session_ms / 3000)
        state = self.breaker.state
        if state == "open":
            assert self.breaker.open_until_ms is not None
            wait = min(heartbeat_s, max(0.0, (self.breaker.open_until_ms - now_ms()) / 1000))
            await self._idle(wait)
            return
        free = self.target.max_concurrency - self._in_flight
        if state == "half-open":
            if self._in_flight or self.breaker.probing:
                await self._wait_freed(heartbeat_s)
                return
            free = 1
        # Poll for a quarter of the slots at least while POSTs are under way: a poll per freed slot would
        # be a metadata unit of work per message.
        elif free <= 0 or (self._in_flight and free < max(1, self.target.max_concurrency // 4)):
            await self._wait_freed(heartbeat_s)
            return
        wanted = min(free, _MAX_POLL, self._rate.available())
        wait_ms = round(heartbeat_s * 1000)
        polled = await leases.poll_once(self._metadata, self._log, self._member, wanted, wait_ms)
        self._contact = time.monotonic()
        if polled.messages:
            if state == "half-open":
                self.breaker.probing = True
            for raw in polled.messages:
                self._dispatch(orjson.loads(raw))
            return
        timeout = heartbeat_s
        if polled.next_deadline_ms is not None:
            timeout = min(timeout, max(0.0, (polled.next_deadline_ms - now_ms()) / 1000) + 0.005)
        await leases.wait_for_data(self._log, self.topic, polled.positions, timeout, self._freed_if_closing())

    def _freed_if_closing(self) -> asyncio.Event | None:
        return self._freed if self._closing else None

    async def _wait_freed(self, timeout: float) -> None:
        self._freed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._freed.wait(), timeout)
        await self._keep_alive(timeout)

    async def _idle(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        await self._keep_alive(seconds)

    async def _keep_alive(self, every: float) -> None:
        """A heartbeat when no poll went out for ``every`` seconds (all slots busy, the breaker open)."""
        if self._member is None or time.monotonic() - self._contact < every:
            return
        self._contact = time.monotonic()
        beat = await membership.heartbeat(self._metadata, self._member)
        self._assignments = beat.assignments
        self._update_rate()
        if beat.should_rejoin:
            await self._join()

    # deliveries ---------------------------------------------------------------------------------

    def _dispatch(self, message: dict[str, Any]) -> None:
        self._in_flight += 1
        previous = self._tails.get(message["partition"]) if self.target.ordered else None
        task = asyncio.create_task(self._deliver(message, previous))
        if self.target.ordered:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._tails[message["partition"]] = done

            def finished(_: asyncio.Task[None]) -> None:
                if not done.done():
                    done.set_result(None)

            task.add_done_callback(finished)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, message: dict[str, Any], after: asyncio.Future[None] | None) -> None:
        try:
            if after is not None:
                await after  # ordered: one in flight per partition
            await self._rate.take()
            target = self.target
            await self._hold_lease(message, target.timeout_ms)
            at = utcnow()
            body, headers = request_of(message, target, self._keys, int(time.time()))
            outcome = await post(self._http, target.url, body, headers, target.timeout_ms / 1000)
            self._record(target.group_id, message["id"], message["attempt"], outcome, at)
            if self.breaker.record(outcome):
                await self._write_breaker()
            if outcome.ok:
                self._acks.append(message["id"])
                self._acking.set()
            else:
                await self._nack(message["id"], outcome)
        except asyncio.CancelledError:
            raise
        except Exception:  # the lease times out and the message is delivered again
            logger.exception("push group %s: delivery of %s failed", self.target.group_id, message["id"])
        finally:
            self._in_flight -= 1
            if self.target.ordered:
                tail = self._tails.get(message["partition"])
                if tail is not None and tail.done():
                    self._tails.pop(message["partition"], None)
            self._freed.set()

    async def _hold_lease(self, message: dict[str, Any], timeout_ms: int) -> None:
        """Extend the message's ack deadline when the POST could outlast it (a wait behind the partition's
        earlier messages when ordered, the rate, or a timeout longer than the group's ackTimeout):
        otherwise the lease would fall due mid-delivery and the message go out twice."""
        member = self._member
        deadline_ms = round(datetime.fromisoformat(message["ackDeadline"]).timestamp() * 1000)
        if member is None or deadline_ms - now_ms() > timeout_ms + _LEASE_MARGIN_MS:
            return
        seconds = min(leases.MAX_EXTEND_SECONDS, max(1, -(-(timeout_ms + _LEASE_MARGIN_MS) // 1000)))
        with contextlib.suppress(StaleGeneration, MemberNotFound):
            await leases.extend(self._metadata, member, [message["id"]], seconds)

    async def _nack(self, message_id: str, outcome: Outcome) -> None:
        member = self._member
        if member is None:
            return  # rejoining: the lease falls due on its own
        reason = outcome.error or "push failed"
        with contextlib.suppress(StaleGeneration, MemberNotFound):
            await leases.nack(self._metadata, self._log, member, message_id, outcome.retry_after_ms, reason)

    async def _write_breaker(self) -> None:
        with contextlib.suppress(*CODED_ERRORS):
            async with self._metadata.unit() as uow:
                await uow.push.set_breaker(
                    self.target.group_id, self.breaker.failures, self.breaker.open_until_ms
                )

    async def _ack_loop(self) -> None:
        """Acks of finished deliveries, many in one call (one unit of work, durable when it returns)."""
        while True:
            await self._acking.wait()
            self._acking.clear()
            try:
                await self._flush_acks()
            except (StaleGeneration, MemberNotFound):
                self._member = None  # the ids stay queued; the main loop joins again
                await asyncio.sleep(0.05)
                self._acking.set()
            except CODED_ERRORS as error:
                logger.warning("push group %s: acks wait: %s", self.target.group_id, error.code)
                await asyncio.sleep(0.5)
                self._acking.set()

    async def _flush_acks(self) -> None:
        member = self._member
        if not self._acks or member is None:
            return
        ids, self._acks = self._acks[: leases.MAX_IDS], self._acks[leases.MAX_IDS :]
        try:
            await leases.ack(self._metadata, member, ids)
        except BaseException:
            self._acks[:0] = ids
            raise
        if self._acks:
            self._acking.set()
