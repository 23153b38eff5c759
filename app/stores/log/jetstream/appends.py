"""Appends on JetStream: records framed (``codec``), stored in their partitions' streams, and announced.

Two paths, chosen by how many partitions an append names::

    one partition       the partition's ``StreamWriter`` (group commit): appends that meet there share one
                        atomic batch (ADR-50); the ack's sequence says where each landed
    several partitions  a commit record in ``QC__TXN`` first (``transactions``): from then on the append
                        has happened; then each partition's part alone (one message or an atomic batch)
                        with the message id ``<txn id>.<partition>`` (and keyed records their own), which
                        JetStream deduplicates, so a part recovery applies again (any node, after
                        ``recover_after_seconds``) is stored once

Invariants: nothing is answered before JetStream acknowledged it (a quorum stored it); an append either
answers every partition's base offset or raises, and a committed append that raised is finished in the
background by this node (``Transactions.finish``) rather than left to recovery. After each stored write the
node announces the partition's new end (``watermarks``), so watchers on every node wake.

A stream missing when it is written is told apart from a deleted topic by ``Streams.lookup``: a stream just
created, or electing a leader, answers again in moments (the call is tried again); a stream gone for good is
``UnknownLog``.

Thread-safety: everything runs on the engine's event loop; the writers are per partition stream and are
dropped, once idle, when their topic is deleted (``forget``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial

from nats.aio.client import Client

from app.kit.clock import now_ms
from app.stores.log.jetstream import codec
from app.stores.log.jetstream.client import (
    AlreadyApplied,
    JetStreamClient,
    NoStream,
    StoredAt,
    while_unsettled,
)
from app.stores.log.jetstream.streams import Streams
from app.stores.log.jetstream.transactions import Transactions
from app.stores.log.jetstream.watermarks import Watermarks
from app.stores.log.jetstream.writer import StreamWriter
from app.stores.log.protocol import EngineUnavailable, RecordIn, UnknownLog, check_record_sizes


class Appends:
    """The engine's appends (see the module docstring). Its collaborators come as the engine holds them:
    ``client``, ``connection`` and ``transactions`` answer the connected ones (or raise ``EngineUnavailable``
    before the engine is started), ``max_record_bytes`` the limit the server's max_payload sets."""

    def __init__(
        self,
        client: Callable[[], JetStreamClient],
        connection: Callable[[], Client | None],
        transactions: Callable[[], Transactions],
        streams: Streams,
        watermarks: Watermarks,
        max_record_bytes: Callable[[], int],
    ) -> None:
        self._client = client
        self._connection = connection
        self._transactions = transactions
        self._streams = streams
        self._watermarks = watermarks
        self._max_record_bytes = max_record_bytes
        self.writers: dict[str, StreamWriter[bytes]] = {}  # group commit, per partition stream

    async def append(self, topic_id: str, records: Mapping[int, Sequence[RecordIn]]) -> dict[int, int]:
        """``LogEngine.append``: every partition's base offset, once all of it is stored."""
        parts = {p: rs for p, rs in records.items() if rs}
        if not parts:
            return {}
        for partition in parts:
            if partition < 0:
                raise UnknownLog(f"no partition {partition}")
            if codec.stream_name(topic_id, partition) not in self._streams.known:
                await self._streams.lookup(topic_id, partition)
        stamp = now_ms()
        # A record with a dedupe id goes as a DedupedFrame, with its Nats-Msg-Id: sent twice (a node's
        # append that lands after a retry elsewhere stored it), JetStream refuses the second (its whole
        # batch: a 503, nothing of that batch stored). So does a transaction's part, whose commit record
        # keeps its records' ids for recovery (codec.chunks): a late commit record rolled forward after a
        # retry stored its keyed record is refused where that record is, not stored twice.
        frames = {p: [codec.encode_deduped(r, stamp) for r in rs] for p, rs in parts.items()}
        # Refused here, before a writer coalesces it with others' records, which NATS would refuse with it.
        limit = self._max_record_bytes()
        for p, part in frames.items():
            if max(map(len, part)) - codec.FRAME_BYTES > limit:
                check_record_sizes(parts[p], limit)
        if len(frames) == 1:
            [(partition, part)] = frames.items()
            stored = await self.store(topic_id, partition, part, None)
            return {partition: stored.last_seq - stored.count}
        txns = self._transactions()
        txn_id = txns.new_id()
        try:
            await txns.commit(txn_id, topic_id, frames)
        except EngineUnavailable:
            # Unanswered, so perhaps stored: finished as soon as it shows (not in recover_after seconds).
            txns.finish_if_committed(txn_id, frames, topic_id, self.apply)
            raise
        outcomes = await asyncio.gather(
            *(self.store(topic_id, p, part, f"{txn_id}.{p}") for p, part in frames.items()),
            return_exceptions=True,
        )
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed:
            # Committed: it will happen. Finish it now rather than in recover_after seconds, so readers see
            # it in part only while a partition has no leader. The publisher hears 503 (as before).
            txns.finish(txn_id, frames, topic_id, self.apply)
            raise failed[0]
        placed = [o for o in outcomes if not isinstance(o, BaseException)]
        txns.done(txn_id)
        return {p: stored.last_seq - stored.count for p, stored in zip(frames, placed, strict=True)}

    async def store(
        self,
        topic_id: str,
        partition: int,
        frames: Sequence[bytes],
        msg_id: str | None,
        *,
        recovering: bool = False,
    ) -> StoredAt:
        """Store one partition's frames: through its writer, or alone when ``msg_id`` (a transaction's part)
        must be deduplicated."""
        name = codec.stream_name(topic_id, partition)
        call: Callable[[], Awaitable[StoredAt]]
        if msg_id is None:
            writer = self.writers.get(name) or self._writer(topic_id, partition)
            call = partial(writer.append, frames)
        else:
            call = partial(self._append_with_id, topic_id, partition, frames, msg_id)

        try:
            # A stream just created, or electing a leader, answers again in moments; gone altogether
            # (``Streams.lookup`` after each try), it is UnknownLog. Nothing was stored by a NoStream.
            return await while_unsettled(
                call, NoStream, between=lambda: self._streams.lookup(topic_id, partition)
            )
        except NoStream:
            await self._streams.lookup(topic_id, partition)
            raise EngineUnavailable(f"stream {name} has no leader right now") from None
        except EngineUnavailable:
            # Unanswered: the stream may have gone with its topic meanwhile (then nothing of it is left).
            await self._streams.unless_deleted(topic_id, partition)
            raise
        except AlreadyApplied:
            if recovering:
                return StoredAt(0, 0)
            if msg_id is None:  # a record's own id, seen: a copy of it is stored, this write is not
                raise EngineUnavailable(
                    "a message of this write was stored before (its idempotency key's message id): "
                    "nothing of the write was stored"
                ) from None
            # Recovery applied this part first (only after recover_after seconds): the batch is committed,
            # but where it landed is not known here.
            raise EngineUnavailable("the append was committed, but its offsets are unknown") from None

    async def _append_with_id(
        self, topic_id: str, partition: int, frames: Sequence[bytes], msg_id: str
    ) -> StoredAt:
        """An append JetStream deduplicates by ``msg_id`` (a transaction's part): alone, never coalesced."""
        name = codec.stream_name(topic_id, partition)
        stored = await self._client().append(
            codec.subject(topic_id, partition), frames, msg_id=msg_id, stream=name
        )
        await self._announce(name, stored)
        return stored

    def _writer(self, topic_id: str, partition: int) -> StreamWriter[bytes]:
        """The partition's group committer: one JetStream publish (and one notice) per coalesced write."""
        name, subject = codec.stream_name(topic_id, partition), codec.subject(topic_id, partition)

        async def send(frames: Sequence[bytes]) -> StoredAt:
            stored = await self._client().append(subject, frames, stream=name)
            await self._announce(name, stored)
            return stored

        writer = self.writers[name] = StreamWriter(send)
        return writer

    async def _announce(self, name: str, stored: StoredAt) -> None:
        nc = self._connection()
        assert nc is not None
        await self._watermarks.announce(nc, name, stored.last_seq)

    async def apply(self, topic_id: str, partition: int, frames: Sequence[bytes], msg_id: str) -> StoredAt:
        """Recovery's apply: an already-applied part, or a deleted topic's, is done."""
        try:
            return await self.store(topic_id, partition, frames, msg_id, recovering=True)
        except UnknownLog:
            return StoredAt(0, 0)

    def forget(self, stream_prefix: str) -> None:
        """Drop the idle writers of the streams named ``stream_prefix…`` (a deleted topic's)."""
        for name in [n for n, writer in self.writers.items() if n.startswith(stream_prefix) and writer.idle]:
            del self.writers[name]
