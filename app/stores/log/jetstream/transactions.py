"""Appends across partitions, all or nothing, on streams that are atomic one at a time.

JetStream's atomic batch covers one stream, and a partition is a stream. So an append naming several
partitions commits in one place first and is applied to the partitions after, the way the local engine's
transaction log works:

1. **Commit.** The whole append — every record of every partition, cut into chunks — is written as one
   atomic batch to the transaction stream (``QC__TXN``, subject ``qc.txn.<txn id>``), replicated like
   the topics. Once JetStream acknowledges it, the append has happened; before that, nothing has.
2. **Apply.** Each partition's records are appended to its stream as one atomic batch whose first message
   without a message id of its own carries ``Nats-Msg-Id: <txn id>.<partition>``; a keyed record carries
   its own (``codec.DedupedFrame``), kept in the commit record (``codec.DEDUPE_HEADER``) for recovery. The
   partitions are applied concurrently; offsets are taken from each batch's ack.
3. **Done.** The transaction's chunks are purged from ``QC__TXN``.

An apply that fails after step 1 (a partition's stream electing a leader, a NATS node killed) is tried
again at once by the node that committed it (``finish``, in the background, with backoff, for up to
``recover_after`` seconds), so a batch is seen in part only while a partition has no leader, not for the
whole ``recover_after``. A crash (of this API process, or a NATS node) between 1 and 3 leaves the commit
record behind. Every API node runs ``recover`` every few seconds: any transaction older than ``recover_after`` seconds is applied
again partition by partition — a partition it already reached refuses the batch as a duplicate (JetStream
deduplicates atomic batches by ``Nats-Msg-Id`` within the stream's duplicate window, set far above
``recover_after``), the others get their records — and is then purged. Several nodes recovering the same
transaction at once is harmless for the same reason. A commit record stored late (its answer lost, the
publisher told 503) whose keyed records a retry stored meanwhile in a transaction of its own is refused
the same way, part by part, wherever such a record is: the keys stay once (unkeyed records of a part
without any may be stored again, as for any retried publish without a key).

What a reader sees: a partition's part appears when it is applied, never before the commit; a batch whose
commit record was not stored never appears anywhere. What a publisher hears: 2xx only after step 2 for
every partition. A publish that fails after step 1 (503) may still be applied by recovery — as with any
broker, a publish that timed out may have happened; the idempotency key is how a retry stays single.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any

from app.stores.log.jetstream import codec
from app.stores.log.jetstream.client import JetStreamClient, JetStreamError, StoredAt
from app.stores.log.protocol import LogEngineError

logger = logging.getLogger(__name__)

# apply(topic_id, partition, frames, msg_id) -> where it landed; raises AlreadyApplied / UnknownLog.
Apply = Callable[[str, int, Sequence[bytes], str], Awaitable[StoredAt]]

_PAGE = 64
_NO_MESSAGE = 10037  # JetStream's "no message found"


class Transactions:
    """The commit record of multi-partition appends, and their roll-forward (see the module docstring)."""

    def __init__(self, client: JetStreamClient, *, replicas: int, recover_after: float) -> None:
        self.client = client
        self.replicas = replicas
        self.recover_after = recover_after
        self._prefix = os.urandom(6).hex()
        self._ids = itertools.count()
        self._purges: set[asyncio.Task[None]] = set()

    async def ensure_stream(self, duplicate_window_ns: int) -> None:
        config = {
            "name": codec.TXN_STREAM,
            "subjects": [codec.TXN_SUBJECT_PREFIX + ">"],
            "num_replicas": self.replicas,
            "storage": "file",
            "retention": "limits",
            "allow_atomic": True,
            "allow_direct": True,
            "duplicate_window": duplicate_window_ns,
        }
        await _create_or_update(self.client, config)

    def new_id(self) -> str:
        return f"{self._prefix}{next(self._ids)}"

    async def commit(self, txn_id: str, topic_id: str, frames: Mapping[int, Sequence[bytes]]) -> None:
        """Step 1: the append's commit record, stored on a quorum, or an error and nothing stored."""
        subject = codec.TXN_SUBJECT_PREFIX + txn_id
        messages = [
            (subject, chunk, {codec.DEDUPE_HEADER: dedupe} if dedupe else None)
            for partition, part in frames.items()
            for chunk, dedupe in codec.chunks(topic_id, partition, part)
        ]
        await self.client.publish(messages, stream=codec.TXN_STREAM)

    def finish(self, txn_id: str, parts: Mapping[int, Sequence[bytes]], topic_id: str, apply: Apply) -> None:
        """After a failed step 2: apply ``parts`` again in the background until each partition has them
        (an applied one refuses them as a duplicate), then purge; after ``recover_after`` seconds of
        failures, ``recover`` (on any node) takes over."""
        self._background(self._finish(txn_id, parts, topic_id, apply))

    def finish_if_committed(
        self, txn_id: str, parts: Mapping[int, Sequence[bytes]], topic_id: str, apply: Apply
    ) -> None:
        """After a step 1 that went unanswered: its record may be stored all the same (the answer lost, or
        the request delivered late once a cut link healed). Look for it in the background for up to
        ``recover_after`` seconds and finish the transaction as soon as it shows, rather than leave it
        unseen until recovery takes it (``recover_after`` after it was stored, and a round later)."""
        self._background(self._finish_if_committed(txn_id, parts, topic_id, apply))

    async def _finish_if_committed(
        self, txn_id: str, parts: Mapping[int, Sequence[bytes]], topic_id: str, apply: Apply
    ) -> None:
        deadline = time.monotonic() + self.recover_after
        pause = 0.1
        while time.monotonic() + pause < deadline:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)
            try:
                await self.client.api(
                    f"STREAM.MSG.GET.{codec.TXN_STREAM}",
                    {"last_by_subj": codec.TXN_SUBJECT_PREFIX + txn_id},
                    stream=codec.TXN_STREAM,
                )
            except JetStreamError as exc:
                if exc.err_code != _NO_MESSAGE:  # refused outright: recovery looks for it later
                    logger.info("transaction %s not looked up (%s); recovery will", txn_id, exc)
                    return
                continue  # not (yet) there
            except LogEngineError:
                continue  # no answer now: look again
            logger.info("transaction %s was committed although its commit went unanswered", txn_id)
            await self._finish(txn_id, parts, topic_id, apply, deadline)
            return

    async def _finish(
        self,
        txn_id: str,
        parts: Mapping[int, Sequence[bytes]],
        topic_id: str,
        apply: Apply,
        deadline: float | None = None,
    ) -> None:
        deadline = deadline or time.monotonic() + self.recover_after
        pause = 0.1
        missing = dict(parts)
        while missing:
            for partition, frames in list(missing.items()):
                try:
                    await apply(topic_id, partition, frames, f"{txn_id}.{partition}")
                    del missing[partition]
                except LogEngineError as exc:
                    if time.monotonic() + pause > deadline:
                        logger.info("transaction %s not finished yet (%s); recovery will", txn_id, exc)
                        return
            if missing:
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
        logger.info("finished transaction %s after a failed apply", txn_id)
        await self._purge(txn_id)

    def done(self, txn_id: str) -> None:
        """Step 3, off the answer's path: purge the commit record (recovery would, if this is lost)."""
        self._background(self._purge(txn_id))

    async def _purge(self, txn_id: str) -> None:
        try:
            await self.client.api(
                f"STREAM.PURGE.{codec.TXN_STREAM}",
                {"filter": codec.TXN_SUBJECT_PREFIX + txn_id},
                stream=codec.TXN_STREAM,
            )
        except LogEngineError as exc:
            logger.info("commit record %s not purged now (%s); recovery will", txn_id, exc)

    async def recover(self, apply: Apply) -> int:
        """Roll forward every transaction older than ``recover_after``; how many were rolled forward."""
        info = await self.client.api(f"STREAM.INFO.{codec.TXN_STREAM}", stream=codec.TXN_STREAM)
        state = info.get("state", {})
        if not state.get("messages"):
            return 0
        horizon = time.time() - self.recover_after
        pending: dict[str, list[tuple[bytes, str | None]]] = {}
        old: set[str] = set()
        seq = int(state.get("first_seq", 1))
        last = int(state.get("last_seq", 0))
        while seq <= last:
            page = await self.client.direct_get(codec.TXN_STREAM, seq, _PAGE, 8 << 20, headers=True)
            if not page:
                break
            for found_seq, payload, msg in page:
                headers = msg.headers or {}
                txn_id = headers.get("Nats-Subject", "")[len(codec.TXN_SUBJECT_PREFIX) :]
                pending.setdefault(txn_id, []).append((payload, headers.get(codec.DEDUPE_HEADER)))
                if _stored_at(headers.get("Nats-Time-Stamp", "")) < horizon:
                    old.add(txn_id)
                seq = found_seq + 1
        rolled = 0
        for txn_id in old:
            await self.roll_forward(txn_id, pending[txn_id], apply)
            rolled += 1
        return rolled

    async def roll_forward(
        self, txn_id: str, chunks: Sequence[tuple[bytes, str | None]], apply: Apply
    ) -> None:
        """Apply a commit record's parts (``chunks``: each payload with its dedupe header), then purge it."""
        parts: dict[tuple[str, int], list[bytes]] = {}
        for chunk, dedupe in chunks:
            topic_id, partition, frames = codec.read_chunk(chunk, dedupe)
            parts.setdefault((topic_id, partition), []).extend(frames)
        for (topic_id, partition), frames in parts.items():
            await apply(topic_id, partition, frames, f"{txn_id}.{partition}")
        logger.warning("rolled forward transaction %s (%d partitions)", txn_id, len(parts))
        await self._purge(txn_id)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` off the caller's path; ``close`` waits for it."""
        task = asyncio.create_task(work)
        self._purges.add(task)
        task.add_done_callback(self._purges.discard)

    async def close(self) -> None:
        if self._purges:
            await asyncio.gather(*self._purges, return_exceptions=True)


async def _create_or_update(client: JetStreamClient, config: dict[str, object]) -> None:
    name = str(config["name"])
    try:
        await client.api(f"STREAM.CREATE.{name}", config, stream=name)
    except LogEngineError as exc:
        if "already in use" not in str(exc):
            raise


def _stored_at(stamp: str) -> float:
    """Epoch seconds of a ``Nats-Time-Stamp`` (RFC 3339 with nanoseconds, which ``fromisoformat`` refuses)."""
    if not stamp:
        return 0.0
    head, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(fraction + '000000')[:6]}+00:00").timestamp()
