"""The log engine: where messages live.

One protocol, two implementations: ``local`` (segment files on this machine, fsync'd) and ``jetstream``
(a replicated NATS JetStream cluster). The broker only ever talks to this protocol.

A log is addressed by ``(topic_id, partition)``. ``topic_id`` is the metadata id (``top_…``), so two
environments' topics of the same name never share a log and a re-created topic starts empty.

Records are opaque to the engine: ``key``, ``value`` and ``headers`` are bytes the broker encoded
(``value`` is the message's ``data`` as JSON bytes, ``headers`` its header map as JSON bytes). Offsets
start at 0 per partition, are dense, and are assigned by the engine at append.

Every ``append`` is atomic across all the partitions it names and durable before it returns
(``durability`` says on what terms); readers never see records of an append that has not committed.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Protocol, overload, runtime_checkable

from app.stores.errors import StoreUnavailable


@dataclass(frozen=True, slots=True)
class TopicPartition:
    """One partition of one topic."""

    topic_id: str
    partition: int


class RecordIn(NamedTuple):
    """A record handed to the engine to append; the engine assigns its offset.

    A tuple rather than a dataclass: one is built per message on the publish path."""

    value: bytes
    key: bytes | None = None
    headers: bytes | None = None
    timestamp_ms: int = 0
    # What makes the record one of a kind (a keyed publish's idempotency key): an engine that more than one
    # process writes to may store it at most once however often it is sent within its window (a write one
    # node sent, that lands after a retry elsewhere stored it). An engine one process owns ignores it.
    dedupe_id: str | None = None


class ValueRecords(Sequence[RecordIn]):
    """Records that are values alone (no key, no headers) with one timestamp: a batch of bare messages
    without a ``RecordIn`` per message. Items are ``RecordIn``s made when asked for, so any engine can
    treat it as the sequence it is; an engine may read ``values`` and ``timestamp_ms`` directly."""

    __slots__ = ("timestamp_ms", "values")

    def __init__(self, values: Sequence[bytes], timestamp_ms: int = 0) -> None:
        self.values = values
        self.timestamp_ms = timestamp_ms

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> RecordIn: ...

    @overload
    def __getitem__(self, index: slice) -> ValueRecords: ...

    def __getitem__(self, index: int | slice) -> RecordIn | ValueRecords:
        if isinstance(index, slice):
            return ValueRecords(self.values[index], self.timestamp_ms)
        return RecordIn(self.values[index], None, None, self.timestamp_ms, None)

    def __iter__(self) -> Iterator[RecordIn]:
        timestamp_ms = self.timestamp_ms
        return (RecordIn(value, None, None, timestamp_ms, None) for value in self.values)


class Record(NamedTuple):
    """A committed record as read back (a tuple: one is built per record on the read path)."""

    offset: int
    timestamp_ms: int
    value: bytes
    key: bytes | None
    headers: bytes | None


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Committed records of one partition in columns (``LogEngine.read_columns``): per record its offset and
    timestamp, the lengths of its key and headers (-1: none) and of its value, and each of the three fields'
    bytes back to back, in offset order. What a bulk read frames without a ``Record`` per message."""

    offsets: array[int]  # "q"
    timestamps: array[int]  # "q", epoch milliseconds
    key_lengths: array[int]  # "i"
    keys: bytes
    header_lengths: array[int]  # "i"
    headers: bytes
    value_lengths: array[int]  # "i"
    values: bytes

    def __len__(self) -> int:
        return len(self.offsets)

    @classmethod
    def of(cls, records: Sequence[Record]) -> RecordColumns:
        """The columns of ``records`` (one loop over them: for an engine that reads ``Record``s)."""
        keys = [r.key for r in records]
        headers = [r.headers for r in records]
        values = [r.value for r in records]
        return cls(
            array("q", [r.offset for r in records]),
            array("q", [r.timestamp_ms for r in records]),
            array("i", [-1 if k is None else len(k) for k in keys]),
            b"".join([k for k in keys if k is not None]),
            array("i", [-1 if h is None else len(h) for h in headers]),
            b"".join([h for h in headers if h is not None]),
            array("i", map(len, values)),
            b"".join(values),
        )

    @classmethod
    def join(cls, pieces: Sequence[RecordColumns]) -> RecordColumns:
        """``pieces`` one after the other, as one."""
        if len(pieces) == 1:
            return pieces[0]
        offsets, timestamps = array("q"), array("q")
        key_lengths, header_lengths, value_lengths = array("i"), array("i"), array("i")
        for piece in pieces:
            offsets += piece.offsets
            timestamps += piece.timestamps
            key_lengths += piece.key_lengths
            header_lengths += piece.header_lengths
            value_lengths += piece.value_lengths
        return cls(
            offsets,
            timestamps,
            key_lengths,
            b"".join([p.keys for p in pieces]),
            header_lengths,
            b"".join([p.headers for p in pieces]),
            value_lengths,
            b"".join([p.values for p in pieces]),
        )

    def head(self, count: int) -> RecordColumns:
        """The first ``count`` records."""
        if count >= len(self):
            return self
        key_lengths = self.key_lengths[:count]
        header_lengths = self.header_lengths[:count]
        value_lengths = self.value_lengths[:count]
        return RecordColumns(
            self.offsets[:count],
            self.timestamps[:count],
            key_lengths,
            self.keys[: stored_length(key_lengths)],
            header_lengths,
            self.headers[: stored_length(header_lengths)],
            value_lengths,
            self.values[: sum(value_lengths)],
        )

    def records(self) -> list[Record]:
        """The same records as ``Record``s."""
        keys = _cut(self.keys, self.key_lengths)
        headers = _cut(self.headers, self.header_lengths)
        ends = list(accumulate(self.value_lengths))
        values = [self.values[start:end] for start, end in zip([0, *ends], ends, strict=False)]
        return list(map(Record, self.offsets, self.timestamps, values, keys, headers))


