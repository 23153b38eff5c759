"""The express connection (push checkpoints): rowcounts, one transaction, and recovery from an outage,
on SQLite and Postgres."""

from __future__ import annotations

import sqlite3
from typing import cast

import asyncpg
import pytest
from sqlalchemy import Table, bindparam, select, text, update

from app.broker.errors import Unavailable
from app.stores.metadata.database import MetadataStore
from app.stores.metadata.models import User
from tests.fixtures.database import drop_database
from tests.stores.metadata.conftest import fresh_database, migrate, now

# A table of the real schema with a unique column: the users' emails.
_users = cast(Table, User.__table__)
_SET = update(_users).where(_users.c.id == bindparam("i")).values(email=bindparam("v"))


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request, tmp_path):
    url, name = await fresh_database(request.param, tmp_path)
    await migrate(url)
    metadata = MetadataStore(url)
    async with metadata.engine.begin() as conn:
        await conn.execute(
            _users.insert(),
            [
                {"id": i, "email": v, "password_hash": "x", "created_at": now()}
                for i, v in (("1", "10"), ("2", "20"))
            ],
        )
    yield metadata
    await metadata.close()
    if name:
        await drop_database(name)


async def _values(metadata: MetadataStore) -> dict[int, int]:
    async with metadata.session(readonly=True) as session:
        rows = (await session.execute(select(_users.c.id, _users.c.email))).all()
        return {int(r.id): int(r.email) for r in rows}


async def test_rowcounts_per_parameter_set_and_committed(store: MetadataStore):
    counts = await store.express.execute_each(
        _SET, [{"i": "1", "v": "11"}, {"i": "3", "v": "30"}, {"i": "2", "v": "21"}]
    )
    assert counts == [1, 0, 1]  # id 3 matches nothing: how a fenced checkpoint looks
    assert await _values(store) == {1: 11, 2: 21}


async def test_one_transaction_all_or_nothing(store: MetadataStore):
    # The driver's own unique-violation error (the express connection runs below SQLAlchemy).
    with pytest.raises((sqlite3.IntegrityError, asyncpg.UniqueViolationError)):
        await store.express.execute_each(_SET, [{"i": "1", "v": "12"}, {"i": "2", "v": "12"}])  # unique clash
    assert await _values(store) == {1: 10, 2: 20}
    assert await store.express.execute_each(_SET, [{"i": "1", "v": "13"}]) == [1]  # still usable
    assert await _values(store) == {1: 13, 2: 20}


async def test_a_lost_connection_is_unavailable_then_reopened(store: MetadataStore):
    if store.is_sqlite:
        pytest.skip("an embedded database file cannot be taken away from a live connection")
    assert await store.express.execute_each(_SET, [{"i": "1", "v": "14"}]) == [1]
    async with store.session() as session:  # the server drops every other backend of this database
        await session.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    with pytest.raises(Unavailable):
        await store.express.execute_each(_SET, [{"i": "1", "v": "15"}])
    assert await store.express.execute_each(_SET, [{"i": "1", "v": "16"}]) == [1]
    assert (await _values(store))[1] == 16
