"""Ack settlement of a push member: the client's ``ack``, ``nack`` and ``extend`` frames, each answered by
``acked`` (or an ``error`` frame). The delivery and beat loops are in ``push.py``; the checkpoint they
write is ``checkpoints.py``. ``AckSettlement`` is composed into the member: it gets the member's
``Holdings`` (the in-memory leases and the write lock it shares with the delivery loop) and three calls
back into the member's loops (reconcile, rejoin, wake), and nothing else of it.

An id is either an **in-memory lease** (a first delivery of a partition the member holds) or a **lease
row** (a redelivery, or a lease of a partition the member has released); each frame settles the first
kind here and hands the rest to the pull path's rules (``leases.ack`` / ``nack`` / ``extend``), rejoining
and trying again when a rebalance made the member stale meanwhile.

- **exactly-once** (``durable`` acks): an ``acked`` answers once the checkpoint that contains the ack is
  written. One task settles the frames; frames that arrive while a checkpoint is being written share the
  next one (several frames per write), each still getting its own ``acked``.
- **at-least-once** (lazy acks): in-memory acks are answered at once; the checkpoint follows within
  ``LAZY_ACK_SECONDS`` (a crash meanwhile may redeliver them, which at-least-once allows).
- **fenced**: a checkpoint refused because the partition changed hands (a rebalance the member has not
  seen yet) makes it reconcile; acks of a partition it lost rather than released are ``ACK_EXPIRED``.
- **nack** turns an in-memory lease into a lease row (the DLQ's retry schedule works on rows) before the
  row path nacks it; **extend** moves an in-memory deadline in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from app.broker import breaker, durations
from app.broker import tracing as spans
from app.broker.delivery import checkpoints, leases
from app.broker.delivery.checkpoints import HeldPartition
from app.broker.delivery.frames import ids_of, parse_client_frame, server_frame
from app.broker.delivery.holdings import Holdings
from app.broker.delivery.membership import MemberRef
from app.broker.delivery.outages import through_outages
from app.broker.errors import (
    CODED_ERRORS,
    CodedError,
    InvalidRequest,
    MemberNotFound,
    StaleGeneration,
    TopicNotFound,
)
from app.broker.topics import TopicRef
from app.kit import tracing
from app.kit.clock import now_ms
from app.stores.log.protocol import LogEngine, UnknownLog
from app.stores.metadata.protocol import MetadataStore

logger = logging.getLogger("queuecore.push")

_SETTLE_ATTEMPTS = 50  # rejoins tolerated while a group churns (each waits for the rebalance in flight)
# How long an exactly-once ack waits out a store outage before it is answered with the error (its offsets
# stay acked in memory and go with the next checkpoint either way).
ACK_OUTAGE_SECONDS = 5.0
LAZY_ACK_SECONDS = 0.05  # at-least-once: acks answered at once are checkpointed this much later, together

Send = Callable[[bytes], Awaitable[None]]
RenderError = Callable[[CodedError], bytes]


class Rejoin(Protocol):
    """The member's rejoin, after a stale generation (or an eviction) seen at ``seen_generation``."""

    async def __call__(self, seen_generation: int, *, evicted: bool = False) -> None: ...


def _dead_letter_flag(frame: dict[str, Any]) -> bool:
    """A nack frame's ``deadLetter`` (absent or null: false); anything but a boolean is refused."""
    value = frame.get("deadLetter")
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest.field("deadLetter", "expected true or false")
    return value