def stored_length(lengths: array[int]) -> int:
    """Bytes of a column whose lengths are ``lengths`` (-1, none, counts as 0)."""
    return sum(lengths) + lengths.count(-1)


def _cut(column: bytes, lengths: array[int]) -> list[bytes | None]:
    ends = accumulate(max(0, n) for n in lengths)
    at = 0
    out: list[bytes | None] = []
    for n, end in zip(lengths, ends, strict=True):
        out.append(None if n < 0 else column[at:end])
        at = end
    return out


@dataclass(frozen=True, slots=True)
class Replica:
    """One copy of a partition: the server holding it, the availability zone that server is in (None when
    the engine cannot say), whether it leads (takes the writes), whether it is current (has everything the
    leader acknowledged; a lagging or unreachable one is not), and how far behind the leader it is
    (``lag``: operations not yet applied, 0 for the leader and a caught-up copy; None when unknown, as for
    a copy the leader cannot reach)."""

    server: str
    leader: bool
    current: bool
    zone: str | None = None
    lag: int | None = 0


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """Where a partition stands: first retained offset, next offset to be written, bytes on disk, and where
    its copies live (the leader first; empty when the engine cannot say)."""

    partition: int
    earliest_offset: int
    latest_offset: int
    size_bytes: int
    replicas: tuple[Replica, ...] = ()


@dataclass(frozen=True, slots=True, order=True)
class PartitionExtent:
    """What a copy of one partition's log holds (``LogEngine.export_logs``): offsets ``first_offset`` up to
    ``end_offset`` (exclusive), the next offset to be written."""

    topic_id: str
    partition: int
    first_offset: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class TopicLogConfig:
    """Per-topic engine settings: retention in ms (None keeps forever), and on how many replicas each
    record is stored (``None``: the engine's default, ``LogEngine.default_replicas``)."""

    retention_ms: int | None = None
    retention_bytes: int | None = None
    replicas: int | None = None


class LogEngineError(Exception):
    """Base of the engine's errors."""


class UnknownLog(LogEngineError):
    """The topic or partition has no log in this engine: it never had one, or its topic was deleted (also
    under a call that was under way). Carries a wire ``code`` and ``message`` as ``StoreUnavailable`` does:
    whoever answers the domain's errors answers this one as the deleted topic it is (404
    ``TOPIC_NOT_FOUND``, ``app.broker.errors.CODED_ERRORS``); ``str`` keeps the detail for the server log."""

    code: ClassVar[str] = "TOPIC_NOT_FOUND"
    message: ClassVar[str] = "The topic does not exist in the current environment."
    details: ClassVar[list[dict[str, Any]] | None] = None


class RecordTooLarge(LogEngineError):
    """A record (key + headers + value) larger than the engine stores (``LogEngine.max_record_bytes``).
    Refused before anything of the append is written: the append fails whole, and alone."""


def record_size(record: RecordIn) -> int:
    """Bytes a record counts against ``LogEngine.max_record_bytes``: its key, headers and value."""
    return len(record.value) + len(record.key or b"") + len(record.headers or b"")


