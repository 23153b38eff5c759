"""Usage rollups: the usage-metering events (``usage.py``, the internal ``__usage`` topic) added up per
project environment, API key, category and minute / hour / day, by the Spark usage job over the operators'
admin API (``app/api/usage_admin.py``), on any log engine.

How far the rollups got is one offset of the usage topic. A run adds its buckets and moves that offset in
one transaction, from the offset it started at only (compare and set): a crashed, repeated or racing run
never counts an event twice. Events at and after that offset are not rolled up yet: the dashboard adds
them up from the topic itself (``app/dashboard/usage.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from app.broker.errors import Conflict, InvalidRequest
from app.broker.usage import USAGE_TOPIC_ID
from app.stores.log.protocol import LogEngine, Record, UnknownLog
from app.stores.metadata.protocol import GRANULARITIES, MetadataStore, Rollup

SOURCE = USAGE_TOPIC_ID
MAX_ROLLUPS_PER_CALL = 10_000
MAX_EVENTS_PER_PAGE = 10_000


class RollupOffsetMoved(Conflict):
    """Another run moved the rollups' offset first: this run's counts are not added (run again)."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(
            f"The usage rollups are at offset {actual}, not {expected}: another run added these events "
            "first. Nothing was written; start again from the current offset."
        )


@dataclass(frozen=True, slots=True)
class EventPage:
    """Usage events as stored (JSON bytes each), and where the topic stands."""

    records: list[Record]
    next_offset: int
    earliest_offset: int
    latest_offset: int


async def read_events(log: LogEngine, from_offset: int, limit: int) -> EventPage:
    """Up to ``limit`` usage events from ``from_offset`` on (from the earliest kept, if retention removed
    older ones: ``earliest_offset`` then says how many were never rolled up)."""
    if not 1 <= limit <= MAX_EVENTS_PER_PAGE:
        raise InvalidRequest(f"limit must be between 1 and {MAX_EVENTS_PER_PAGE}.")
    if from_offset < 0:
        raise InvalidRequest("fromOffset must not be negative.")
    try:
        info = await log.partition_info(SOURCE, 0)
    except UnknownLog:  # no event was ever written (the engine was down when this process started)
        return EventPage([], from_offset, 0, 0)
    records = (
        await log.read(SOURCE, 0, from_offset, max_records=limit, max_bytes=8 << 20)
        if from_offset < info.latest_offset
        else []
    )
    next_offset = records[-1].offset + 1 if records else max(from_offset, info.earliest_offset)
    return EventPage(records, next_offset, info.earliest_offset, info.latest_offset)


async def next_offset(metadata: MetadataStore) -> int:
    """The first usage event not rolled up yet (0 before the first run)."""
    async with metadata.unit(readonly=True) as uow:
        return await uow.usage.next_offset(SOURCE)


async def buckets(
    metadata: MetadataStore, project_id: str, environment: str, granularity: str, since_ms: int, until_ms: int
) -> tuple[int, list[Rollup]]:
    """Where the rollups stand, and their buckets of one project environment starting in
    ``[since_ms, until_ms)`` (every key and category, oldest first), read together."""
    async with metadata.unit(readonly=True) as uow:
        upto = await uow.usage.next_offset(SOURCE)
        if not upto:
            return 0, []
        rows = await uow.usage.series(
            project_id,
            environment,
            granularity,
            datetime.fromtimestamp(since_ms / 1000, UTC),
            datetime.fromtimestamp(until_ms / 1000, UTC),
        )
        return upto, rows


async def add(metadata: MetadataStore, rows: Sequence[Rollup], *, from_offset: int, to_offset: int) -> None:
    """Add ``rows`` (the counts of the events ``[from_offset, to_offset)``) and move the offset to
    ``to_offset``, in one unit of work; ``RollupOffsetMoved`` (nothing written) when the offset is not at
    ``from_offset``."""
    if to_offset <= from_offset:
        raise InvalidRequest("toOffset must be greater than fromOffset.")
    if len(rows) > MAX_ROLLUPS_PER_CALL:
        raise InvalidRequest(f"At most {MAX_ROLLUPS_PER_CALL} rollups per call; split the events.")
    for row in rows:
        if row.granularity not in GRANULARITIES:
            raise InvalidRequest(f"granularity is one of {', '.join(GRANULARITIES)}.")
    async with metadata.unit() as uow:
        if not await uow.usage.add(rows, source=SOURCE, from_offset=from_offset, next_offset=to_offset):
            # Raised inside the unit: it rolls back, nothing of this run is written.
            raise RollupOffsetMoved(from_offset, await uow.usage.next_offset(SOURCE))
