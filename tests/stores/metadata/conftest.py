"""Metadata store fixtures: a database per backend built by the migrations (never ``create_all``).

``metadata`` is a ``SqlMetadataStore`` over a migrated SQLite file or Postgres database, one per backend
for the session; tests make their own project, topic and group (``Rows``), so they share it safely.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config

from app.kit.ids import new_id
from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.group_repositories import GroupRepository
from app.stores.metadata.partition_repositories import PartitionRepository
from app.stores.metadata.protocol import GroupRow, ProjectRow, TopicRow
from app.stores.metadata.tenancy_repositories import ProjectRepository
from app.stores.metadata.topic_repositories import TopicRepository
from tests.fixtures.database import create_database, database_url, drop_database

ROOT = Path(__file__).resolve().parents[3]
BACKENDS = ["sqlite", "postgres"]


def alembic_config(url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["url"] = url
    return config


async def migrate(url: str) -> None:
    """Bring a database to the newest migration (Alembic runs its own event loop: in a thread)."""
    await asyncio.to_thread(command.upgrade, alembic_config(url), "head")


async def fresh_database(backend: str, directory: Path) -> tuple[str, str]:
    """An empty database of ``backend``: its URL, and the Postgres database name to drop ('' for SQLite)."""
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{directory}/metadata.db", ""
    name = f"qc_meta_{secrets.token_hex(6)}"
    await create_database(name)
    return database_url(name), name


@pytest.fixture(scope="session", params=BACKENDS)
async def metadata(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SqlMetadataStore]:
    """A metadata store over a migrated database of the backend named by the parameter."""
    url, name = await fresh_database(request.param, tmp_path_factory.mktemp(f"metadata-{request.param}"))
    await migrate(url)
    store = SqlMetadataStore(url)
    try:
        yield store
    finally:
        await store.close()
        if name:
            await drop_database(name)


def now() -> datetime:
    return datetime.now(UTC)


class Rows:
    """Builds the rows a test stands on: a project, a topic in it, a group on the topic."""

    def __init__(self, store: SqlMetadataStore) -> None:
        self.store = store

    async def project(self) -> ProjectRow:
        project = ProjectRow(
            id=new_id("prj"),
            name=f"p-{secrets.token_hex(5)}",
            tier="developer",
            custom_limits=None,
            owner_id=None,
            created_at=now(),
        )
        async with self.store.session() as session:
            await ProjectRepository.from_session(session).add(project)
        return project

    async def topic(
        self,
        project_id: str | None = None,
        *,
        name: str = "",
        partitions: int = 2,
        environment: str = "production",
    ) -> TopicRow:
        project_id = project_id or (await self.project()).id
        topic = TopicRow(
            id=new_id("top"),
            project_id=project_id,
            environment=environment,
            name=name or f"t-{secrets.token_hex(4)}",
            partitions=partitions,
            retention="7d",
            retention_ms=7 * 86_400_000,
            delivery="at-least-once",
            replicas=1,
            status="active",
            created_at=now(),
            updated_at=now(),
        )
        async with self.store.session() as session:
            await TopicRepository.from_session(session).add(topic)
        return topic

    async def group(
        self, topic: TopicRow | None = None, *, partitions: int = 2, name: str = "", **values: Any
    ) -> str:
        """The group ``name`` on ``topic`` (new ones by default), created with ``partitions`` partition
        rows unless it exists (as the domain's ``ensure_group``); its id."""
        topic = topic or await self.topic(partitions=partitions)
        name = name or f"g-{secrets.token_hex(4)}"
        group_id = new_id("grp")
        async with self.store.session() as session:
            groups = GroupRepository.from_session(session)
            await groups.insert_if_absent(
                GroupRow(
                    **{
                        "id": group_id,
                        "topic_id": topic.id,
                        "name": name,
                        "generation": 0,
                        "partition_count": partitions,
                        "ack_timeout": "30s",
                        "ack_timeout_ms": 30_000,
                        "session_timeout": "30s",
                        "session_timeout_ms": 30_000,
                        "dead_letter": None,
                        "created_at": now(),
                        "updated_at": now(),
                        **values,
                    }
                )
            )
            group = await groups.get(topic.id, name)
            assert group is not None
            if group.id == group_id:  # ours, not an earlier one of that name
                await PartitionRepository.from_session(session).add_partitions(group_id, range(partitions))
        return group.id


@pytest.fixture
def rows(metadata: SqlMetadataStore) -> Rows:
    return Rows(metadata)
