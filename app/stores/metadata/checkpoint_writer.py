"""How the metadata store writes a push member's checkpoint, and its dedicated commit connection.

A push member (``app/broker/delivery/push.py``) asks the store to checkpoint the partitions it has acks
for: per partition a ``protocol.PartitionCheckpoint`` (its new position, the offsets acked above it, whether acked
rows written earlier may now lie below it). The store decides how:

- **positions only** (acks in order, the common case): one ``UPDATE`` per partition, all in one
  transaction on the ``CommitConnection`` — one round trip per group commit, whatever the number of acks;
- **anything else** (acks out of order, acked rows to drop): a unit of work through the ORM session,
  with the repositories (``partition_repositories``, ``lease_repositories``).

Either way every write is fenced by the partition's epoch and owner: the answer names the partitions the
member was fenced from (it must reconcile).

``CommitConnection`` is one driver connection of its own for that hottest small write. An exactly-once ack
frame is answered once its checkpoint is durable; through the async ORM session that unit of work costs
about 0.8 ms of the event loop's time on SQLite (pool checkout and reset, greenlet hops, one aiosqlite
thread hop per cursor call); straight on the driver about 0.1 ms (``bench/README.md``). It runs a
statement built with SQLAlchemy, compiled once for the store's dialect, for several parameter sets in one
transaction (aiosqlite with the same pragmas as the pool's, or asyncpg), one unit of work at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

from app.stores.errors import StoreUnavailable
from app.stores.metadata.lease_repositories import LeaseRepository
from app.stores.metadata.outages import is_driver_outage
from app.stores.metadata.partition_repositories import CHECKPOINT, PartitionRepository
from app.stores.metadata.protocol import LeaseState, PartitionCheckpoint

if TYPE_CHECKING:
    from app.stores.metadata.database import SqlMetadataStore


def _positions_only(checkpoint: PartitionCheckpoint) -> bool:
    """Only the position moves: no acked rows to write or to drop."""
    return not checkpoint.acked_above and not checkpoint.drop_acked_below


class CheckpointWriter:
    """``write``: a push member's checkpoint of several partitions, in one unit of work
    (``protocol.CheckpointStore``)."""

    def __init__(self, store: SqlMetadataStore) -> None:
        self._store = store
        self.connection = CommitConnection(store.url, store.engine.dialect, store.tls)

    async def write(
        self, group_id: str, member_id: str, checkpoints: Sequence[PartitionCheckpoint]
    ) -> set[int]:
        """Write ``checkpoints`` (all or none); answers the partitions fenced (another owner or epoch:
        nothing is written for those). Outages raise ``StoreUnavailable``."""
        if all(_positions_only(c) for c in checkpoints):
            counts = await self.connection.execute_each(
                CHECKPOINT,
                [
                    {"g": group_id, "p": c.partition, "m": member_id, "e": c.epoch, "pos": c.position}
                    for c in checkpoints
                ],
            )
            return {c.partition for c, count in zip(checkpoints, counts, strict=True) if not count}
        fenced: set[int] = set()
        async with self._store.session() as session:
            partition_rows = PartitionRepository.from_session(session)
            lease_rows = LeaseRepository.from_session(session)
            for c in checkpoints:
                if not await partition_rows.checkpoint(
                    group_id, member_id, c.partition, c.epoch, c.position, release=False
                ):
                    fenced.add(c.partition)
                    continue
                await lease_rows.put_leases(
                    group_id, [LeaseState(c.partition, o, None, 1, 0, True) for o in c.acked_above]
                )
                if c.drop_acked_below:
                    await lease_rows.drop_acked_below_committed(group_id, [c.partition])
        return fenced

    async def close(self) -> None:
        await self.connection.close()


class CommitConnection:
    """``execute_each``: one statement, several parameter sets, one transaction, rowcounts back."""

    def __init__(self, url: str, dialect: Dialect, tls: ssl.SSLContext | None = None) -> None:
        self._url = url
        self._tls = tls  # the pool's: the same server certificate checks
        self._dialect = dialect
        self._is_sqlite = url.startswith("sqlite")
        self._connection: Any = None
        self._lock = asyncio.Lock()
        self._compiled: dict[int, tuple[ClauseElement, str, tuple[str, ...]]] = {}

    async def execute_each(self, statement: ClauseElement, params: list[dict[str, Any]]) -> list[int]:
        """Run ``statement`` once per parameter set, all in one committed transaction; answers the
        rowcount of each. A lost connection is reopened on the next call; outages raise
        ``StoreUnavailable``."""
        sql, names = self._compile(statement)
        rows = [tuple(p[name] for name in names) for p in params]
        async with self._lock:
            try:
                connection = await self._connect()
                if self._is_sqlite:
                    return await self._sqlite(connection, sql, rows)
                return await self._postgres(connection, sql, rows)
            except Exception as error:
                await self._drop()  # whatever it was, the next call starts on a fresh connection
                if is_driver_outage(error):
                    raise StoreUnavailable("The metadata store is unavailable.") from error
                raise

    async def close(self) -> None:
        async with self._lock:
            await self._drop()

    def _compile(self, statement: ClauseElement) -> tuple[str, tuple[str, ...]]:
        cached = self._compiled.get(id(statement))
        if cached is None or cached[0] is not statement:
            compiled = statement.compile(dialect=self._dialect)
            names = tuple(getattr(compiled, "positiontup", None) or ())  # SQLCompiler's, positional styles
            cached = self._compiled[id(statement)] = (statement, compiled.string, names)
        return cached[1], cached[2]

    async def _connect(self) -> Any:
        if self._connection is not None:
            return self._connection
        if self._is_sqlite:
            import aiosqlite

            path = self._url.split("///", 1)[1].split("?", 1)[0]
            connection = await aiosqlite.connect(path, isolation_level=None)
            # The same pragmas as the pool's connections (``database._sqlite_pragmas``).
            for pragma in ("journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON", "busy_timeout=5000"):
                await connection.execute(f"PRAGMA {pragma}")
        else:
            import asyncpg  # type: ignore[import-untyped]

            dsn = "postgresql" + self._url[self._url.index("://") :]
            if self._tls is None:
                connection = await asyncpg.connect(dsn)
            else:  # the context decides; asyncpg would take the URL's ``ssl`` for a server setting
                parts = urlsplit(dsn)
                kept = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("ssl", "sslmode")]
                dsn = urlunsplit(parts._replace(query=urlencode(kept)))
                connection = await asyncpg.connect(dsn, ssl=self._tls)
        self._connection = connection
        return connection

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # it is being thrown away
                await connection.close()

    @staticmethod
    async def _sqlite(connection: Any, sql: str, rows: list[tuple[Any, ...]]) -> list[int]:
        if len(rows) == 1:
            # One statement is its own transaction: SQLite's write lock is held for the statement
            # only, not across event-loop round trips for BEGIN and COMMIT, so the pool's writers
            # (heartbeats) rarely meet it and sleep in SQLite's busy handler.
            cursor = await connection.execute(sql, rows[0])
            return [cursor.rowcount]
        counts: list[int] = []
        await connection.execute("BEGIN IMMEDIATE")  # as the pool's writers: the write lock up front
        try:
            for row in rows:
                cursor = await connection.execute(sql, row)
                counts.append(cursor.rowcount)
            await connection.execute("COMMIT")
        except BaseException:
            await asyncio.shield(connection.execute("ROLLBACK"))
            raise
        return counts

    @staticmethod
    async def _postgres(connection: Any, sql: str, rows: list[tuple[Any, ...]]) -> list[int]:
        counts: list[int] = []
        async with connection.transaction():
            for row in rows:
                status = await connection.execute(sql, *row)  # e.g. "UPDATE 1"
                counts.append(int(status.rsplit(" ", 1)[-1]))
        return counts