def check_record_sizes(records: Sequence[RecordIn], limit: int) -> None:
    """``RecordTooLarge`` if one of ``records`` is over ``limit`` bytes (callers first check the batch's total,
    which is cheap; a record can be too large only when the whole batch is)."""
    for record in records:
        if (size := record_size(record)) > limit:
            raise RecordTooLarge(f"a record of {size} bytes is over the {limit} bytes a record may hold")


class ReplicasUnavailable(LogEngineError):
    """The engine cannot keep as many replicas as a topic asks for (answered as 400)."""


class BackupUnsupported(LogEngineError):
    """This engine cannot export or import its logs (``LogEngine.export_logs``) yet."""


class EngineUnavailable(LogEngineError, StoreUnavailable):
    """The engine cannot meet its durability promise right now (answered as 503, as every store's outage)."""


class Placement(Protocol):
    """Where a message landed, and how long its append took to answer (the broker's ``publishing.Receipt``;
    what an idempotency record keeps for a replay)."""

    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp_ms(self) -> int: ...
    @property
    def latency_ms(self) -> int: ...


class IdempotencyEntry(Placement, Protocol):
    """An idempotency record as read: ``won`` (this claim made it), ``pending``, ``placed`` or ``unknown``;
    where its message landed once ``placed``."""

    @property
    def state(self) -> str: ...
    @property
    def revision(self) -> int: ...
    @property
    def at_ms(self) -> int: ...


class IdempotencyRecords(Protocol):
    """Idempotency keys kept where every API process sees them (``LogEngine.idempotency_records``); how the
    broker uses them is ``app.broker.idempotency``'s."""

    async def claim(self, topic_id: str, key: str, now_ms: int) -> IdempotencyEntry:
        """Create the key's record as ``pending`` (answered as ``won``), or read the one another made first."""
        ...

    async def claim_many(self, topic_id: str, keys: Sequence[str], now_ms: int) -> Sequence[IdempotencyEntry]:
        """``claim`` of each of ``keys`` (distinct), in order; as one write where the engine can."""
        ...

    async def get(self, topic_id: str, key: str) -> IdempotencyEntry | None: ...

    async def place(
        self, topic_id: str, key: str, partition: int, offset: int, timestamp_ms: int, latency_ms: int
    ) -> None:
        """Say where the key's message landed."""
        ...

    async def place_many(self, topic_id: str, placed: Sequence[tuple[str, Placement]]) -> None:
        """``place`` of each ``(key, where its message landed)``; as one write where the engine can."""
        ...

    async def abandon_many(self, topic_id: str, keys: Sequence[str], now_ms: int) -> None:
        """Say the claims' append failed (their messages may or may not be stored: ``unknown``); as one
        write where the engine can."""
        ...

    async def take_over(self, topic_id: str, key: str, revision: int, now_ms: int) -> bool:
        """Claim a stale or ``unknown`` record at ``revision`` (compare-and-set: one taker wins)."""
        ...


