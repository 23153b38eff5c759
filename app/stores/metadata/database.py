"""The metadata database handle: one async engine and session factory, Postgres or SQLite.

``session()`` is the one place a metadata transaction is opened, committed or rolled back; ``unit()``
hands the same transaction out as the port's unit of work (``protocol.MetadataUnit``), and
``run_unit`` / ``transaction`` run one again when the database broke a lock conflict by failing it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import event, exc, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from app.stores.errors import StoreConflict, StoreUnavailable
from app.stores.metadata.checkpoint_writer import CheckpointWriter
from app.stores.metadata.outages import TRANSPORT, is_outage
from app.stores.metadata.protocol import MetadataUnit
from app.stores.metadata.unit import SqlMetadataUnit

# Postgres broke a lock conflict by failing one side: deadlock detected, serialization failure.
_CONFLICTS = frozenset({"40P01", "40001"})
TRANSACTION_ATTEMPTS = 4
STATEMENT_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 5.0

logger = logging.getLogger("queuecore.metadata")
T = TypeVar("T")


def _is_conflict(error: exc.DBAPIError) -> bool:
    return getattr(error.orig, "sqlstate", None) in _CONFLICTS


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # The driver would BEGIN only before DML, leaving SELECTs of a unit of work outside its transaction
    # (a check-then-insert race); we issue BEGIN ourselves (``_sqlite_begin``).
    dbapi_connection.isolation_level = None
    # WAL lets the CLI and the server share the file; busy_timeout waits out the other writer.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # FULL: every commit fsyncs the WAL before it returns, so what was answered survives a power loss.
    # NORMAL (WAL's usual pairing) syncs only at checkpoints: a crash of the process loses nothing, but
    # a power loss lost every commit since the last checkpoint - in the power-loss fault runs the topic
    # itself, acks of an exactly-once topic (delivered again), API keys (docs/reliability.md, "Power
    # loss"). The price is one fsync per metadata commit (group-committed acks share one).
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


def _sqlite_begin(connection: Any) -> None:
    # IMMEDIATE takes the write lock up front, so a unit of work's reads and writes are serialised with
    # every other writer's (WAL readers are not blocked). Read-only units of work take a plain BEGIN: a
    # consistent snapshot without queueing behind writers.
    readonly = connection.get_execution_options().get("queuecore_readonly", False)
    connection.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")


async def _discard(session: AsyncSession) -> None:
    """After an outage or a timeout: drop the session's connections without a ROLLBACK (a stalled server
    would never answer one; SQLAlchemy closes them with a bounded wait, then by force)."""
    try:
        await session.invalidate()
    except Exception:  # the connection is being thrown away whatever went wrong
        logger.debug("discarding a metadata connection failed", exc_info=True)


class SqlMetadataStore:
    """Owns the async engine; hands out sessions; answers the health check."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        statement_timeout: float = STATEMENT_TIMEOUT_SECONDS,
        connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``tls``: the context a Postgres server's certificate is checked with (its CA; it wins over the
        URL's ``ssl`` mode, which asyncpg would otherwise follow)."""
        self.url = url
        self.tls = tls
        self.is_sqlite = url.startswith("sqlite")
        kwargs: dict[str, Any] = {}
        if not self.is_sqlite:
            kwargs.update(pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, pool_timeout=5)
            # A stalled server (paused, its disk hung) keeps connections open and silent: every statement
            # and every new connection is bounded, so a caller gets 503 instead of waiting for ever.
            kwargs["connect_args"] = {"timeout": connect_timeout, "command_timeout": statement_timeout}
            if tls is not None:
                kwargs["connect_args"]["ssl"] = tls
        self.engine: AsyncEngine = create_async_engine(url, **kwargs)
        if self.is_sqlite:
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
            event.listen(self.engine.sync_engine, "begin", _sqlite_begin)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        self._reader = async_sessionmaker(
            self.engine.execution_options(queuecore_readonly=True), expire_on_commit=False
        )
        # Push checkpoints: the store decides how they are written (a connection of their own, opened on
        # first use, when only positions move).
        self.checkpoint_writer = CheckpointWriter(self)

    @asynccontextmanager
    async def session(self, *, readonly: bool = False) -> AsyncIterator[AsyncSession]:
        """A unit of work: commits on success, rolls back on error; store outages become ``StoreUnavailable``.

        ``readonly`` units of work (lookups on hot paths) never wait for SQLite's write lock.
        """
        async with (self._reader if readonly else self.sessions)() as session:
            try:
                yield session
                await session.commit()
            except exc.DBAPIError as error:
                if _is_conflict(error):
                    await session.rollback()
                    raise StoreConflict("The metadata store was busy; try again.") from error
                if is_outage(error):
                    await _discard(session)
                    raise StoreUnavailable("The metadata store is unavailable.") from error
                await session.rollback()
                raise
            except TRANSPORT as error:
                await _discard(session)
                raise StoreUnavailable("The metadata store is unavailable.") from error
            except BaseException:
                await session.rollback()
                raise

    @asynccontextmanager
    async def unit(self, *, readonly: bool = False) -> AsyncIterator[MetadataUnit]:
        """A unit of work with the metadata stores (``session()``'s transaction: committed on success,
        rolled back on error)."""
        async with self.session(readonly=readonly) as session:
            yield SqlMetadataUnit(session)

    async def run_unit(
        self, work: Callable[[MetadataUnit], Awaitable[T]], *, attempts: int = TRANSACTION_ATTEMPTS
    ) -> T:
        """Run ``work`` in a unit of work, and again (up to ``attempts`` times in all, after a short
        random pause) when the database broke a lock conflict by failing it: a deadlock between two
        writers of one group is the database's to detect, never the caller's to see. ``work`` must do
        nothing but database work (it may run more than once). Still failing: ``StoreConflict`` (503)."""
        return await self._retried(work, attempts)

    async def _retried(self, work: Callable[[SqlMetadataUnit], Awaitable[T]], attempts: int) -> T:
        for attempt in range(1, attempts + 1):
            try:
                async with self.session() as session:
                    return await work(SqlMetadataUnit(session))
            except StoreConflict:
                if attempt == attempts:
                    logger.warning("a unit of work lost %d lock conflicts in a row; giving up", attempts)
                    raise
                await asyncio.sleep(random.uniform(0.002, 0.02) * attempt)
        raise AssertionError("unreachable")

    async def check(self, timeout: float = 2.0) -> bool:
        """True when a trivial query answers within ``timeout``."""
        try:
            async with asyncio.timeout(timeout), self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
            return True
        except Exception:  # noqa: BLE001 (any failure of the check means: down)
            return False

    async def close(self) -> None:
        await self.checkpoint_writer.close()
        await self.engine.dispose()
