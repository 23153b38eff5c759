"""Group commit on JetStream: the appends that reach one stream (a partition's, or the idempotency
bucket's) while a write to it is in flight are coalesced into the next write, as the local engine's
committer coalesces them into one ``pwritev`` and one fsync.

A write is one JetStream publish: a single message when one append of one record is all there is, else an
atomic batch (ADR-50), which the stream stores as one Raft entry, fsync'd once on each replica. Each such
round trip costs the servers about the same whatever it carries (a single publish under light load cost
the three servers ~1.5 ms of CPU; an atomic batch of 200, ~4 ms), so coalescing is what makes a
partition's thousandth concurrent publish cheap.

- **No added wait.** An append to an idle partition is sent at once; there is no linger timer. Appends
  arriving while a write is in flight queue up, and when it is answered the next write takes them all: the
  batches grow with the load, and one in flight per partition keeps the servers' work per message falling
  as it does. An append that half fills a batch by itself (500 records) gains nothing by waiting: it is
  sent at once, beside the write in flight, as appends were before group commit.
- **Each caller's records stay whole and together.** Appends are packed into batches without splitting
  one: a batch holds whole appends, at most ``max_messages`` records (JetStream's 1,000 a batch) and about
  ``max_bytes``; what does not fit goes into further batches of the same write, sent together (several
  batches in flight, within the stream's limit of 50). An append of more records than one batch holds goes
  alone, as before.
- **Each caller is answered with its own offsets.** A batch's ack names the sequence of its last message;
  each append's records lie just before those of the appends packed after it.
- **All or nothing, per caller.** A batch is stored whole or not at all, so every append in it is; a batch
  that fails fails the appends in it, each of which would have failed alone (an outage, a timeout). What
  one caller could get wrong by itself (a record over the cluster's payload limit) is refused by the
  engine *before* it reaches a writer, so it never fails anyone else's publish.

Appends carrying a message id (a transaction's parts, their roll-forward) are not written here: JetStream
deduplicates a batch by the id on its first message, which a shared batch would give to other callers too.
Records with ids of their own (``codec.DedupedFrame``: keyed publishes) are: each message carries its id.
A batch holding one JetStream has seen is refused whole, so every caller in it hears the error (a 503,
nothing of the batch stored) and retries, as after an outage; that happens only when a keyed message is
sent twice, which the shared idempotency records make rare.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from app.stores.log.jetstream.client import StoredAt
from app.stores.log.protocol import EngineUnavailable

T = TypeVar("T")  # what one message is made of (a record's frame; a bucket's subject, value and headers)


class _Append(Generic[T]):
    """One caller's messages and the future its ``StoredAt`` is set on."""

    __slots__ = ("frames", "future", "size")

    def __init__(self, frames: Sequence[T], future: asyncio.Future[StoredAt], size: int) -> None:
        self.frames = frames
        self.future = future
        self.size = size


class StreamWriter(Generic[T]):
    """Coalesces the appends to one stream (see the module docstring). ``send(messages)`` stores all of them
    or none (one publish, or an atomic batch) and answers where the last landed; ``size`` is a message's
    bytes."""

    def __init__(
        self,
        send: Callable[[Sequence[T]], Awaitable[StoredAt]],
        *,
        size: Callable[[Any], int] = len,
        max_messages: int = 1000,
        max_bytes: int = 8 << 20,
    ) -> None:
        self._send = send
        self._size = size
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._queue: list[_Append[T]] = []
        self._writing: asyncio.Task[None] | None = None
        # An append of this many messages is worth a write of its own: waiting would only delay it.
        self._alone = max(2, max_messages // 2)
        self._own_writes: set[asyncio.Task[None]] = set()
        self.writes = 0  # JetStream publishes sent (batches, and single messages): for tests and metrics

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in flight (the engine drops idle writers)."""
        return self._writing is None and not self._queue and not self._own_writes

    def append(self, frames: Sequence[T]) -> asyncio.Future[StoredAt]:
        """Queue ``frames`` for the next write (starting it now if none is in flight); the future answers
        where the last of them landed, and how many there were."""
        future: asyncio.Future[StoredAt] = asyncio.get_running_loop().create_future()
        item = _Append(frames, future, sum(map(self._size, frames)))
        if self._writing is not None and len(frames) >= self._alone:
            task = asyncio.get_running_loop().create_task(self._write([item]))
            self._own_writes.add(task)
            task.add_done_callback(self._own_writes.discard)
            return future
        self._queue.append(item)
        if self._writing is None:
            self._start()
        return future

    def _start(self) -> None:
        appends, self._queue = self._queue, []
        self._writing = asyncio.get_running_loop().create_task(self._write(appends))
        self._writing.add_done_callback(self._written)

    def _written(self, _: asyncio.Task[None]) -> None:
        self._writing = None
        if self._queue:
            self._start()

    async def _write(self, appends: list[_Append[T]]) -> None:
        try:
            batches = self._pack(appends)
            self.writes += len(batches)
            if len(batches) == 1:
                await self._write_batch(batches[0])
            else:
                await asyncio.gather(*(self._write_batch(batch) for batch in batches))
        finally:
            # Whatever happened, nobody is left waiting (a batch that failed has set its callers already).
            for item in appends:
                if not item.future.done():
                    item.future.set_exception(EngineUnavailable("the write was abandoned"))

    def _pack(self, appends: list[_Append[T]]) -> list[list[_Append[T]]]:
        """Whole appends into batches of at most ``max_messages`` records and about ``max_bytes``."""
        batches: list[list[_Append[T]]] = []
        batch: list[_Append[T]] = []
        count = size = 0
        for item in appends:
            n = len(item.frames)
            if batch and (count + n > self._max_messages or size + item.size > self._max_bytes):
                batches.append(batch)
                batch, count, size = [], 0, 0
            batch.append(item)
            count += n
            size += item.size
        if batch:
            batches.append(batch)
        return batches

    async def _write_batch(self, batch: list[_Append[T]]) -> None:
        frames = batch[0].frames if len(batch) == 1 else [f for item in batch for f in item.frames]
        try:
            stored = await self._send(frames)
        except Exception as exc:  # noqa: BLE001 - every caller of the batch hears it
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        except asyncio.CancelledError:  # the engine is closing: nobody will hear where these landed
            for item in batch:
                item.future.cancel()
            raise
        last = stored.last_seq
        for item in reversed(batch):  # the last append's records end the batch
            if not item.future.done():
                item.future.set_result(StoredAt(last, len(item.frames)))
            last -= len(item.frames)
