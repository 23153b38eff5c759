"""The few JetStream calls the engine makes, over one nats-py connection, with NATS's failures turned into
the engine's errors: a call that cannot be answered now is ``EngineUnavailable`` (503), a stream that does
not exist is ``UnknownLog``.

- ``api``: a ``$JS.API`` request (stream create/update/delete/info/names/purge).
- ``append``: records into one stream, as one message or as an atomic batch (ADR-50: every message
  carries ``Nats-Batch-Id`` and its ``Nats-Batch-Sequence``; only the last, with ``Nats-Batch-Commit``, is
  a request, and its ack says where the batch landed). All of it is stored, on a quorum, or none of it.
- ``direct_get``: a batch direct get (``$JS.API.DIRECT.GET``), answered by any replica, ending with an
  end-of-batch status; without headers unless asked (see there). Replies come to one wildcard inbox
  subscription shared by every call.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import nats.errors
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import KeyValueConfig
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError, NoStreamResponseError
from nats.js.kv import KeyValue

from app.stores.log.protocol import EngineUnavailable, LogEngineError, UnknownLog

STREAM_NOT_FOUND = 10059
NO_LEADER_RETRIES = 8  # about 1.8 s of waiting in all
BATCH_DUPLICATE_ID = 10201  # an atomic batch whose Nats-Msg-Id was seen: applied already
_NOT_FOUND_STATUS = "404"
_END_OF_BATCH_STATUS = "204"
# A key-value call (nats-py's) that nothing stored: the bucket has no leader yet, or the link is down and the
# request was not sent (the engine's connection buffers nothing meanwhile: ``JetStreamClient._sent``).
KV_UNSETTLED = (NoStreamResponseError, nats.errors.OutboundBufferLimitError)
_RELINK_POLL = 0.02  # how often a request not sent (the link down) looks for it back

T = TypeVar("T")
_UNAVAILABLE = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionDrainingError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.errors.UnexpectedEOF,
    asyncio.TimeoutError,
    OSError,
)


class NoStream(EngineUnavailable):
    """Nothing answered on a stream's subject: the stream is gone, or none of its replicas serves now."""


class AlreadyApplied(LogEngineError):
    """A message id the stream has seen: a transaction's roll-forward done before, or a record's own id
    (``codec.DedupedFrame``) sent again; nothing of the write was stored."""


