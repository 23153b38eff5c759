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

Appends (``appends``) to one partition are stored whole and contiguous in the stream, and those that meet at
a partition share one write (``writer``: group commit, one atomic batch per write, ADR-50): the ack's
sequence says where each landed. Appends to several partitions go through a commit record that recovery
rolls forward (``transactions``). Reads (``reads``) are direct gets any replica answers. A topic's streams
are administered by ``streams``. Every node learns of every commit within milliseconds (``watermarks``).
This module holds the connection's lifecycle, topics, waits, retention and health, and hands the rest on.

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
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nats
import nats.errors
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from app.kit.urls import masked
from app.stores.log.jetstream import codec, snapshot
from app.stores.log.jetstream.appends import Appends
from app.stores.log.jetstream.bulk_link import BulkLink
from app.stores.log.jetstream.client import JetStreamClient, drop_unsent_publishes
from app.stores.log.jetstream.config import JetStreamConfig
from app.stores.log.jetstream.duties import JetStreamDuties
from app.stores.log.jetstream.idempotency import JetStreamIdempotency
from app.stores.log.jetstream.reads import Reads
from app.stores.log.jetstream.streams import Streams
from app.stores.log.jetstream.transactions import Transactions
from app.stores.log.jetstream.watermarks import Watermarks
from app.stores.log.jetstream.zones import Zones
from app.stores.log.protocol import (
    EngineUnavailable,
    LogEngineError,
    PartitionExtent,
    PartitionInfo,
    Record,
    RecordColumns,
    RecordIn,
    TopicLogConfig,
    UnknownLog,
)

logger = logging.getLogger(__name__)

