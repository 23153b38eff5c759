"""Session fixtures: real servers started once; the app built over SQLite and over Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.cli import migrate
from app.main import create_app
from app.settings import Settings
from app.stores.metadata.database import MetadataStore
from tests.fixtures.factories import ProjectKeys, make_project

pytest_plugins = [
    "tests.fixtures.database",
    "tests.fixtures.nats",
    "tests.fixtures.server",
    "tests.fixtures.webhooks",
]

BACKENDS = ["sqlite", "postgres"]


@dataclass
class Deployment:
    """One running app and what tests need to reach around it."""

    backend: str
    settings: Settings
    app: FastAPI
    store: MetadataStore
    secret: bytes

    async def project(self, **kwargs: object) -> ProjectKeys:
        return await make_project(self.store, self.secret, **kwargs)  # type: ignore[arg-type]


def settings_for(backend: str, data_dir: Path, postgres_url: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "data_dir": data_dir,
        "secret_key": "test-secret-" + "x" * 32,
        # Tests flush last-used times explicitly.
        "key_last_used_flush_seconds": 3600.0,
    }
    if backend == "postgres":
        values["database_url"] = postgres_url
    if overrides.get("environment") == "production":
        values["metrics_token"] = "test-metrics-" + "m" * 32  # production refuses to start without one
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="session", params=BACKENDS)
async def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, postgres_database: str
) -> AsyncIterator[Deployment]:
    """The app over one metadata backend, migrated with Alembic, its lifespan running."""
    backend = request.param
    settings = settings_for(backend, tmp_path_factory.mktemp(f"data-{backend}"), postgres_database)
    await asyncio.to_thread(migrate, settings)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield Deployment(backend, settings, app, app.state.services.metadata, settings.server_secret())


@pytest.fixture
async def client(deployment: Deployment) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=deployment.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://queuecore.test") as http:
        yield http


@pytest.fixture
async def tenant(deployment: Deployment) -> ProjectKeys:
    """A fresh project with one key per environment (generous limits)."""
    return await deployment.project()


@pytest.fixture
def prod(tenant: ProjectKeys) -> dict[str, str]:
    """Auth headers of the tenant's production key."""
    return tenant.headers("production")


@pytest.fixture(scope="session")
def repo_root() -> Iterator[Path]:
    yield Path(__file__).resolve().parent.parent
