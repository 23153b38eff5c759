"""What every metadata repository shares: the caller's session and the few dialect differences.

A repository holds the SQL of one aggregate and runs it on the session it is given; the caller (a unit
of work from ``MetadataStore.session()``) owns the transaction. Postgres and SQLite differ in only three
places the repositories need: ``INSERT … ON CONFLICT`` (each dialect's own ``insert``), ``greatest`` (SQLite's
two-argument ``max``) and row locks (``FOR UPDATE`` is simply not rendered on SQLite, whose units of work
run under ``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from typing import Any, Self

from sqlalchemy import Table, func
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession


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

    def _insert(self, table: Table) -> postgresql.Insert | sqlite.Insert:
        """The dialect's own ``INSERT`` (it has ``on_conflict_do_nothing`` / ``_do_update``)."""
        return postgresql.insert(table) if self._postgres else sqlite.insert(table)

    def _greatest(self, column: Any, value: Any) -> Any:
        """The larger of a column and a value."""
        return func.greatest(column, value) if self._postgres else func.max(column, value)
