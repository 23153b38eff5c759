"""Idempotency records every API node sees: a JetStream key-value bucket (``QC_IDEMPOTENCY``), replicated like
the topics, each entry kept for the dedup window (24 h) after its last write.

One entry per (topic, idempotency key), under ``<topic id>.<sha256 of the key>``. Its value says where the
key's message is::

    {"s": "pending", "at": ms}              a node claimed the key and is appending its message
    {"s": "placed", "p": 0, "o": 41, "t": ms, "l": 3}   at partition p, offset o, stamped t (l: latency)
    {"s": "unknown", "at": ms}              the append failed in a way that may still have stored it

A claim is a create-if-absent: of two nodes claiming one key at once, exactly one wins; the other reads the
entry (``app.broker.idempotency`` says what it does then).

Claims and puts are group-committed (``writer.StreamWriter``, as partition appends are): the claims that
arrive while a claim write is in flight go together in the next one, as one atomic batch whose every
message expects its key to be new (``Nats-Expected-Last-Subject-Sequence: 0``); puts likewise, in a
writer of their own. A claim batch is refused whole when one of its keys exists (a retry of a key
already claimed, which is rare): each of its claims is then made alone, which says exactly which won.
So a keyed publish costs two small shares of Raft rounds beside its append, not two rounds of its own.

A bucket without a leader (just created, or electing one after a server died) has no responders: nothing
received the request, so nothing was written, and each call is retried for about 2 s before it is
``EngineUnavailable`` (as the engine does for its partition streams). Without that, the first keyed
publishes on a new cluster answered 503 (the crash soak found it: the bucket's stream existed, its leader
not yet).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors
import orjson
from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import (
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from nats.js.kv import KeyValue

from app.stores.log.jetstream.client import (
    KV_UNSETTLED,
    JetStreamClient,
    JetStreamError,
    Message,
    NoStream,
    StoredAt,
    open_bucket,
    while_unsettled,
)
from app.stores.log.jetstream.writer import StreamWriter
from app.stores.log.protocol import EngineUnavailable, LogEngineError, Placement

BUCKET = "QC_IDEMPOTENCY"
_NEW = {"Nats-Expected-Last-Subject-Sequence": "0"}
_CLAIM_TRIES = 40  # about 4 s of a key contended without an entry to read: longer is an outage

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IdempotencyEntry:
    """An entry as read: its state, its fields and the revision a compare-and-set names."""

    state: str  # "won" (this claim created it), "pending", "placed" or "unknown"
    revision: int
    at_ms: int = 0
    partition: int = 0
    offset: int = 0
    timestamp_ms: int = 0
    latency_ms: int = 0


class JetStreamIdempotency:
    """The shared idempotency records (see the module docstring)."""

    def __init__(
        self,
        js: Callable[[], JetStreamContext],
        client: Callable[[], JetStreamClient],
        *,
        window_seconds: float,
        replicas: int,
        timeout: float,
        bucket: str = BUCKET,
    ) -> None:
        self._js = js  # answers the context once connected, raises EngineUnavailable before
        self._client = client  # likewise, the engine's client (the group-committed writes)
        self._window_seconds = window_seconds
        self._replicas = replicas
        self._timeout = timeout
        self._bucket_name = bucket
        self._kv: KeyValue | None = None
        self._opening = asyncio.Lock()  # one lookup (or creation) of the bucket, not one per caller
        self._stream = "KV_" + bucket
        self._claims: StreamWriter[Message] = StreamWriter(self._write, size=_message_size)
        self._puts: StreamWriter[Message] = StreamWriter(self._write, size=_message_size)

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            async with self._opening:
                if self._kv is None:
                    self._kv = await self._open()
        return self._kv

    async def _open(self) -> KeyValue:
        kv = await self._open_bucket()
        # Group-committed writes are atomic batches, which a stream takes only when it allows them.
        client = self._client()
        info = await client.api(f"STREAM.INFO.{self._stream}", stream=self._stream)
        if not info["config"].get("allow_atomic"):
            config = {**info["config"], "allow_atomic": True}
            await client.api(f"STREAM.UPDATE.{self._stream}", config, stream=self._stream)
        return kv

    async def _write(self, messages: Sequence[Message]) -> StoredAt:
        return await self._client().publish(messages, stream=self._stream)

    async def _open_bucket(self) -> KeyValue:
        try:
            config = KeyValueConfig(
                bucket=self._bucket_name,
                history=1,
                ttl=self._window_seconds,
                replicas=self._replicas,
                storage=StorageType.FILE,
            )
            return await open_bucket(self._js(), config)
        except (nats.errors.Error, TimeoutError) as exc:
            raise EngineUnavailable(f"idempotency records unavailable: {type(exc).__name__}") from exc

    async def claim(self, topic_id: str, key: str, now_ms: int) -> IdempotencyEntry:
        """Create the key's entry as ``pending`` (state ``won``), or read the entry another made first."""
        return await self._claim(topic_id, key, now_ms, batched=True)

    async def _claim(self, topic_id: str, key: str, now_ms: int, *, batched: bool) -> IdempotencyEntry:
        """``claim``; with ``batched``, its first try goes with the claims of other calls."""
        kv = await self._bucket()
        name = _name(topic_id, key)
        value = orjson.dumps({"s": "pending", "at": now_ms})
        for attempt in range(_CLAIM_TRIES):
            revision = await self._create(kv, name, value, batched=batched and attempt == 0)
            if revision is not None:
                return IdempotencyEntry("won", revision, at_ms=now_ms)
            found = await self.get(topic_id, key)
            if found is not None:
                return found
            # Refused, yet nothing to read: another claim of the key is being stored this instant (JetStream
            # refuses a second expectation on a subject in flight), or the entry expired between the calls.
            await asyncio.sleep(0.005 * (attempt + 1))
        raise EngineUnavailable("idempotency record not claimed: the key stayed contended")

    async def claim_many(self, topic_id: str, keys: Sequence[str], now_ms: int) -> list[IdempotencyEntry]:
        """``claim`` of each of ``keys`` (distinct), in order: one atomic write of every claim when all are
        new (a batch's keys, the common case). JetStream refuses the write whole when one of them exists (a
        retry), or one of another call's claims written with it does: the entries are read, and the keys
        found nowhere are claimed again together, then alone."""
        return await self._claim_many(topic_id, keys, now_ms, together=2)

    async def _claim_many(
        self, topic_id: str, keys: Sequence[str], now_ms: int, *, together: int
    ) -> list[IdempotencyEntry]:
        if len(keys) <= 1 or not together:  # one key still goes with other calls' claims
            alone = [self._claim(topic_id, key, now_ms, batched=bool(together)) for key in keys]
            return list(await asyncio.gather(*alone))
        await self._bucket()
        value = orjson.dumps({"s": "pending", "at": now_ms})
        subject = self._subject(f"{topic_id}.")
        claims: list[Message] = [(subject + _digest(key), value, _NEW) for key in keys]
        try:
            stored = await while_unsettled(lambda: self._claims.append(claims), NoStream)
        except JetStreamError:
            found = await asyncio.gather(*(self.get(topic_id, key) for key in keys))
            missing = [i for i, entry in enumerate(found) if entry is None]
            claimed = await self._claim_many(
                topic_id, [keys[i] for i in missing], now_ms, together=together - 1
            )
            entries = list(found)
            for i, entry in zip(missing, claimed, strict=True):
                entries[i] = entry
            return [entry for entry in entries if entry is not None]
        first = stored.last_seq - len(keys) + 1
        return [IdempotencyEntry("won", first + i, at_ms=now_ms) for i in range(len(keys))]

    async def _create(self, kv: KeyValue, name: str, value: bytes, *, batched: bool) -> int | None:
        """The new entry's revision; None when JetStream refused it (the key exists, or is being claimed)."""
        if batched:
            try:
                claim = [(self._subject(name), value, _NEW)]
                stored = await while_unsettled(lambda: self._claims.append(claim), NoStream)
                return stored.last_seq
            except JetStreamError:
                pass  # this key, or another of its batch, exists: claimed alone below, which says which
        try:
            return await _answered(lambda: kv.create(name, value))
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            # nats-py reads the entry after a refusal (for a deleted key's marker): nothing there yet means
            # another claim of this key is in flight.
            return None
        except (nats.errors.Error, TimeoutError) as exc:
            raise EngineUnavailable(f"idempotency record not claimed: {type(exc).__name__}") from exc

    async def get(self, topic_id: str, key: str) -> IdempotencyEntry | None:
        kv = await self._bucket()
        try:
            entry = await _answered(lambda: kv.get(_name(topic_id, key)))
        except KeyNotFoundError:
            return None
        except (nats.errors.Error, TimeoutError) as exc:
            raise EngineUnavailable(f"idempotency record not read: {type(exc).__name__}") from exc
        value: dict[str, Any] = orjson.loads(entry.value or b"{}")
        return IdempotencyEntry(
            str(value.get("s", "unknown")),
            int(entry.revision or 0),
            at_ms=int(value.get("at", 0)),
            partition=int(value.get("p", 0)),
            offset=int(value.get("o", 0)),
            timestamp_ms=int(value.get("t", 0)),
            latency_ms=int(value.get("l", 0)),
        )

    async def place(
        self, topic_id: str, key: str, partition: int, offset: int, timestamp_ms: int, latency_ms: int
    ) -> None:
        """The key's message is stored: every node answers its retries from here on (the same answer)."""
        await self._put(topic_id, [(key, _placed(partition, offset, timestamp_ms, latency_ms))])

    async def place_many(self, topic_id: str, placed: Sequence[tuple[str, Placement]]) -> None:
        """``place`` of each ``(key, where its message landed)``, as one write."""
        await self._put(
            topic_id,
            [(key, _placed(at.partition, at.offset, at.timestamp_ms, at.latency_ms)) for key, at in placed],
        )

    async def abandon_many(self, topic_id: str, keys: Sequence[str], now_ms: int) -> None:
        """The append failed and may or may not have stored the keys' messages: a retry looks in the log
        (one write)."""
        await self._put(topic_id, [(key, {"s": "unknown", "at": now_ms}) for key in keys])

    async def take_over(self, topic_id: str, key: str, revision: int, now_ms: int) -> bool:
        """Make a stale entry ours (``pending`` again), if nobody changed it since ``revision``."""
        kv = await self._bucket()
        try:
            value = orjson.dumps({"s": "pending", "at": now_ms})
            await _answered(lambda: kv.update(_name(topic_id, key), value, last=revision))
            return True
        except KeyWrongLastSequenceError:
            return False
        except (nats.errors.Error, TimeoutError) as exc:
            raise EngineUnavailable(f"idempotency record not taken over: {type(exc).__name__}") from exc

    async def _put(self, topic_id: str, values: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Write each key's entry (one write, all or none)."""
        if not values:
            return
        await self._bucket()
        subject = self._subject(f"{topic_id}.")
        put: list[Message] = [(subject + _digest(key), orjson.dumps(value), None) for key, value in values]
        try:
            await while_unsettled(lambda: self._puts.append(put), NoStream)
        except EngineUnavailable:
            raise
        except LogEngineError as exc:  # refused by JetStream: the record is not written, as in an outage
            raise EngineUnavailable(f"idempotency record not written: {exc}") from exc

    def _subject(self, name: str) -> str:
        return f"$KV.{self._bucket_name}.{name}"


async def _answered(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, again while the bucket has no leader to answer it, or the link is down (nothing was sent);
    the last try's error is the caller's ``EngineUnavailable``."""
    return await while_unsettled(call, KV_UNSETTLED)


def _message_size(message: Message) -> int:
    return len(message[0]) + len(message[1])


def _placed(partition: int, offset: int, timestamp_ms: int, latency_ms: int) -> dict[str, Any]:
    """A ``placed`` entry's value."""
    return {"s": "placed", "p": partition, "o": offset, "t": timestamp_ms, "l": latency_ms}


def _name(topic_id: str, key: str) -> str:
    return f"{topic_id}.{_digest(key)}"


def _digest(key: str) -> str:
    # Keys are any string; KV keys are not: the hash is the name.
    return hashlib.sha256(key.encode()).hexdigest()[:40]