class JetStreamError(LogEngineError):
    """JetStream refused a call (``code``, ``err_code`` and its description)."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{description} (JetStream {code}/{err_code})")
        self.code, self.err_code = code, err_code


class StoredAt:
    """Where an append landed: the sequence of its last message and how many it stored."""

    __slots__ = ("count", "last_seq")

    def __init__(self, last_seq: int, count: int) -> None:
        self.last_seq, self.count = last_seq, count


class JetStreamClient:
    """JetStream over one connection (see the module docstring)."""

    def __init__(self, nc: Client, timeout: float) -> None:
        self.nc = nc
        self.timeout = timeout
        self._inbox = ""
        self._replies: dict[str, asyncio.Queue[Msg]] = {}
        self._ids = itertools.count()
        self._batch_ids = itertools.count()
        self._batch_prefix = nc.new_inbox().rsplit(".", 1)[-1]

    async def start(self) -> None:
        self._inbox = self.nc.new_inbox()
        await self.nc.subscribe(self._inbox + ".*", cb=self._on_reply)

    async def _on_reply(self, msg: Msg) -> None:
        queue = self._replies.get(msg.subject.rsplit(".", 1)[-1])
        if queue is not None:
            queue.put_nowait(msg)

    async def api(
        self,
        subject: str,
        body: dict[str, Any] | None = None,
        *,
        stream: str = "",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One ``$JS.API`` call; its JSON answer, or the matching engine error."""
        payload = orjson.dumps(body) if body is not None else b""
        try:
            reply = await self._sent(
                lambda: self.nc.request("$JS.API." + subject, payload, timeout=timeout or self.timeout)
            )
        except _UNAVAILABLE as exc:
            raise EngineUnavailable(f"JetStream did not answer {subject}: {type(exc).__name__}") from exc
        answer: dict[str, Any] = orjson.loads(reply.data)
        error = answer.get("error")
        if error:
            raise _error(error, stream)
        return answer

    async def append(
        self, subject: str, payloads: Sequence[bytes], *, msg_id: str | None = None, stream: str = ""
    ) -> StoredAt:
        """Store ``payloads`` in the stream of ``subject``, all or nothing, in this order, contiguously.

        A payload with a ``msg_id`` of its own (``codec.DedupedFrame``) is sent with it; ``msg_id`` (the
        write's) goes on the first payload without one, or nowhere when all have one: JetStream refuses
        the whole write when any of its message ids is in the stream's duplicate window, so a write sent
        again is refused all the same."""

        async def send() -> Msg:
            ids: list[str | None] = [getattr(payload, "msg_id", None) for payload in payloads]
            if msg_id is not None and None in ids:
                ids[ids.index(None)] = msg_id
            if len(payloads) == 1:
                headers = {"Nats-Msg-Id": ids[0]} if ids[0] else None
                return await self.nc.request(subject, payloads[0], timeout=self.timeout, headers=headers)
            batch = f"{self._batch_prefix}{next(self._batch_ids)}"
            last = len(payloads) - 1
            head = _hpub_head(subject)
            ahead = ((head, _msg_id_line(ids[i]), payloads[i]) for i in range(last))
            await self._publish_raw(_batch_commands(batch, ahead), payloads)
            headers = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(last + 1), "Nats-Batch-Commit": "1"}
            if own := ids[last]:
                headers["Nats-Msg-Id"] = own
            return await self.nc.request(subject, payloads[last], timeout=self.timeout, headers=headers)

        try:
            reply = await self._sent(send)
        except nats.errors.NoRespondersError:
            raise NoStream(f"nothing stores {subject}") from None
        except _UNAVAILABLE as exc:
            raise EngineUnavailable(f"JetStream did not acknowledge an append: {type(exc).__name__}") from exc
        return self._stored(reply, len(payloads), msg_id, subject, stream)

    async def publish(self, messages: Sequence[Message], *, stream: str) -> StoredAt:
        """Store ``messages`` (each ``(subject, payload, headers)``, subjects of one stream) all or nothing,
        in this order, contiguously: one message, or an atomic batch. A message's own headers (an expected
        last sequence, say) are checked for the whole batch: one that fails refuses all of it."""

        async def send() -> Msg:
            if len(messages) == 1:
                subject, payload, headers = messages[0]
                return await self.nc.request(subject, payload, timeout=self.timeout, headers=headers)
            batch = f"{self._batch_prefix}{next(self._batch_ids)}"
            last = len(messages) - 1
            lines: dict[int, bytes] = {}  # a batch's messages mostly share one headers dict (or None)

            def own(headers: dict[str, str] | None) -> bytes:
                made = lines.get(id(headers))
                if made is None:
                    made = lines[id(headers)] = _header_lines(headers)
                return made

            ahead = (
                (_hpub_head(subject), own(headers), payload) for subject, payload, headers in messages[:last]
            )
            await self._publish_raw(_batch_commands(batch, ahead), [payload for _, payload, _ in messages])
            subject, payload, headers = messages[last]
            marks = {**(headers or {}), "Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(last + 1)}
            marks["Nats-Batch-Commit"] = "1"
            return await self.nc.request(subject, payload, timeout=self.timeout, headers=marks)

        try:
            reply = await self._sent(send)
        except nats.errors.NoRespondersError:
            raise NoStream(f"nothing stores {messages[0][0]}") from None
        except _UNAVAILABLE as exc:
            raise EngineUnavailable(f"JetStream did not acknowledge a write: {type(exc).__name__}") from exc
        return self._stored(reply, len(messages), None, messages[0][0], stream)

    async def _publish_raw(self, commands: list[bytes], payloads: Sequence[bytes]) -> None:
        """Queue ``commands`` (``HPUB``s made here) on the connection as nats-py's ``publish`` queues each
        of its own, with its checks, at a fraction of its cost a message (a batch's thousand publishes were
        a third of a keyed publish's CPU). Commands it would refuse are refused alike: the link down
        (nothing is buffered meanwhile: ``_sent``), closed or draining, a payload past the server's limit."""
        nc = self.nc
        if nc.is_closed:
            raise nats.errors.ConnectionClosedError
        if nc.is_draining_pubs:
            raise nats.errors.ConnectionDrainingError
        if not nc.is_connected:
            raise nats.errors.OutboundBufferLimitError
        if max(map(len, payloads)) > nc.max_payload:
            raise nats.errors.MaxPayloadError
        # One command, so that ``drop_unsent_publishes`` (it starts with HPUB) drops all of it, or none.
        await nc._send_command(b"".join(commands))
        nc.stats["out_msgs"] += len(commands)
        if nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()

    async def _sent(self, send: Callable[[], Awaitable[T]]) -> T:
        """``send()``, made again once the link is back when it could not be sent, within the call's timeout.

        The engine's connection buffers nothing while it reconnects (``pending_size=0``): nats-py would
        keep a request then and send it on reconnecting, however late — after its caller was answered 503
        and a retry on another node stored the message (``test_idempotency``'s link cut stored a keyed
        message twice). A publish refused that way was not sent, so nothing was stored: sending it again
        is safe, and a short reconnect (a NATS server restarting) costs a wait, not an error. A batch is
        sent again whole, under a new batch id; the part sent before never committed."""
        deadline = asyncio.get_running_loop().time() + self.timeout
        while True:
            try:
                return await send()
            except nats.errors.OutboundBufferLimitError:
                if asyncio.get_running_loop().time() >= deadline or self.nc.is_closed:
                    raise
                await asyncio.sleep(_RELINK_POLL)

    def _stored(self, reply: Msg, count: int, msg_id: str | None, subject: str, stream: str) -> StoredAt:
        """Where an append landed, from its (last message's) ack; the matching error otherwise."""
        if not reply.data:  # a status with no body: no stream listens on the subject
            raise NoStream(f"nothing stores {subject}")
        ack: dict[str, Any] = orjson.loads(reply.data)
        error = ack.get("error")
        if error:
            if error.get("err_code") == BATCH_DUPLICATE_ID:
                raise AlreadyApplied(msg_id or "")
            raise _error(error, stream)
        if ack.get("duplicate"):
            raise AlreadyApplied(msg_id or "")
        return StoredAt(int(ack["seq"]), count)

    async def direct_get(
        self,
        stream: str,
        seq: int,
        batch: int,
        max_bytes: int,
        *,
        start_time: str | None = None,
        headers: bool = False,
    ) -> list[tuple[int, bytes, Msg]]:
        """Up to ``batch`` messages from sequence ``seq`` on (the first at or after ``start_time`` when given),
        at least one even past ``max_bytes``: ``[(sequence, payload, msg)]``; ``[]`` when none is there.

        Without ``headers`` (and ``start_time``), the replies carry none (``no_hdr``): parsing a record's
        nine headers in nats-py was a fifth of a consuming node's CPU. Their sequences then come from the
        end-of-batch status, which names the last one sent: n records ending at L are ``seq``..L exactly
        when L - n + 1 == ``seq`` (they come in order, each once). Otherwise (retention removed the start,
        or a gap) the read is asked again with headers."""
        bare = not headers and start_time is None
        token = str(next(self._ids))
        queue: asyncio.Queue[Msg] = asyncio.Queue()
        self._replies[token] = queue
        body: dict[str, Any] = {"batch": batch, "max_bytes": max_bytes}
        if start_time is not None:
            body["start_time"] = start_time
        else:
            body["seq"] = seq
        if bare:
            body["no_hdr"] = True
        found: list[tuple[int, bytes, Msg]] = []
        records: list[Msg] = []  # bare replies, in order
        try:
            await self._sent(
                lambda: self.nc.publish(
                    f"$JS.API.DIRECT.GET.{stream}", orjson.dumps(body), reply=f"{self._inbox}.{token}"
                )
            )
            while True:
                # A batch get answers up to ``batch`` messages in a burst: take what is already queued
                # without wait_for, whose task and timer cost ~10-30 us per message on this path.
                if queue.empty():
                    msg = await asyncio.wait_for(queue.get(), self.timeout)
                else:
                    msg = queue.get_nowait()
                if bare and not msg.headers:
                    records.append(msg)
                    continue
                meta = msg.headers or {}
                status = meta.get("Status")
                if status is None and "Nats-Sequence" in meta:
                    found.append((int(meta["Nats-Sequence"]), msg.data, msg))
                    if len(found) >= batch:
                        # The end-of-batch status may still come; its queue goes with the token.
                        return found
                    continue
                if records:
                    last = int(meta.get("Nats-Last-Sequence", "0"))
                    if status == _END_OF_BATCH_STATUS and last - len(records) + 1 == seq:
                        return [(seq + i, m.data, m) for i, m in enumerate(records)]
                    break  # not seq..last, or no end-of-batch: ask again with headers, below
                if status in (_END_OF_BATCH_STATUS, _NOT_FOUND_STATUS) or status is None:
                    return found
                if status == "503":
                    raise NoStream(f"no replica of {stream} answers")
                raise EngineUnavailable(f"direct get on {stream} answered {status}")
        except _UNAVAILABLE as exc:
            raise EngineUnavailable(
                f"JetStream did not answer a read of {stream}: {type(exc).__name__}"
            ) from exc
        finally:
            del self._replies[token]
        return await self.direct_get(stream, seq, batch, max_bytes, headers=True)


def _error(error: dict[str, Any], stream: str) -> LogEngineError:
    code, err_code = int(error.get("code", 0)), int(error.get("err_code", 0))
    description = str(error.get("description", "JetStream error"))
    if err_code == STREAM_NOT_FOUND:
        return UnknownLog(f"no stream {stream}" if stream else description)
    if code in (408, 503) or code >= 500:
        return EngineUnavailable(description)
    return JetStreamError(code, err_code, description)


# One message of ``JetStreamClient.publish``: its subject, payload and headers.
Message = tuple[str, bytes, dict[str, str] | None]


def _batch_commands(batch: str, messages: Iterable[tuple[bytes, bytes, bytes]]) -> list[bytes]:
    """The ``HPUB`` commands of an atomic batch's messages, numbered from 1: each message is its
    ``_hpub_head``, its own header lines and its payload. Subjects and header values here are the engine's
    own (stream subjects, hex digests, batch ids): nothing a publish must check or escape."""
    marks = b"NATS/1.0\r\nNats-Batch-Id: " + batch.encode() + b"\r\nNats-Batch-Sequence: "
    commands = []
    for sequence, (head, own, payload) in enumerate(messages, 1):
        headers = marks + b"%d\r\n" % sequence + own
        size = len(headers) + 2  # and the blank line that ends them
        commands.append(b"%s%d %d\r\n%s\r\n%s\r\n" % (head, size, size + len(payload), headers, payload))
    return commands


def _hpub_head(subject: str) -> bytes:
    return b"HPUB " + subject.encode() + b" "


def _header_lines(headers: dict[str, str] | None) -> bytes:
    return "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items()).encode()


def _msg_id_line(msg_id: str | None) -> bytes:
    return b"Nats-Msg-Id: " + msg_id.encode() + b"\r\n" if msg_id else b""


def drop_unsent_publishes(nc: Client) -> int:
    """Forget the publishes nats-py queued and had not written when its link dropped; how many.

    nats-py writes them on reconnecting, however late: by then each one's request has timed out and its
    caller answered 503, and a retry may have stored the message elsewhere. A publish the server never got
    stored nothing, so its caller's retry is safe. Subscriptions and pings in the queue are kept (nats-py
    renews subscriptions on reconnecting; a ping's flush waits for its pong). nats-py has no call for this:
    its outgoing queue (``_pending``) is private, read here under the version ``constraints.txt`` pins."""
    queued: list[bytes] = nc._pending
    kept = [command for command in queued if not bytes(command[:5]).startswith((b"PUB ", b"HPUB "))]
    dropped = len(queued) - len(kept)
    if dropped:
        nc._pending = kept
        nc._pending_data_size = sum(len(command) for command in kept)
    return dropped


async def while_unsettled(
    call: Callable[[], Awaitable[T]],
    unsettled: type[BaseException] | tuple[type[BaseException], ...],
    *,
    between: Callable[[], Awaitable[Any]] | None = None,
    tries: int = NO_LEADER_RETRIES,
) -> T:
    """``call()``, tried again while it fails with ``unsettled``: an error after which nothing was stored,
    that a cluster still settling gives for a moment (a stream or bucket just created or electing a leader
    has no responder; a peer not yet heard from cannot be placed on). ``between`` runs after each such
    failure (to tell "no leader yet" from "gone"). ``tries`` waits of 50 ms, 100 ms, … come before the last
    try, whose error is the caller's."""
    for attempt in range(tries):
        try:
            return await call()
        except unsettled:
            if between is not None:
                await between()
            await asyncio.sleep(0.05 * (attempt + 1))
    return await call()


async def open_bucket(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    """The key-value bucket ``config.bucket``, created with ``config`` when it does not exist yet. Two
    processes creating it at once both succeed: JetStream answers the same config with the same bucket."""
    try:
        return await js.key_value(config.bucket)
    except BucketNotFoundError:
        return await js.create_key_value(config)
