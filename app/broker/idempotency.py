"""Idempotency across API nodes: the keys of a topic live in records every node sees (on the JetStream
engine, ``app.stores.log.jetstream.idempotency``; ``LogEngine.idempotency_records``), not in one process's
memory.

A publish carrying keys claims each distinct key first. For each key:

- **won** — nobody had it: the message is appended with the others, then the record says where it is
  (``placed``); if the append fails, it says ``unknown`` (a 503 may still have stored it).
- **placed** — the original result is answered again (``Idempotent-Replayed: true``), nothing appended.
- **pending** — another request (on any node) is appending it: wait for it to be placed. If it stays
  pending past ``stale_after`` (its node died mid-append) or says ``unknown``, look for the key in the
  log from the claim's time on: found, it is placed there and answered; not found, this request takes the
  record over (compare-and-set: one taker) and appends the message itself.

Keys repeated inside one batch are appended once and answer the first one's result, as in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from app.kit.clock import now_ms
from app.stores.log.protocol import IdempotencyEntry, IdempotencyRecords, LogEngine, Placement, Record

_SKEW_MS = 5_000  # clocks of API nodes differ; a scan starts this much before the claim
_WAIT_STEP = 0.05


P = TypeVar("P", bound=Placement)


class SharedIdempotency:
    """Append-once across nodes (see the module docstring)."""

    def __init__(self, records: IdempotencyRecords, log: LogEngine, *, stale_after: float = 15.0) -> None:
        self.records = records
        self.log = log
        self.stale_after = stale_after

    async def append(
        self,
        topic_id: str,
        partitions: int,
        keys: Sequence[str | None],
        write: Callable[[list[int]], Awaitable[Sequence[P]]],
        placed: Callable[[int, int, int, int], P],
        key_of: Callable[[Record], str | None],
    ) -> tuple[list[P], list[bool]]:
        """Write the messages whose keys are new (``write(indexes)`` answers their placements in order);
        answer every message's placement and whether it was a replay."""
        results: list[P | None] = [None] * len(keys)
        replayed = [False] * len(keys)
        first_of: dict[str, int] = {}
        repeats: list[tuple[int, str]] = []
        fresh: list[int] = []
        for i, key in enumerate(keys):
            if key is None:
                fresh.append(i)
            elif key in first_of:
                repeats.append((i, key))
            else:
                first_of[key] = i
        stamp = now_ms()
        claims = await self.records.claim_many(topic_id, list(first_of), stamp)
        won: list[str] = []
        for (key, i), entry in zip(first_of.items(), claims, strict=True):
            if entry.state == "won":
                won.append(key)
                fresh.append(i)
                continue
            found = await self._settled(topic_id, partitions, key, entry, placed, key_of)
            if found is None:  # taken over: ours to write
                won.append(key)
                fresh.append(i)
            else:
                results[i], replayed[i] = found, True
        fresh.sort()
        if fresh:
            try:
                written = await write(fresh)
            except BaseException:
                # Stamped with this request's start, not now: the append may have stored its messages (an
                # ack lost) long before it failed, and a retry looks in the log from this stamp (less the
                # skew) on. From the failure's time it began after them and stored them again.
                with contextlib.suppress(Exception):  # the append's own error is the caller's
                    await self.records.abandon_many(topic_id, won, stamp)
                raise
            for i, landed in zip(fresh, written, strict=True):
                results[i] = landed
            settled = [(key, at) for key in won if (at := results[first_of[key]]) is not None]
            await self.records.place_many(topic_id, settled)
        for i, key in repeats:
            results[i], replayed[i] = results[first_of[key]], True
        return [r for r in results if r is not None], replayed

    async def _settled(
        self,
        topic_id: str,
        partitions: int,
        key: str,
        entry: IdempotencyEntry,
        placed: Callable[[int, int, int, int], P],
        key_of: Callable[[Record], str | None],
    ) -> P | None:
        """Where another request put ``key``'s message, once it has; None when this one must write it."""
        deadline = time.monotonic() + self.stale_after
        current: IdempotencyEntry | None = entry
        while True:
            if current is None:  # expired meanwhile: a fresh claim
                current = await self.records.claim(topic_id, key, now_ms())
                if current.state == "won":
                    return None
            if current.state == "placed":
                return placed(current.partition, current.offset, current.timestamp_ms, current.latency_ms)
            stale = current.state == "unknown" or now_ms() - current.at_ms > self.stale_after * 1000
            if stale or time.monotonic() > deadline:
                where = await self._find(topic_id, partitions, key, current.at_ms - _SKEW_MS, key_of)
                if where is not None:
                    partition, record = where
                    await self.records.place(topic_id, key, partition, record.offset, record.timestamp_ms, 0)
                    return placed(partition, record.offset, record.timestamp_ms, 0)
                if await self.records.take_over(topic_id, key, current.revision, now_ms()):
                    return None
                deadline = time.monotonic() + self.stale_after  # someone else took it: wait for them
            await asyncio.sleep(_WAIT_STEP)
            current = await self.records.get(topic_id, key)

    async def _find(
        self, topic_id: str, partitions: int, key: str, since_ms: int, key_of: Callable[[Record], str | None]
    ) -> tuple[int, Record] | None:
        """The record carrying ``key`` stored since ``since_ms``, if any (a rare path: after a failure)."""
        for partition in range(partitions):
            offset = await self.log.offset_for_time(topic_id, partition, since_ms)
            while True:
                batch = await self.log.read(topic_id, partition, offset, max_records=1000, max_bytes=4 << 20)
                if not batch:
                    break
                for record in batch:
                    if key_of(record) == key:
                        return partition, record
                offset = batch[-1].offset + 1
        return None


def shared_idempotency(log: LogEngine, window_ms: int) -> SharedIdempotency | None:
    """Append-once across nodes where the engine keeps idempotency records every API process sees; None
    where one process owns the logs (its publisher keeps the keys in memory)."""
    records = log.idempotency_records(window_ms / 1000)
    return SharedIdempotency(records, log) if records is not None else None
