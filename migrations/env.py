"""Alembic environment: async engine, URL from QueueCore settings unless the caller passes one."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.settings import get_settings
from app.stores.metadata.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return str(config.attributes.get("url") or get_settings().resolved_database_url)


def _connect_args() -> dict[str, object]:
    """The Postgres certificate check (``QUEUECORE_DATABASE_TLS_CA``): as the caller passed it with the URL
    (``queuecore-server migrate``), else from the settings."""
    if config.attributes.get("url"):
        return dict(config.attributes.get("connect_args") or {})
    tls = get_settings().database_tls()
    return {"ssl": tls} if tls is not None else {}


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_online() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool, connect_args=_connect_args())
    async with engine.connect() as connection:
        await connection.run_sync(_configure)
        await connection.commit()
    await engine.dispose()


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if context.is_offline_mode():
    run_offline()
elif connection is not None:
    _configure(connection)
else:
    asyncio.run(_run_online())
