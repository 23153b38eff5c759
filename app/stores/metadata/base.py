"""What every metadata repository shares: the caller's session and the few dialect differences.

A repository holds the SQL of one aggregate and runs it on the session it is given; the caller (a unit
of work from ``SqlMetadataStore.session()``) owns the transaction. Postgres and SQLite differ in only three
places the repositories need: ``INSERT … ON CONFLICT`` (each dialect's own ``insert``), ``greatest`` (SQLite's
two-argument ``max``) and row locks (``FOR UPDATE`` is simply not rendered on SQLite, whose units of work
run under ``BEGIN IMMEDIATE``).

A write that would break a unique constraint raises the store's ``AlreadyExists`` (``_flush``), never
the driver's integrity error: no caller above the stores sees SQLAlchemy.
"""

from __future__ import annotations

from typing import Any, Self

from sqlalchemy import Table, exc, func
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.stores.errors import AlreadyExists

# A unique (or primary) key taken: Postgres' unique_violation; SQLite's extended result codes.
_UNIQUE_SQLSTATE = "23505"
_SQLITE_UNIQUE = frozenset({"SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"})


def is_unique_violation(error: exc.IntegrityError) -> bool:
    """Whether the driver refused a write because a unique or primary key was taken."""
    orig = error.orig
    if getattr(orig, "sqlstate", None) == _UNIQUE_SQLSTATE:
        return True
    return getattr(orig, "sqlite_errorname", None) in _SQLITE_UNIQUE or "UNIQUE constraint failed" in str(
        orig
    )


class Repository:
    """Base of the metadata repositories: built ``from_session``, never commits."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    @classmethod
    def from_session(cls, session: AsyncSession) -> Self:
        return cls(session)

    @property
    def _postgres(self) -> bool:
        return self.session.get_bind().dialect.name == "postgresql"

    async def _flush(self) -> None:
        """Send the session's pending rows now, so their constraints are checked here; a taken unique
        key raises ``AlreadyExists``. The unit of work is spoilt then: it rolls back when it ends."""
        try:
            await self.session.flush()
        except exc.IntegrityError as error:
            if is_unique_violation(error):
                raise AlreadyExists(str(error.orig)) from error
            raise

    def _insert(self, table: Table) -> postgresql.Insert | sqlite.Insert:
        """The dialect's own ``INSERT`` (it has ``on_conflict_do_nothing`` / ``_do_update``)."""
        return postgresql.insert(table) if self._postgres else sqlite.insert(table)

    def _greatest(self, column: Any, value: Any) -> Any:
        """The larger of a column and a value."""
        return func.greatest(column, value) if self._postgres else func.max(column, value)
