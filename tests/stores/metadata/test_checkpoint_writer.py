"""How the metadata store writes a push member's checkpoint (``checkpoint_writer``), on SQLite and
Postgres: positions only on its commit connection, acked rows in a unit of work, fenced either way; and
the commit connection itself: rowcounts, one transaction, recovery from an outage."""

from __future__ import annotations

import sqlite3
from typing import cast

import asyncpg
import pytest
from sqlalchemy import Table, bindparam, select, text, update

from app.stores.errors import StoreUnavailable
from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.lease_repositories import LeaseRepository
from app.stores.metadata.models import User
from app.stores.metadata.partition_repositories import PartitionRepository
from app.stores.metadata.protocol import PartitionCheckpoint
from tests.fixtures.database import drop_database
from tests.stores.metadata.conftest import Rows, fresh_database, migrate, now

# A table of the real schema with a unique column: the users' emails.
_users = cast(Table, User.__table__)
_SET = update(_users).where(_users.c.id == bindparam("i")).values(email=bindparam("v"))


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request, tmp_path):
    url, name = await fresh_database(request.param, tmp_path)
    await migrate(url)
    metadata = SqlMetadataStore(url)
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


async def _values(metadata: SqlMetadataStore) -> dict[int, int]:
    async with metadata.session(readonly=True) as session:
        rows = (await session.execute(select(_users.c.id, _users.c.email))).all()
        return {int(r.id): int(r.email) for r in rows}


async def test_rowcounts_per_parameter_set_and_committed(store: SqlMetadataStore):
    counts = await store.checkpoint_writer.connection.execute_each(
        _SET, [{"i": "1", "v": "11"}, {"i": "3", "v": "30"}, {"i": "2", "v": "21"}]
    )
    assert counts == [1, 0, 1]  # id 3 matches nothing: how a fenced checkpoint looks
    assert await _values(store) == {1: 11, 2: 21}


async def test_one_transaction_all_or_nothing(store: SqlMetadataStore):
    # The driver's own unique-violation error (the commit connection runs below SQLAlchemy), each
    # database's own: not either one on both.
    clash = sqlite3.IntegrityError if store.is_sqlite else asyncpg.UniqueViolationError
    with pytest.raises(clash):
        await store.checkpoint_writer.connection.execute_each(
            _SET, [{"i": "1", "v": "12"}, {"i": "2", "v": "12"}]
        )  # unique clash
    assert await _values(store) == {1: 10, 2: 20}
    assert await store.checkpoint_writer.connection.execute_each(_SET, [{"i": "1", "v": "13"}]) == [
        1
    ]  # still usable
    assert await _values(store) == {1: 13, 2: 20}


async def test_a_lost_connection_is_unavailable_then_reopened(store: SqlMetadataStore):
    if store.is_sqlite:
        pytest.skip("an embedded database file cannot be taken away from a live connection")
    assert await store.checkpoint_writer.connection.execute_each(_SET, [{"i": "1", "v": "14"}]) == [1]
    async with store.session() as session:  # the server drops every other backend of this database
        await session.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    with pytest.raises(StoreUnavailable):
        await store.checkpoint_writer.connection.execute_each(_SET, [{"i": "1", "v": "15"}])
    assert await store.checkpoint_writer.connection.execute_each(_SET, [{"i": "1", "v": "16"}]) == [1]
    assert (await _values(store))[1] == 16


class TestWrite:
    async def _owned(self, metadata: SqlMetadataStore, rows: Rows) -> str:
        group_id = await rows.group(partitions=2)
        async with metadata.session() as session:
            await PartitionRepository.from_session(session).set_owners(group_id, {0: "csr_a", 1: "csr_a"})
        return group_id

    async def _state(
        self, metadata: SqlMetadataStore, group_id: str
    ) -> dict[int, tuple[int | None, int | None]]:
        async with metadata.session(readonly=True) as session:
            states = await PartitionRepository.from_session(session).partitions(group_id)
        return {s.partition: (s.committed, s.position) for s in states}

    async def test_positions_only_take_one_round_trip_on_the_commit_connection(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await self._owned(metadata, rows)
        connection = metadata.checkpoint_writer.connection
        calls: list[int] = []
        execute_each = connection.execute_each

        async def counted(statement, params):
            calls.append(len(params))
            return await execute_each(statement, params)

        connection.execute_each = counted  # type: ignore[method-assign]
        try:
            fenced = await metadata.checkpoint_writer.write(
                group_id, "csr_a", [PartitionCheckpoint(0, 1, 5), PartitionCheckpoint(1, 1, 3)]
            )
        finally:
            del connection.execute_each
        assert fenced == set()
        assert calls == [2]  # both partitions, one transaction
        assert await self._state(metadata, group_id) == {0: (5, 5), 1: (3, 3)}

    async def test_acks_above_the_position_are_acked_rows_and_committed_stops_below(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await self._owned(metadata, rows)
        fenced = await metadata.checkpoint_writer.write(
            group_id, "csr_a", [PartitionCheckpoint(0, 1, 4, acked_above=[6, 7])]
        )
        assert fenced == set()
        async with metadata.session(readonly=True) as session:
            left = await LeaseRepository.from_session(session).leases_among(group_id, [(0, 6), (0, 7)])
        assert sorted(left) == [(0, 6), (0, 7)] and all(lease.acked for lease in left.values())
        assert (await self._state(metadata, group_id))[0] == (4, 4)
        # The floor passes them: the rows below the new committed offset are dropped.
        assert not await metadata.checkpoint_writer.write(
            group_id, "csr_a", [PartitionCheckpoint(0, 1, 8, drop_acked_below=True)]
        )
        async with metadata.session(readonly=True) as session:
            assert await LeaseRepository.from_session(session).leases_among(group_id, [(0, 6), (0, 7)]) == {}
        assert (await self._state(metadata, group_id))[0] == (8, 8)

    @pytest.mark.parametrize("acked_above", [(), (9,)], ids=["positions-only", "with-rows"])
    async def test_a_stale_epoch_or_another_owner_is_fenced_and_not_written(
        self, metadata: SqlMetadataStore, rows: Rows, acked_above: tuple[int, ...]
    ):
        group_id = await self._owned(metadata, rows)
        fenced = await metadata.checkpoint_writer.write(
            group_id,
            "csr_a",
            [PartitionCheckpoint(0, 0, 5, acked_above), PartitionCheckpoint(1, 1, 6, acked_above)],
        )
        assert fenced == {0}  # epoch 0 is stale (the move to csr_a made it 1)
        assert await self._state(metadata, group_id) == {0: (None, None), 1: (6, 6)}
        assert await metadata.checkpoint_writer.write(group_id, "csr_b", [PartitionCheckpoint(1, 1, 7)]) == {
            1
        }
        assert (await self._state(metadata, group_id))[1] == (6, 6)