class AckSettlement:
    """The client frames of one ``push.PushMember``, composed into it. It works on the member's
    ``Holdings`` (shared with the delivery loop) and asks the member, through the calls it was given,
    who it is now (``ref``), to reconcile, to rejoin, and to wake its delivery loop."""

    def __init__(
        self,
        holdings: Holdings,
        metadata: MetadataStore,
        log: LogEngine,
        topic: TopicRef,
        group: str,
        *,
        durable: bool,
        max_in_flight: int,
        send: Send,
        render_error: RenderError,
        ref: Callable[[], MemberRef],
        reconcile: Callable[[], Awaitable[set[int]]],
        rejoin: Rejoin,
        wake: Callable[[], None],
    ) -> None:
        self._holdings = holdings
        self._metadata = metadata
        self._log = log
        self._topic = topic
        self._group = group
        self._durable_acks = durable  # answered once checkpointed (exactly-once)
        self._max_in_flight = max_in_flight
        self._send = send
        self._render_error = render_error
        self._ref = ref
        self._reconcile = reconcile
        self._rejoin = rejoin
        self._nudge = wake
        self._counts_outcomes = False  # the group has a DLQ breaker (acks are counted), as of the last beat
        self._stopped = False
        self._acks: list[list[Any]] = []  # ack frames read and not yet settled: their ids
        self._acking: asyncio.Task[None] | None = None
        self._lazy_task: asyncio.Task[None] | None = None

    def count_outcomes(self, breaker: bool) -> None:
        """Whether the group has a DLQ breaker, as the beat's last poll found: if so, acks are counted."""
        self._counts_outcomes = breaker

    def stop(self) -> None:
        """The connection is closing: lazy checkpoints end, and answers that can no longer be sent are
        not errors."""
        self._stopped = True

    async def handle(self, text: str | bytes) -> None:
        """One client frame: ``ack``, ``nack`` or ``extend``, answered by ``acked``; anything malformed
        is answered by an ``error`` frame (the connection stays open)."""
        try:
            frame = parse_client_frame(text)
            if frame["type"] == "ack":
                ids = leases.validate_ids(ids_of(frame))
                if not self._durable_acks and all(self._holdings.is_held(i) for i in ids):
                    if tracing.enabled:
                        with self._settling("ack", ids):
                            await self._ack_lazily(ids)
                    else:
                        await self._ack_lazily(ids)
                    return
                # Settled by one task, several frames per checkpoint when they arrive faster than one
                # is written; each frame still gets its own ``acked``.
                self._acks.append(ids)
                if self._acking is None or self._acking.done():
                    self._acking = asyncio.ensure_future(self._settle_acks())
                return
            if tracing.enabled and frame["type"] == "nack":
                with self._settling("nack", [frame.get("id")]):
                    answer = await self._settle_other(frame)
            else:
                answer = await self._settle_other(frame)
        except UnknownLog:
            await self._send(self._render_error(TopicNotFound(self._topic.name)))
            return
        except CODED_ERRORS as error:
            await self._send(self._render_error(error))
            return
        await self._send(server_frame("acked", ids=answer.ids, failed=answer.failed))

    def _settling(self, operation: str, ids: list[Any]) -> AbstractContextManager[object]:
        """A ``settle`` span around an ack or nack when tracing, else nothing."""
        if not tracing.enabled:
            return contextlib.nullcontext()
        return spans.settling(self._topic.name, self._group, operation, ids)

    def _ack_in_memory(self, ids: list[Any], now: int) -> tuple[dict[str, int], dict[str, str], set[int]]:
        """Mark in-memory leases acked: the ids done (with their partition), per-id failures (deadline
        passed), partitions touched. Ids not held in memory are left to the lease-row path."""
        done: dict[str, int] = {}
        failed: dict[str, str] = {}
        touched: set[int] = set()
        for message_id in ids:
            if not self._holdings.is_held(message_id):
                continue
            p, offset = self._holdings.held[message_id]
            part = self._holdings.parts[p]
            if part.in_flight[offset] <= now:
                failed[message_id] = "ACK_EXPIRED"  # becomes a row, redelivered, at the next pass
                continue
            del part.in_flight[offset], self._holdings.held[message_id]
            self._holdings.in_flight.pop(message_id, None)
            part.acked.add(offset)
            touched.add(p)
            done[message_id] = p
        if done and len(self._holdings.in_flight) + len(done) >= self._max_in_flight:
            self._nudge()  # it was full: room to deliver again (otherwise it is not waiting on acks)
        if done and self._counts_outcomes:
            breaker.outcomes(self._metadata).record(self._holdings.group_id, acked=len(done))
        return done, failed, touched

    async def _ack_lazily(self, ids: list[Any]) -> None:
        """At-least-once: answered at once, checkpointed within ``LAZY_ACK_SECONDS`` (a crash meanwhile
        may redeliver them, which at-least-once allows)."""
        done, failed, _ = self._ack_in_memory(ids, now_ms())
        if self._lazy_task is None or self._lazy_task.done():
            self._lazy_task = asyncio.ensure_future(self._write_lazily())
        await self._send(
            server_frame("acked", ids=list(done), failed=[{"id": i, "code": c} for i, c in failed.items()])
        )

    async def _write_lazily(self) -> None:
        while not self._stopped and any(part.acked for part in self._holdings.parts.values()):
            await asyncio.sleep(LAZY_ACK_SECONDS)
            # Not written: redelivered later, as at-least-once allows.
            with contextlib.suppress(*CODED_ERRORS):
                await self._checkpoint()

    async def _checkpoint(self) -> set[int]:
        """Write the checkpoint of every partition with acks since the last one; answers the partitions
        whose acks were lost (the member had lost them, not released them)."""
        async with self._holdings.writing:
            acked, fenced = await self._write_checkpoint()
        return await self._lost(acked, fenced)

    async def _write_checkpoint(self) -> tuple[list[HeldPartition], set[int]]:
        """Under ``Holdings.writing``: the checkpoint of the partitions with acks; those, and the fenced
        ones."""
        acked = [part for part in self._holdings.parts.values() if part.acked]
        holdings = self._holdings
        fenced = await checkpoints.checkpoint(self._metadata, holdings.group_id, holdings.member_id, acked)
        return acked, fenced

    async def _lost(self, acked: list[HeldPartition], fenced: set[int]) -> set[int]:
        """After a fenced checkpoint: a partition held for its new owner is released with its acks (by
        this reconcile, or by the delivery loop's if it took the lock first), and those acks count."""
        if not fenced:
            return set()
        await self._reconcile()
        return {part.partition for part in acked if part.partition in fenced and not part.released}

    async def _settle_acks(self) -> None:
        try:
            await self._settle_ack_frames()
        except Exception:
            if not self._stopped:
                raise
            logger.debug("acks settled after the connection closed; answers not sent", exc_info=True)

    async def _settle_ack_frames(self) -> None:
        while self._acks:
            frames: list[list[Any]] = [self._acks.pop(0)]
            total = len(frames[0])
            while self._acks and total + len(self._acks[0]) <= leases.MAX_IDS:
                total += len(self._acks[0])
                frames.append(self._acks.pop(0))
            ids = [i for f in frames for i in f]
            # One span for the frames one checkpoint settles.
            with self._settling("ack", ids):
                try:
                    # Under the write lock: no release or checkpoint is half done, so each id is either
                    # an in-memory lease (written by the checkpoint below, or by the release that follows
                    # a fence) or a lease row.
                    acked: list[HeldPartition] = []
                    fenced: set[int] = set()
                    async with self._holdings.writing:
                        done, failed, touched = self._ack_in_memory(ids, now_ms())
                        if touched:
                            # A store blip (a database restart) delays the answer rather than failing it.
                            until = time.monotonic() + ACK_OUTAGE_SECONDS
                            acked, fenced = await through_outages(self._write_checkpoint, until=until)
                    lost = await self._lost(acked, fenced)
                    if not self._durable_acks and lost:
                        lost = set()  # at-least-once: redelivery is allowed
                    for message_id, partition in done.items():
                        if partition in lost:
                            failed[message_id] = "ACK_EXPIRED"
                    rest = [i for i in ids if not (isinstance(i, str) and (i in done or i in failed))]
                    answer = await self._settle({"type": "ack", "ids": rest}) if rest else None
                except CODED_ERRORS as error:
                    for _ in frames:
                        await self._send(self._render_error(error))
                    continue
            ok = set(done) - set(failed)
            codes = dict(failed)
            if answer is not None:
                ok.update(answer.ids)
                codes.update({f["id"]: f["code"] for f in answer.failed})
            for named in frames:
                await self._send(self._acked(named, ok, codes))

    @staticmethod
    def _acked(named: list[Any], ok: set[str], codes: dict[str, str]) -> bytes:
        ids = [str(i) for i in named]
        return server_frame(
            "acked",
            ids=[i for i in ids if i in ok],
            failed=[{"id": i, "code": codes.get(i, "INVALID_REQUEST")} for i in ids if i not in ok],
        )

    async def _settle_other(self, frame: dict[str, Any]) -> leases.Settlement:
        """``nack`` and ``extend``: in-memory leases are turned into rows (nack) or moved in memory
        (extend); the rest take the lease-row path."""
        if frame["type"] == "nack":
            if "id" not in frame:
                raise InvalidRequest.field("id", "required")
            message_id = frame["id"]
            if frame.get("delay") is not None:
                durations.parse_delay(frame["delay"])  # refused before anything changes
            _dead_letter_flag(frame)
            if self._holdings.is_held(message_id):
                p, offset = self._holdings.held[message_id]
                part = self._holdings.parts[p]
                if part.in_flight[offset] <= now_ms():
                    return leases.Settlement([], [{"id": message_id, "code": "ACK_EXPIRED"}])
                async with self._holdings.writing:
                    materialized = await checkpoints.materialize(
                        self._metadata, self._holdings.group_id, self._holdings.member_id, part, [offset]
                    )
                self._holdings.held.pop(message_id, None)
                if not materialized:
                    self._holdings.in_flight.pop(message_id, None)
                    await self._reconcile()
            return await self._settle(frame)
        ids = leases.validate_ids(ids_of(frame))
        seconds = frame.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise InvalidRequest.field(
                "seconds", f"must be a number between 1 and {leases.MAX_EXTEND_SECONDS}"
            )
        if not 1 <= seconds <= leases.MAX_EXTEND_SECONDS:
            raise InvalidRequest.field(
                "seconds", f"must be a number between 1 and {leases.MAX_EXTEND_SECONDS}"
            )
        now = now_ms()
        deadline = now + round(float(seconds) * 1000)
        ok: set[str] = set()
        codes: dict[str, str] = {}
        for message_id in ids:
            if not self._holdings.is_held(message_id):
                continue
            p, offset = self._holdings.held[message_id]
            in_flight = self._holdings.parts[p].in_flight
            if in_flight[offset] <= now:
                codes[message_id] = "ACK_EXPIRED"
                continue
            in_flight[offset] = self._holdings.in_flight[message_id] = deadline
            ok.add(message_id)
        rest = [i for i in ids if not (isinstance(i, str) and (i in ok or i in codes))]
        if rest:
            answer = await self._settle({"type": "extend", "ids": rest, "seconds": seconds})
            ok.update(answer.ids)
            codes.update({f["id"]: f["code"] for f in answer.failed})
        named = [str(i) for i in ids]
        return leases.Settlement(
            [i for i in named if i in ok],
            [{"id": i, "code": codes.get(i, "INVALID_REQUEST")} for i in named if i not in ok],
        )

    async def _settle(self, frame: dict[str, Any]) -> leases.Settlement:
        kind = frame["type"]
        delay_ms: int | None = None
        if kind == "nack":
            if "id" not in frame:
                raise InvalidRequest.field("id", "required")
            if frame.get("delay") is not None:
                delay_ms = durations.parse_delay(frame["delay"])
        ids = ids_of(frame)
        seconds: Any = frame.get("seconds")
        for attempt in range(1, _SETTLE_ATTEMPTS + 1):  # a rebalance meanwhile: rejoin, settle again
            member = self._ref()
            generation = member.generation
            try:
                if kind == "ack":
                    # the delivery loop renews the membership
                    answer = await leases.ack(self._metadata, member, ids, heartbeat=False)
                elif kind == "nack":
                    reason = frame.get("reason")
                    answer = await leases.nack(
                        self._metadata,
                        self._log,
                        member,
                        frame["id"],
                        delay_ms,
                        reason if isinstance(reason, str) else None,
                        dead_letter=_dead_letter_flag(frame),
                    )
                else:
                    answer = await leases.extend(self._metadata, member, ids, seconds)
            except (StaleGeneration, MemberNotFound) as error:
                if attempt == _SETTLE_ATTEMPTS:
                    raise
                await self._rejoin(generation, evicted=isinstance(error, MemberNotFound))
                continue
            break
        if kind == "extend":
            deadline = now_ms() + round(float(seconds) * 1000)
            for message_id in answer.ids:
                if message_id in self._holdings.in_flight:
                    self._holdings.in_flight[message_id] = deadline
        else:
            # Acked, nacked, or failed (expired, unknown): none of them is held by this connection now.
            for message_id in answer.ids:
                self._holdings.in_flight.pop(message_id, None)
            for failed in answer.failed:
                self._holdings.in_flight.pop(failed["id"], None)
            self._nudge()
        return answer