@runtime_checkable
class LogEngine(Protocol):
    """A partitioned, durable, append-only log."""

    @property
    def durability(self) -> str:
        """What a successful append guarantees: ``"fsync"`` or ``"replicated:<n>"``."""
        ...

    def durability_for(self, replicas: int) -> str:
        """What an append to a topic of ``replicas`` replicas guarantees, as its answer says it:
        ``"fsync"`` (local) or ``"replicated:<replicas>"``."""
        ...

    @property
    def default_replicas(self) -> int:
        """Replicas of a topic created without saying (1 on the local engine, 3 on JetStream)."""
        ...

    @property
    def replica_choices(self) -> tuple[int, ...]:
        """The replica counts a topic may ask for here (``(1,)`` on the local engine)."""
        ...

    @property
    def max_record_bytes(self) -> int:
        """The largest record (key + headers + value) an append takes; a larger one is ``RecordTooLarge``
        and fails its append alone, before anything is written (never another caller's append that
        the engine writes together with it)."""
        ...

    async def start(self) -> None:
        """Open the engine: recover logs from their last durable state, start background work."""
        ...

    async def close(self) -> None:
        """Flush and close everything; wake all waiters."""
        ...

    async def create_topic(self, topic_id: str, partitions: int, config: TopicLogConfig) -> None:
        """Create empty logs for partitions ``0..partitions-1`` (idempotent)."""
        ...

    async def add_partitions(self, topic_id: str, partitions: int) -> None:
        """Grow a live topic to ``partitions`` partitions; existing ones are untouched."""
        ...

    async def update_config(self, topic_id: str, config: TopicLogConfig) -> None:
        """Change a topic's retention; takes effect at the next retention pass."""
        ...

    async def delete_topic(self, topic_id: str) -> None:
        """Remove every partition of the topic and its files (idempotent)."""
        ...

    async def append(self, topic_id: str, records: Mapping[int, Sequence[RecordIn]]) -> dict[int, int]:
        """Append records to one or more partitions, all or nothing, durable before returning.

        Returns the base offset assigned per partition: the records of partition ``p`` get offsets
        ``base[p], base[p]+1, …`` in the order given.
        """
        ...

    async def read(
        self, topic_id: str, partition: int, offset: int, max_records: int = 100, max_bytes: int = 1 << 20
    ) -> list[Record]:
        """Committed records from ``offset`` on (from the earliest retained if ``offset`` is below it).

        At least one record is returned when one exists at or after ``offset``, even over ``max_bytes``.
        """
        ...

    async def read_columns(
        self, topic_id: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> RecordColumns:
        """The records ``read`` answers (the same, by the same limits), in columns: for a bulk read. An engine
        that stores records in columns slices them out, with no work per record."""
        ...

    async def offset_for_time(self, topic_id: str, partition: int, timestamp_ms: int) -> int:
        """The first offset whose timestamp is ``>= timestamp_ms`` (the latest offset if none)."""
        ...

    async def partition_info(self, topic_id: str, partition: int) -> PartitionInfo:
        """Earliest and latest offsets and the size on disk of one partition, and its copies (their zones
        only as far as the engine knows them without asking: ``describe_partitions`` asks)."""
        ...

    async def describe_partitions(self, topic_id: str, partitions: int) -> list[PartitionInfo]:
        """``partition_info`` of partitions ``0..partitions-1`` in order, at once (an engine that asks a
        server per partition asks concurrently), each copy with the zone of its server."""
        ...

    async def wait_for(self, topic_id: str, partition: int, offset: int, timeout: float) -> bool:
        """Wait until a record at ``offset`` is committed (latest > offset); False on timeout. No polling."""
        ...

    def watch(
        self, topic_id: str, partition: int, offset: int, wake: Callable[[], None]
    ) -> Callable[[], None]:
        """Call ``wake()`` once, on the event loop, when a record at ``offset`` is committed (at once,
        before returning, if one is already), or when the log closes; answers a function that cancels
        the watch. ``wait_for`` without the task: a waiter that watches several partitions is woken
        in the same loop pass as the commit, not a few passes later."""
        ...

    @property
    def exclusive(self) -> bool:
        """True when this process alone creates and deletes logs here (the local engine): a log no topic
        names is then an orphan a start may remove. False where other API processes create logs at the
        same time (JetStream): their streams exist just before their topic rows commit."""
        ...

    def idempotency_records(self, window_seconds: float) -> IdempotencyRecords | None:
        """Idempotency records every API process sees, kept ``window_seconds``; None where one process
        owns the logs (it keeps the keys in its own memory)."""
        ...

    async def take_turn(self, duty: str, holder: str, now_ms: int, ttl_ms: int) -> bool:
        """Whether ``holder`` (one API process) does ``duty`` for every process of this deployment now:
        true until ``now_ms + ttl_ms`` once taken, and renewed by taking it again before then; another
        holder gets it only once that time has passed without a renewal. An exclusive engine has one
        process: always true."""
        ...

    async def enforce_retention(self, now_ms: int) -> int:
        """Drop what is past its topic's retention as of ``now_ms`` (whole segments on the local engine;
        records older by timestamp on JetStream); answers how many segments or streams it cut. The broker's
        ``LogMaintenance`` calls it periodically, on every engine."""
        ...

    async def topic_ids(self) -> set[str]:
        """Ids of every topic this engine holds logs for (internal ones included)."""
        ...

    async def check(self) -> bool:
        """True when the engine can take appends (for health)."""
        ...

    async def health(self) -> str:
        """``"ok"``; ``"degraded"`` when it serves reads but cannot take appends now; ``"down"``."""
        ...

    async def export_logs(self, dest: Path) -> list[PartitionExtent]:
        """Copy every partition's committed records, from its earliest retained offset up to its end at the
        time of the copy or later, into the empty directory ``dest``, while other processes may serve from
        the same logs; answers what each partition's copy holds. Called on an engine that was not started
        (``app.backups``); ``BackupUnsupported`` where the engine cannot."""
        ...

    async def import_logs(self, src: Path) -> list[PartitionExtent]:
        """Load what ``export_logs`` wrote in ``src`` into this engine, which must hold no logs yet (offsets
        are kept); called on an engine that was not started. ``BackupUnsupported`` where it cannot."""
        ...
