"""A database going away is an outage (``StoreUnavailable``: 503, retried by clients), never a bad statement
(500): here a private Postgres (tests/fixtures/postgres.py) shutting down, which refuses new connections
with 'the database system is shutting down' (SQLSTATE 57P03) while its last session lingers. A rolling
restart of `make cluster`'s Postgres answered SDK callers 500 this way (bench/rolling_restart.py)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator

import asyncpg
import pytest
from sqlalchemy import text

from app.stores.errors import StoreUnavailable
from app.stores.metadata.database import SqlMetadataStore
from tests.fixtures.postgres import PrivatePostgres, pg_ctl

pytestmark = pytest.mark.slow


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    server.start()
    try:
        yield server
    finally:
        server.remove()


async def test_a_postgres_shutting_down_is_an_outage(postgres: PrivatePostgres) -> None:
    store = SqlMetadataStore(postgres.url, pool_size=1)
    try:
        async with store.session() as session:
            assert (await session.execute(text("SELECT 1"))).scalar() == 1
        # A session of its own keeps a smart shutdown waiting: meanwhile new connections are refused.
        lingering = await asyncpg.connect(postgres.admin_dsn)
        await store.engine.dispose()  # the store's next unit of work must connect anew
        # -W: pg_ctl returns at once (a smart shutdown waits for that session).
        await asyncio.to_thread(
            subprocess.run,
            [*postgres.run_as, pg_ctl(), "-D", str(postgres.dir), "-m", "smart", "-W", "stop"],
            check=True,
        )
        with pytest.raises(asyncpg.CannotConnectNowError):
            for _ in range(100):  # until the postmaster has begun its shutdown
                await (await asyncpg.connect(postgres.admin_dsn)).close()
                await asyncio.sleep(0.05)
        with pytest.raises(StoreUnavailable):
            async with store.session() as session:
                await session.execute(text("SELECT 1"))
        await lingering.close()
    finally:
        await store.close()
