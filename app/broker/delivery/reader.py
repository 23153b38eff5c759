"""The budgeted reader: new records of a member's partitions, read under a budget, one policy for every
delivery loop.

A delivery pass (a pull poll's ``leases._poll_once``, with SSE and the server-side pull members on it; a
WebSocket member's ``push.PushMember._deliver_new``) reads the records past its member's positions. What
it may read, and in what order, is decided here, once:

- **fair order** — the partitions are read in turn from a random one, so that no partition starves
  another of the budget;
- **what counts** — the budget is messages handed to the caller. Records passed over take none of it:
  offsets leased already past a position (``skip``: acked out of order by a push member, or an earlier
  owner's lease rows), records the group's filter does not match (never delivered: they count as acked,
  and their partition is noted in ``filtered``), and records the ``delays.TimeGate`` holds back (not due
  yet) or finds expired (the gate keeps them, for the caller to write as lease rows);
- **where to stop** — a partition is read on, past what was passed over, until the budget is spent, the
  partition's end is reached (a short read), or ``SCAN_LIMIT`` records of it were read in this pass (the
  rest waits for the next pass); at most ``READ_BYTES`` per read.

What differs between the loops is what they do with what was read, and that is theirs, passed in:

- ``lease(cursor, records, end)``: the records read from one partition (what the budget counts, in
  offset order) and the position past everything read from it. A pull poll leases them as rows in its
  unit of work; a push member holds them in memory (``holdings.py``), after the group's rate and the
  gate's rows. It answers how many it took (fewer when the rate had no token for the rest, none when the
  partition was let go meanwhile): only those count against the budget.
- ``readable(cursor)`` (optional): whether a partition may be read now, asked before and after each
  read (a push member's partition may be released, paused or reconciled away during the read).

The reader costs no await per message and no object per message beyond the list of what it hands over;
it never renders, never writes and never touches the metadata store.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Container, Sequence
from typing import Generic, Protocol, TypeVar

from app.broker import filters
from app.broker.delivery import delays
from app.stores.log.protocol import LogEngine, Record

SCAN_LIMIT = 10_000  # records of a partition one pass may read past ones passed over, at most
READ_BYTES = 8 << 20  # per read of the log


class Cursor(Protocol):
    """A partition as the reader sees it: where to read from, and the offsets there already leased."""

    @property
    def partition(self) -> int: ...

    @property
    def position(self) -> int: ...

    @property
    def skip(self) -> Container[int]: ...


C = TypeVar("C", bound=Cursor)

# What the caller does with what was read from one partition: ``(cursor, records, end) -> taken``.
Lease = Callable[[C, list[Record], int], Awaitable[int]]


class ReadCursor:
    """A ``Cursor`` of a partition whose state the caller keeps elsewhere (a pull poll's rows)."""

    __slots__ = ("partition", "position", "skip")

    def __init__(self, partition: int, position: int, skip: Container[int] = ()) -> None:
        self.partition = partition
        self.position = position
        self.skip = skip


class BudgetedReader(Generic[C]):
    """One delivery pass's reads of new records: the budget, the order, what is passed over, where to
    stop. Built per pass (its gate is the pass's); ``filtered`` collects the partitions where the filter
    passed records over."""

    __slots__ = ("_gate", "_lease", "_log", "_predicate", "_readable", "_topic_id", "filtered")

    def __init__(
        self,
        log: LogEngine,
        topic_id: str,
        gate: delays.TimeGate,
        predicate: filters.Predicate | None,
        lease: Lease[C],
        readable: Callable[[C], bool] | None = None,
    ) -> None:
        self._log = log
        self._topic_id = topic_id
        self._gate = gate
        self._predicate = predicate
        self._lease = lease
        self._readable = readable
        self.filtered: set[int] = set()  # partitions where records were passed over by the filter

    async def read(self, cursors: Sequence[C], budget: int) -> int:
        """Read new records at ``cursors`` for up to ``budget`` messages, handing each partition's to
        ``lease``; answers the budget left."""
        if not cursors:
            return budget
        start = random.randrange(len(cursors))  # no partition starves another of the budget
        for cursor in [*cursors[start:], *cursors[:start]]:
            if budget <= 0:
                break
            budget -= await self._read_partition(cursor, budget)
        return budget

    async def _read_partition(self, cursor: C, budget: int) -> int:
        """One partition, read on past what is passed over; answers what ``lease`` took."""
        readable = self._readable
        if readable is not None and not readable(cursor):
            return 0
        log, topic_id, partition = self._log, self._topic_id, cursor.partition
        skip, predicate, admit = cursor.skip, self._predicate, self._gate.admit
        began = position = cursor.position
        found: list[Record] = []
        scanned = 0
        while budget > 0 and scanned < SCAN_LIMIT:
            asked = budget
            records = await log.read(topic_id, partition, position, max_records=asked, max_bytes=READ_BYTES)
            if not records:
                break
            if readable is not None and not readable(cursor):
                # Let go or paused while reading: nothing of it is delivered, nor its position moved.
                self._gate.forget_from(partition, began)
                return 0
            taken = len(found)
            for record in records:
                if skip and record.offset in skip:
                    continue  # leased already
                if predicate is not None and not predicate(record.key, record.headers):
                    self.filtered.add(partition)  # never delivered: counts as acked
                    continue
                if not admit(partition, record):
                    continue  # not due yet (a lease row due then), or expired
                found.append(record)
            position = records[-1].offset + 1
            scanned += len(records)
            budget -= len(found) - taken
            # The partition's end (a short read), or far enough past what was passed over: the rest waits
            # for the next pass.
            if len(records) < asked or scanned >= SCAN_LIMIT:
                break
        if position == began:
            return 0  # nothing new
        return await self._lease(cursor, found, position)
