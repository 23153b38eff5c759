"""Alembic owns the schema: migrations match the models on both backends, and revert cleanly."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.stores.metadata.models import Base
from tests.fixtures.database import create_database, database_url, drop_database
from tests.stores.metadata.conftest import alembic_config

_config = alembic_config


async def _diff(url: str) -> list:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(sync, opts={"compare_type": True}), Base.metadata
                )
            )
    finally:
        await engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
async def empty_database(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/m.db"
        return
    name = f"qc_mig_{tmp_path.name[-12:].replace('-', '_')}".lower()
    await create_database(name)
    yield database_url(name)
    await drop_database(name)


class TestMigrations:
    async def test_models_and_migrations_do_not_drift(self, empty_database):
        await asyncio.to_thread(command.upgrade, _config(empty_database), "head")
        assert await _diff(empty_database) == []

    async def test_downgrade_to_base_and_back(self, empty_database):
        config = _config(empty_database)
        await asyncio.to_thread(command.upgrade, config, "head")
        await asyncio.to_thread(command.downgrade, config, "base")
        assert await _diff(empty_database) != []
        await asyncio.to_thread(command.upgrade, config, "head")
        assert await _diff(empty_database) == []

    async def test_topics_from_before_replicas_keep_one_copy(self, empty_database):
        config = _config(empty_database)
        await asyncio.to_thread(command.upgrade, config, "7a2c4e9d1b53")  # the revision before replicas
        engine = create_async_engine(empty_database)
        now = datetime(2026, 11, 24, 10, tzinfo=UTC)
        try:
            async with engine.begin() as conn:
                await conn.execute(
                    text(
                        "INSERT INTO projects (id, name, tier, created_at) "
                        "VALUES ('prj_old', 'old', 'free', :now)"
                    ),
                    {"now": now},
                )
                await conn.execute(
                    text(
                        "INSERT INTO topics (id, project_id, environment, name, partitions, retention, "
                        "retention_ms, delivery, status, created_at, updated_at) VALUES ('top_old', "
                        "'prj_old', 'production', 'old.events', 3, '7d', 604800000, 'exactly-once', "
                        "'active', :now, :now)"
                    ),
                    {"now": now},
                )
            await asyncio.to_thread(command.upgrade, config, "head")
            async with engine.connect() as conn:
                replicas = await conn.scalar(text("SELECT replicas FROM topics WHERE id = 'top_old'"))
        finally:
            await engine.dispose()
        assert replicas == 1