_GONE_PREFIX = "qc.gone."  # a topic's streams were deleted (subject token: the topic's token)
_REPLICA_CHOICES = (1, 3, 5)
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
        self.appends = Appends(
            lambda: self.client,
            lambda: self.nc,
            self._transactions,
            self.streams,
            self.watermarks,
            lambda: self.max_record_bytes,
        )
        # Zones are asked for no longer than a JetStream call waits, and 2 s at most: the wait is spent only
        # when a server a describe names does not answer (a zone down), once per zones.REFRESH_SECONDS.
        self.zones = Zones(self._connection, config.zone_tag, min(config.request_timeout_seconds, 2.0))
        self.bulk_link = (
            BulkLink(config.servers, config.link, config.request_timeout_seconds)
            if config.bulk_read_min_records > 0
            else None
        )
        self.reads = Reads(
            lambda: self.client,
            self.streams,
            self.watermarks,
            self.zones,
            self.bulk_link,
            config.bulk_read_min_records,
        )
        self._duties = JetStreamDuties(self._jetstream, replicas=config.default_replicas)
        self._recovery: asyncio.Task[None] | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._closing = False
        self._refused: set[str] = set()  # kinds of refusal logged already (``_connection_error``)
        self._refusal: asyncio.Event | None = None  # set on a refusal during a first connection

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
        # A creds file that cannot sign in will not heal by dialling: said once, like a refusal, and
        # checked again at each try (a secret mounted late, or replaced, is then picked up).
        problem = self.config.link.creds_problem()
        if problem is not None:
            if "creds" not in self._refused:
                self._refused.add("creds")
                logger.error("%s: calls answer 503 until it is fixed", problem)
            raise ConnectionRefusedError("refused: the creds file, see the error logged before")
        # nats-py retries its first connection as long as later ones (forever, here): only try it once some
        # seed accepts a TCP connection, so a start without NATS does not hang the server's startup.
        await self._reach_a_seed()
        nc = await self._first_connection(
            servers=list(self.config.servers),
            name="queuecore",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,
            connect_timeout=self.config.request_timeout_seconds,
            reconnected_cb=self._reconnected,
            disconnected_cb=self._disconnected,
            error_cb=self._connection_error,
            # Nothing is kept to send on reconnecting, however late (client.JetStreamClient._sent): a request
            # made while the link is down waits for it within its own timeout, or fails unsent.
            pending_size=0,
            # Our own commit notices need not come back: ``announce`` advances this node's watermark itself.
            no_echo=True,
            # Credentials and TLS (the deployment's CA), when the cluster asks for them.
            **self.config.link.connect_options(),
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

    async def _first_connection(self, **options: Any) -> Client:
        """``nats.connect``, except that a refusal (credentials or TLS) ends the try at once: nats-py would
        retry it for ever, holding the server's startup (and its SIGTERM) behind it. A refusal raises
        ``ConnectionRefusedError``; ``start`` then serves 503s and keeps trying every second, as it does
        when no seed answers."""
        nc = Client()
        refused = asyncio.Event()
        self._refusal = refused
        connecting = asyncio.ensure_future(nc.connect(**options))
        waiting = asyncio.ensure_future(refused.wait())
        try:
            await asyncio.wait({connecting, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            self._refusal = None
        if not connecting.done():
            connecting.cancel()
            with contextlib.suppress(BaseException):
                await connecting
            with contextlib.suppress(Exception):
                await nc.close()
            raise ConnectionRefusedError("refused: credentials or TLS, see the error logged before")
        connecting.result()
        return nc

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
        raise OSError(f"no NATS server answers at {masked(','.join(self.config.servers))}")

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
        if self.bulk_link is not None:
            await self.bulk_link.close()
        self.watermarks.wake_all()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.drain()

    async def _disconnected(self) -> None:
        if self.nc is not None and (dropped := drop_unsent_publishes(self.nc)):
            logger.warning("NATS link lost: %d publishes not sent are dropped, not sent later", dropped)

    async def _reconnected(self) -> None:
        # Notices sent while we were away are lost: every waiter looks again.
        logger.info("reconnected to NATS")
        self.watermarks.wake_all()

    async def _connection_error(self, error: Exception) -> None:
        # Refused credentials or a certificate not trusted will not heal by retrying: say so loudly, once
        # per kind (nats-py keeps retrying, and the engine answers 503 meanwhile).
        if isinstance(error, nats.errors.AuthorizationError | ssl.SSLError) or "authorization violation" in (
            str(error).lower()
        ):
            kind = type(error).__name__
            if self._refusal is not None:
                self._refusal.set()
            if kind not in self._refused:
                self._refused.add(kind)
                logger.error(
                    "NATS refused this process's credentials or TLS (%s: %s): check QUEUECORE_NATS_USER, "
                    "_PASSWORD, _CREDS and _TLS_CA",
                    kind,
                    error,
                )
            return
        logger.info("NATS connection: %s", error)

    async def _recover_forever(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.config.recovery_interval_seconds)
            if self._txns is None:  # not connected yet
                continue
            try:
                await self._txns.ensure_stream(self.streams.duplicate_window_ns(None))
                await self._txns.recover(self.appends.apply)
            except LogEngineError as exc:
                logger.info("transaction recovery skipped this round: %s", exc)
            except Exception:
                logger.exception("transaction recovery failed this round")

    async def take_turn(self, duty: str, holder: str, now_ms: int, ttl_ms: int) -> bool:
        """Turns in a key-value bucket of this cluster (``duties.JetStreamDuties``)."""
        return await self._duties.take_turn(duty, holder, now_ms, ttl_ms)

    def idempotency_records(self, window_seconds: float) -> JetStreamIdempotency:
        """Idempotency records every API node sees, kept ``window_seconds`` (a KV bucket of this cluster)."""
        return JetStreamIdempotency(
            self._jetstream,
            lambda: self.client,
            window_seconds=window_seconds,
            replicas=self.config.default_replicas,
            timeout=self.config.request_timeout_seconds,
        )

    def _connection(self) -> Client:
        if self.nc is None:
            raise EngineUnavailable("not connected to NATS")
        return self.nc

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

    async def _on_gone(self, msg: Any) -> None:
        self._forget(msg.subject[len(_GONE_PREFIX) :])

    def _forget(self, topic_token: str) -> None:
        prefix = codec.STREAM_PREFIX + topic_token + "_"
        self._known.difference_update([n for n in self._known if n.startswith(prefix)])
        self.appends.forget(prefix)
        # Its watchers wake and meet UnknownLog when they look again.
        self.watermarks.forget_prefix(prefix)

    async def export_logs(self, dest: Path) -> list[PartitionExtent]:
        # Every partition stream, read from first_seq to last_seq (``snapshot``).
        async with self._connected() as client:
            names = await self.streams.names(codec.SUBJECT_PREFIX + ">")
            return await snapshot.export_streams(client, names, dest)

    async def import_logs(self, src: Path) -> list[PartitionExtent]:
        # Each stream created with its first_seq and its messages published at their sequences (``snapshot``).
        async with self._connected() as client:
            return await snapshot.import_streams(client, src)

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[JetStreamClient]:
        """The engine's connection; one of its own, closed afterwards, when the engine was not started."""
        if self._client is not None:
            yield self._client
            return
        await self._connect()
        try:
            yield self.client
        finally:
            nc, self.nc, self._client, self._txns = self.nc, None, None, None
            if nc is not None:
                with contextlib.suppress(Exception):
                    await nc.drain()

    async def topic_ids(self) -> set[str]:
        names = await self.streams.names(codec.SUBJECT_PREFIX + ">")
        return {parsed[0] for name in names if (parsed := codec.parse_stream_name(name)) is not None}

    # -- appends and reads (``appends``, ``reads``) ---------------------------------------------------------

    async def append(self, topic_id: str, records: Mapping[int, Sequence[RecordIn]]) -> dict[int, int]:
        return await self.appends.append(topic_id, records)

    def _transactions(self) -> Transactions:
        if self._txns is None:
            raise EngineUnavailable("the JetStream engine is not started")
        return self._txns

    async def read(
        self, topic_id: str, partition: int, offset: int, max_records: int = 100, max_bytes: int = 1 << 20
    ) -> list[Record]:
        return await self.reads.read(topic_id, partition, offset, max_records, max_bytes)

    async def read_columns(
        self, topic_id: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> RecordColumns:
        return await self.reads.read_columns(topic_id, partition, offset, max_records, max_bytes)

    async def offset_for_time(self, topic_id: str, partition: int, timestamp_ms: int) -> int:
        return await self.reads.offset_for_time(topic_id, partition, timestamp_ms)

    async def partition_info(self, topic_id: str, partition: int) -> PartitionInfo:
        return await self.reads.partition_info(topic_id, partition)

    async def describe_partitions(self, topic_id: str, partitions: int) -> list[PartitionInfo]:
        return await self.reads.describe_partitions(topic_id, partitions)

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
                await self.streams.lookup(topic_id, partition)

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
            info = await self.streams.lookup(topic_id, partition)
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
