"""``JetStreamLogEngine``: the ``LogEngine`` protocol on a replicated NATS JetStream cluster (server 2.12+).

The mapping, one stream per partition::

    partition p of topic t    stream  QC_t<topic id>_<p>    subject  qc.log.t<topic id>.<p>
    offset                    stream sequence - 1 (sequences start at 1, offsets at 0; both dense)
    record                    one message; its payload is the record's frame (``codec``)
    replicas                  the stream's num_replicas (a topic's ``replicas``; 3 unless it says)
    retention                 max_age / max_bytes (JetStream enforces them), and ``enforce_retention``
                              by record timestamp, as the local engine does

Durability is ``"replicated:<n>"``: JetStream acknowledges an append once a quorum of the stream's ``n``
replicas stored it, and the cluster runs with ``sync_interval: always`` (``infra/nats_cluster.py``), so a
quorum write is fsync'd on each of those replicas. Nothing is answered before that ack.

Appends to one partition are stored whole and contiguous in the stream, and those that meet at a partition
share one write (``writer``: group commit, one atomic batch per write, ADR-50): the ack's sequence says
where each landed. Appends to several partitions go through a commit record that recovery rolls forward
(``transactions``). A topic's streams are administered by ``streams``. Every node learns of every commit
within milliseconds (``watermarks``).

Any API node may run this engine against the same cluster at the same time: nothing here is owned by one
process. What each node caches — the streams it knows, the highest end it has seen — is refreshed from
JetStream and from other nodes' notices, never trusted for an answer that JetStream can give.

Failures: a cluster that cannot answer (no quorum, connection lost, a leader election under way) is
``EngineUnavailable`` (503); the nats-py connection reconnects by itself, and the engine serves again as
soon as JetStream answers, without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import nats
import nats.errors
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from app.kit.clock import now_ms
from app.stores.log.jetstream import codec
from app.stores.log.jetstream.client import (
    AlreadyApplied,
    JetStreamClient,
    NoStream,
    StoredAt,
    while_unsettled,
)
from app.stores.log.jetstream.config import JetStreamConfig
from app.stores.log.jetstream.idempotency import JetStreamIdempotency
from app.stores.log.jetstream.streams import Streams
from app.stores.log.jetstream.transactions import Transactions
from app.stores.log.jetstream.watermarks import Watermarks
from app.stores.log.jetstream.writer import StreamWriter
from app.stores.log.protocol import (
    EngineUnavailable,
    LogEngineError,
    PartitionInfo,
    Record,
    RecordIn,
    Replica,
    TopicLogConfig,
    UnknownLog,
    check_record_sizes,
)

logger = logging.getLogger(__name__)

_GONE_PREFIX = "qc.gone."  # a topic's streams were deleted (subject token: the topic's token)
_REPLICA_CHOICES = (1, 3, 5)
_MESSAGE_OVERHEAD = 256  # subject, batch headers and framing JetStream counts in a read's max_bytes
_LAG_RETRIES = 20
_DEFAULT_MAX_PAYLOAD = 1024 * 1024  # NATS's default, until the server says (INFO)
_HEADER_ALLOWANCE = 512  # batch or message-id headers, and a commit-record chunk's head


class JetStreamLogEngine:
    """The replicated log engine (see the module docstring)."""

    def __init__(self, config: JetStreamConfig) -> None:
        if not config.servers:
            raise ValueError("the JetStream engine needs at least one nats:// server (QUEUECORE_NATS_URL)")
        self.config = config
        self.nc: Client | None = None
        self._client: JetStreamClient | None = None
        self._txns: Transactions | None = None
        self.watermarks = Watermarks()
        self._known: set[str] = set()  # streams seen to exist (a stale entry only costs a failed call)
        self.streams = Streams(lambda: self.client, config, self._known)
        self._writers: dict[str, StreamWriter[bytes]] = {}  # group commit, per partition stream
        self._recovery: asyncio.Task[None] | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._closing = False

    # -- protocol: properties -----------------------------------------------------------------------------

    @property
    def durability(self) -> str:
        return self.durability_for(self.config.default_replicas)

    def durability_for(self, replicas: int) -> str:
        return f"replicated:{replicas}"

    @property
    def default_replicas(self) -> int:
        return self.config.default_replicas

    @property
    def replica_choices(self) -> tuple[int, ...]:
        return _REPLICA_CHOICES

    @property
    def max_record_bytes(self) -> int:
        # A record travels as one message: the server's max_payload, less our frame and NATS headers.
        max_payload = self.nc.max_payload if self.nc is not None else _DEFAULT_MAX_PAYLOAD
        return max_payload - codec.FRAME_BYTES - _HEADER_ALLOWANCE

    @property
    def exclusive(self) -> bool:
        # Every API process of the cluster creates streams in the same JetStream.
        return False

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._connect()
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            # No server answers now: start anyway (health says down, calls answer 503) and keep trying.
            logger.warning("NATS unreachable at start (%s); calls answer 503 until it answers", exc)
            self._connecting = asyncio.create_task(self._connect_forever(), name="jetstream-connect")
        self._recovery = asyncio.create_task(self._recover_forever(), name="jetstream-txn-recovery")

    async def _connect(self) -> None:
        # nats-py retries its first connection as long as later ones (forever, here): only try it once some
        # seed accepts a TCP connection, so a start without NATS does not hang the server's startup.
        await self._reach_a_seed()
        nc = await nats.connect(
            servers=list(self.config.servers),
            name="queuecore",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,
            connect_timeout=self.config.request_timeout_seconds,
            reconnected_cb=self._reconnected,
            error_cb=self._connection_error,
            pending_size=64 * 1024 * 1024,
            # Our own commit notices need not come back: ``announce`` advances this node's watermark itself.
            no_echo=True,
        )
        client = JetStreamClient(nc, self.config.request_timeout_seconds)
        await client.start()
        await self.watermarks.listen(nc)
        await nc.subscribe(_GONE_PREFIX + "*", cb=self._on_gone)
        txns = Transactions(
            client, replicas=self.config.default_replicas, recover_after=self.config.recover_after_seconds
        )
        self.nc, self._client, self._txns = nc, client, txns
        try:
            await txns.ensure_stream(self.streams.duplicate_window_ns(None))
        except EngineUnavailable:
            # A cluster without quorum at start: serve 503s and health "degraded" until it has one.
            logger.warning("JetStream unavailable at start; the transaction stream is checked again later")

    async def _reach_a_seed(self) -> None:
        for seed in self.config.servers:
            url = urlsplit(seed if "://" in seed else "nats://" + seed)
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(url.hostname or "127.0.0.1", url.port or 4222), 2.0
                )
            except (OSError, TimeoutError):
                continue
            writer.close()
            return
        raise OSError(f"no NATS server answers at {', '.join(self.config.servers)}")

    async def _connect_forever(self) -> None:
        while not self._closing:
            await asyncio.sleep(1.0)
            try:
                await self._connect()
            except (nats.errors.Error, OSError, TimeoutError):
                continue
            logger.info("connected to NATS")
            return

    async def close(self) -> None:
        self._closing = True
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
        if self._recovery is not None:
            self._recovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._recovery
        if self._txns is not None:
            await self._txns.close()
        self.watermarks.wake_all()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.drain()

    async def _reconnected(self) -> None:
        # Notices sent while we were away are lost: every waiter looks again.
        logger.info("reconnected to NATS")
        self.watermarks.wake_all()

    async def _connection_error(self, error: Exception) -> None:
        logger.info("NATS connection: %s", error)

    async def _recover_forever(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.config.recovery_interval_seconds)
            if self._txns is None:  # not connected yet
                continue
            try:
                await self._txns.ensure_stream(self.streams.duplicate_window_ns(None))
                await self._txns.recover(self._apply)
            except LogEngineError as exc:
                logger.info("transaction recovery skipped this round: %s", exc)
            except Exception:
                logger.exception("transaction recovery failed this round")

    def idempotency_records(self, window_seconds: float) -> JetStreamIdempotency:
        """Idempotency records every API node sees, kept ``window_seconds`` (a KV bucket of this cluster)."""
        return JetStreamIdempotency(
            self._jetstream,
            lambda: self.client,
            window_seconds=window_seconds,
            replicas=self.config.default_replicas,
            timeout=self.config.request_timeout_seconds,
        )

    def _jetstream(self) -> JetStreamContext:
        if self.nc is None:
            raise EngineUnavailable("not connected to NATS")
        return self.nc.jetstream(timeout=self.config.request_timeout_seconds)

    @property
    def client(self) -> JetStreamClient:
        if self._client is None:
            raise EngineUnavailable("the JetStream engine is not started")
        return self._client

    # -- topics --------------------------------------------------------------------------------------------

    async def create_topic(self, topic_id: str, partitions: int, config: TopicLogConfig) -> None:
        if partitions < 1:
            raise ValueError("a topic has at least one partition")
        replicas = config.replicas or self.config.default_replicas
        if replicas not in _REPLICA_CHOICES:
            raise ValueError(f"replicas must be one of {_REPLICA_CHOICES}, got {replicas}")
        await self.streams.create(topic_id, range(partitions), replicas, config)

    async def add_partitions(self, topic_id: str, partitions: int) -> None:
        await self.streams.add(topic_id, partitions)

    async def update_config(self, topic_id: str, config: TopicLogConfig) -> None:
        await self.streams.update(topic_id, config)

    async def delete_topic(self, topic_id: str) -> None:
        await self.streams.delete(topic_id)
        self._forget(codec.token(topic_id))
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.publish(_GONE_PREFIX + codec.token(topic_id), b"")

    async def _stream_info(self, topic_id: str, partition: int) -> dict[str, Any]:
        try:
            return await self.streams.info(topic_id, partition)
        except EngineUnavailable:
            # A stream being deleted may leave the call unanswered: deleted by now, the call met a
            # deleted topic (PRODUCT.md "Deletion races"), not an outage.
            await self._unless_deleted(topic_id, partition)
            raise

    async def _unless_deleted(self, topic_id: str, partition: int) -> None:
        """After a call on a partition's stream failed as an outage: ``UnknownLog`` if the stream is gone
        (its topic was deleted meanwhile), so that the call answers as one on a deleted topic; returns
        when the stream is still there, or when that cannot be told (the outage stands)."""
        name = codec.stream_name(topic_id, partition)
        with contextlib.suppress(EngineUnavailable):
            await self.streams.info(topic_id, partition)
            return
        if name not in self._known and not await self._stream_listed(topic_id, partition):
            raise UnknownLog(f"no log for {topic_id}/{partition}: deleted")

    async def _stream_listed(self, topic_id: str, partition: int) -> bool:
        """Whether the stream is among the topic's (True when that cannot be told)."""
        try:
            return partition in await self.streams.partitions(topic_id)
        except EngineUnavailable:
            return True

    async def _on_gone(self, msg: Any) -> None:
        self._forget(msg.subject[len(_GONE_PREFIX) :])

    def _forget(self, topic_token: str) -> None:
        prefix = codec.STREAM_PREFIX + topic_token + "_"
        self._known.difference_update([n for n in self._known if n.startswith(prefix)])
        for name in [n for n, writer in self._writers.items() if n.startswith(prefix) and writer.idle]:
            del self._writers[name]
        # Its watchers wake and meet UnknownLog when they look again.
        self.watermarks.forget_prefix(prefix)

    async def topic_ids(self) -> set[str]:
        names = await self.streams.names(codec.SUBJECT_PREFIX + ">")
        return {parsed[0] for name in names if (parsed := codec.parse_stream_name(name)) is not None}

    # -- append --------------------------------------------------------------------------------------------

    async def append(self, topic_id: str, records: Mapping[int, Sequence[RecordIn]]) -> dict[int, int]:
        parts = {p: rs for p, rs in records.items() if rs}
        if not parts:
            return {}
        for partition in parts:
            if partition < 0:
                raise UnknownLog(f"no partition {partition}")
            if codec.stream_name(topic_id, partition) not in self._known:
                await self._stream_info(topic_id, partition)
        stamp = now_ms()
        frames = {p: [codec.encode(r, stamp) for r in rs] for p, rs in parts.items()}
        # Refused here, before a writer coalesces it with others' records, which NATS would refuse with it.
        limit = self.max_record_bytes
        for p, part in frames.items():
            if max(map(len, part)) - codec.FRAME_BYTES > limit:
                check_record_sizes(parts[p], limit)
        if len(frames) == 1:
            [(partition, part)] = frames.items()
            stored = await self._store(topic_id, partition, part, None)
            return {partition: stored.last_seq - stored.count}
        txns = self._transactions()
        txn_id = txns.new_id()
        await txns.commit(txn_id, topic_id, frames)
        outcomes = await asyncio.gather(
            *(self._store(topic_id, p, part, f"{txn_id}.{p}") for p, part in frames.items()),
            return_exceptions=True,
        )
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed:
            # Committed: it will happen. Finish it now rather than in recover_after seconds, so readers see
            # it in part only while a partition has no leader. The publisher hears 503 (as before).
            txns.finish(txn_id, frames, topic_id, self._apply)
            raise failed[0]
        placed = [o for o in outcomes if not isinstance(o, BaseException)]
        txns.done(txn_id)
        return {p: stored.last_seq - stored.count for p, stored in zip(frames, placed, strict=True)}

    def _transactions(self) -> Transactions:
        if self._txns is None:
            raise EngineUnavailable("the JetStream engine is not started")
        return self._txns

    async def _store(
        self,
        topic_id: str,
        partition: int,
        frames: Sequence[bytes],
        msg_id: str | None,
        *,
        recovering: bool = False,
    ) -> StoredAt:
        name = codec.stream_name(topic_id, partition)
        call: Callable[[], Awaitable[StoredAt]]
        if msg_id is None:
            writer = self._writers.get(name) or self._writer(topic_id, partition)
            call = partial(writer.append, frames)
        else:
            call = partial(self._append_with_id, topic_id, partition, frames, msg_id)

        try:
            # A stream just created, or electing a leader, answers again in moments; gone altogether
            # (``_stream_info`` after each try), it is UnknownLog. Nothing was stored by a NoStream.
            return await while_unsettled(
                call, NoStream, between=lambda: self._stream_info(topic_id, partition)
            )
        except NoStream:
            await self._stream_info(topic_id, partition)
            raise EngineUnavailable(f"stream {name} has no leader right now") from None
        except EngineUnavailable:
            # Unanswered: the stream may have gone with its topic meanwhile (then nothing of it is left).
            await self._unless_deleted(topic_id, partition)
            raise
        except AlreadyApplied:
            if recovering:
                return StoredAt(0, 0)
            # Recovery applied this part first (only after recover_after seconds): the batch is committed,
            # but where it landed is not known here.
            raise EngineUnavailable("the append was committed, but its offsets are unknown") from None

    async def _append_with_id(
        self, topic_id: str, partition: int, frames: Sequence[bytes], msg_id: str
    ) -> StoredAt:
        """An append JetStream deduplicates by ``msg_id`` (a transaction's part): alone, never coalesced."""
        name = codec.stream_name(topic_id, partition)
        stored = await self.client.append(
            codec.subject(topic_id, partition), frames, msg_id=msg_id, stream=name
        )
        await self._announce(name, stored)
        return stored

    def _writer(self, topic_id: str, partition: int) -> StreamWriter[bytes]:
        """The partition's group committer: one JetStream publish (and one notice) per coalesced write."""
        name, subject = codec.stream_name(topic_id, partition), codec.subject(topic_id, partition)

        async def send(frames: Sequence[bytes]) -> StoredAt:
            stored = await self.client.append(subject, frames, stream=name)
            await self._announce(name, stored)
            return stored

        writer = self._writers[name] = StreamWriter(send)
        return writer

    async def _announce(self, name: str, stored: StoredAt) -> None:
        assert self.nc is not None
        await self.watermarks.announce(self.nc, name, stored.last_seq)

    async def _apply(self, topic_id: str, partition: int, frames: Sequence[bytes], msg_id: str) -> StoredAt:
        """Recovery's apply: an already-applied part, or a deleted topic's, is done."""
        try:
            return await self._store(topic_id, partition, frames, msg_id, recovering=True)
        except UnknownLog:
            return StoredAt(0, 0)

    # -- reads ---------------------------------------------------------------------------------------------

    async def read(
        self, topic_id: str, partition: int, offset: int, max_records: int = 100, max_bytes: int = 1 << 20
    ) -> list[Record]:
        if offset < 0:
            raise LogEngineError(f"offset {offset} is negative")
        name = codec.stream_name(topic_id, partition)
        if name not in self._known:
            await self._stream_info(topic_id, partition)
        max_records = max(1, max_records)
        asked_bytes = max(1, max_bytes) + max_records * _MESSAGE_OVERHEAD
        found = await self._direct_get(topic_id, partition, offset + 1, max_records, asked_bytes)
        if not found:
            # A replica answering may trail the leader: when we know there is more, ask again.
            for _ in range(_LAG_RETRIES):
                end = self.watermarks.end(name)
                if end is None or end <= offset:
                    break
                await asyncio.sleep(0.002)
                found = await self._direct_get(topic_id, partition, offset + 1, max_records, asked_bytes)
                if found:
                    break
        # JetStream's max_bytes counts subjects and headers too: ask for more, and cut by the records' own size.
        records: list[Record] = []
        size = 0
        for seq, payload, _ in found:
            size += len(payload)
            if records and size > max_bytes:
                break
            records.append(codec.decode(seq - 1, payload))
        if records:
            self.watermarks.advance(name, records[-1].offset + 1)
        return records

    async def _direct_get(
        self, topic_id: str, partition: int, seq: int, batch: int, max_bytes: int
    ) -> list[tuple[int, bytes, Any]]:
        name = codec.stream_name(topic_id, partition)
        try:
            return await self.client.direct_get(name, seq, batch, max_bytes)
        except NoStream:
            await self._stream_info(topic_id, partition)
            raise EngineUnavailable(f"no replica of {name} answers reads right now") from None
        except EngineUnavailable:
            await self._unless_deleted(topic_id, partition)
            raise

    async def offset_for_time(self, topic_id: str, partition: int, timestamp_ms: int) -> int:
        info = await self.partition_info(topic_id, partition)
        low, high = info.earliest_offset, info.latest_offset  # the answer lies in [low, high]
        while low < high:
            middle = (low + high) // 2
            found = await self._direct_get(topic_id, partition, middle + 1, 1, 1)
            if not found:
                high = middle
                continue
            seq, payload, _ = found[0]
            if codec.timestamp_of(payload) >= timestamp_ms:
                high = min(middle, seq - 1)
            else:
                low = seq  # offset seq - 1 is too early; everything up to it is
        return low

    async def partition_info(self, topic_id: str, partition: int) -> PartitionInfo:
        info = await self._stream_info(topic_id, partition)
        state = info.get("state", {})
        first, last = int(state.get("first_seq", 0)), int(state.get("last_seq", 0))
        self.watermarks.advance(codec.stream_name(topic_id, partition), last)
        earliest = max(0, first - 1) if state.get("messages") else last
        return PartitionInfo(partition, earliest, last, int(state.get("bytes", 0)), _replicas(info))

    # -- waits ---------------------------------------------------------------------------------------------

    async def wait_for(self, topic_id: str, partition: int, offset: int, timeout: float) -> bool:
        if offset < 0:
            raise LogEngineError(f"offset {offset} is negative")
        name = codec.stream_name(topic_id, partition)
        deadline = time.monotonic() + timeout
        if self.watermarks.end(name) is None or name not in self._known:
            await self.partition_info(topic_id, partition)
        loop = asyncio.get_running_loop()
        while True:
            end = self.watermarks.end(name)
            if end is not None and end > offset:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closing:
                return False
            woken: asyncio.Future[None] = loop.create_future()
            cancel = self.watermarks.watch(name, offset, _resolver(woken))
            try:
                await asyncio.wait_for(woken, remaining)
            except TimeoutError:
                return False
            finally:
                cancel()
            if name not in self._known:  # deleted meanwhile
                await self._stream_info(topic_id, partition)

    def watch(
        self, topic_id: str, partition: int, offset: int, wake: Callable[[], None]
    ) -> Callable[[], None]:
        if offset < 0:
            raise LogEngineError(f"offset {offset} is negative")
        name = codec.stream_name(topic_id, partition)
        if name not in self._known:
            raise UnknownLog(f"no log for {topic_id}/{partition} known here")
        if self._closing:
            wake()
            return _nothing
        return self.watermarks.watch(name, offset, wake)

    # -- retention and health ------------------------------------------------------------------------------

    async def enforce_retention(self, now_ms: int) -> int:
        """Purge records older than their topic's retention by record timestamp (JetStream's own max_age
        goes by the time a record was stored; both hold)."""
        purged = 0
        for name in await self.streams.names(codec.SUBJECT_PREFIX + ">"):
            parsed = codec.parse_stream_name(name)
            if parsed is None:
                continue
            topic_id, partition = parsed
            info = await self._stream_info(topic_id, partition)
            retention_ms = int(info["config"].get("max_age", 0)) // 1_000_000
            if not retention_ms or not info.get("state", {}).get("messages"):
                continue
            keep_from = await self.offset_for_time(topic_id, partition, now_ms - retention_ms)
            earliest = max(0, int(info["state"]["first_seq"]) - 1)
            if keep_from > earliest:
                await self.client.api(f"STREAM.PURGE.{name}", {"seq": keep_from + 1}, stream=name)
                purged += 1
        return purged

    async def check(self) -> bool:
        try:
            await self.client.api("INFO")
            return True
        except LogEngineError:
            return False

    async def health(self) -> str:
        """``ok`` when JetStream answers; ``degraded`` when connected but JetStream cannot (no quorum: reads
        may still be served by the replicas left); ``down`` without a connection to any server."""
        if await self.check():
            return "ok"
        return "degraded" if self.nc is not None and self.nc.is_connected else "down"


def _nothing() -> None:
    return None


def _resolver(future: asyncio.Future[None]) -> Callable[[], None]:
    def wake() -> None:
        if not future.done():
            future.set_result(None)

    return wake


def _replicas(info: dict[str, Any]) -> tuple[Replica, ...]:
    """A stream's copies from its info's ``cluster``: the leader (current by definition), then the followers
    as the leader sees them (``current``: caught up and heard from lately). With no leader, followers only."""
    cluster = info.get("cluster") or {}
    leader = cluster.get("leader")
    found = [Replica(server=str(leader), leader=True, current=True)] if leader else []
    for peer in cluster.get("replicas") or []:
        if peer.get("name"):
            found.append(Replica(server=str(peer["name"]), leader=False, current=bool(peer.get("current"))))
    return tuple(found)
