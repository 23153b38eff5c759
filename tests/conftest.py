"""Session fixtures: real servers started once; the app built over SQLite and over Postgres."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.cli import migrate
from app.main import create_app
from app.settings import Settings
from app.stores.metadata.database import SqlMetadataStore
from tests.fixtures.clock import ManualClock
from tests.fixtures.factories import ProjectKeys, make_project

pytest_plugins = [
    "tests.fixtures.database",
    "tests.fixtures.nats",
    "tests.fixtures.server",
    "tests.fixtures.webhooks",
    "tests.fixtures.push_receivers",
]

# The metadata store each deployment runs on; "jetstream" is the scale-out shape: Postgres, Redis for limits,
# and the JetStream log engine on the session's 3-node NATS cluster.
ALL_BACKENDS = ["sqlite", "postgres", "jetstream"]
# ``make test`` runs the suites over the two shapes the product ships: the embedded default (``sqlite``:
# SQLite and the local log engine, ``make run``) and the scale-out shape (``jetstream``, ``make cluster``),
# whose metadata store is Postgres. The third combination (Postgres with the local log engine) adds a
# third of the API suite's time for little more than the metadata conformance suite, the broker tests
# that ask for it (``tests/broker/conftest.py``) and the jetstream deployment already prove of Postgres:
# ``make test-matrix`` runs every suite over all three (QC_TEST_BACKENDS=sqlite,postgres,jetstream).
BACKENDS = [b for b in os.environ.get("QC_TEST_BACKENDS", "sqlite,jetstream").split(",") if b in ALL_BACKENDS]
REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass
class Deployment:
    """One running app and what tests need to reach around it."""

    backend: str
    settings: Settings
    app: FastAPI
    store: SqlMetadataStore
    secret: bytes
    clock: ManualClock  # real time unless a test advances it (the ``clock`` fixture)

    @property
    def default_replicas(self) -> int:
        """Replicas of a topic created without saying, on this deployment's log engine."""
        return int(self.app.state.services.log.default_replicas)

    def durability(self, replicas: int | None = None) -> str:
        """What a publish to a topic of ``replicas`` (default: the engine's) answers as its durability."""
        log = self.app.state.services.log
        return str(log.durability_for(replicas or log.default_replicas))

    @property
    def local_engine(self) -> bool:
        return self.backend != "jetstream"

    async def project(self, **kwargs: object) -> ProjectKeys:
        return await make_project(self.store, self.secret, **kwargs)  # type: ignore[arg-type]


def settings_for(backend: str, data_dir: Path, postgres_url: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "data_dir": data_dir,
        # Random-looking enough for production's entropy check (fixed, so every test shares it).
        "secret_key": "test-secret-Xo3vQ9rTzL1bK7mW4pN8sD2fH6jC0gY5",
        # Tests flush last-used times explicitly.
        "key_last_used_flush_seconds": 3600.0,
    }
    if backend in ("postgres", "jetstream"):
        values["database_url"] = postgres_url
    if overrides.get("environment") == "production":
        values["metrics_token"] = "test-metrics-u4Rk8Wq2Ze7Yt"  # production refuses to start without one
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def private_app(data_dir: Path, **overrides: object) -> AsyncIterator[FastAPI]:
    """An app of its own (SQLite, the local engine), migrated, its lifespan running: for tests that move
    state every test of a shared deployment would see (the usage rollups' offset, say)."""
    settings = settings_for("sqlite", data_dir, "", **overrides)
    await asyncio.to_thread(migrate, settings)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture(scope="session", params=BACKENDS)
async def deployment(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_database: str,
    postgres_database_jetstream: str,
) -> AsyncIterator[Deployment]:
    """The app over one metadata backend, migrated with Alembic, its lifespan running."""
    backend = request.param
    overrides: dict[str, object] = {}
    if backend == "jetstream":
        overrides = {
            "log_engine": "jetstream",
            "nats_url": request.getfixturevalue("nats_cluster").url,
            "redis_url": REDIS_URL,
            "rate_limit_prefix": f"qc:test:{secrets.token_hex(4)}:",
            # The app runs inside the test process, whose event loop a loaded machine stalls for longer
            # than a server's: at the 250 ms default a stall can count as a Redis outage, and the
            # limiter's switch to per-process counting and back mid-test breaks the exact counts these
            # suites assert. A slow Redis has tests of its own (tests/stores/limits/test_redis_slow.py).
            "redis_timeout_ms": 2000,
        }
        postgres_database = postgres_database_jetstream
    settings = settings_for(
        backend, tmp_path_factory.mktemp(f"data-{backend}"), postgres_database, **overrides
    )
    await asyncio.to_thread(migrate, settings)
    clock = ManualClock()
    app = create_app(settings, clock=clock)
    async with app.router.lifespan_context(app):
        yield Deployment(backend, settings, app, app.state.services.metadata, settings.server_secret(), clock)


@pytest.fixture
def clock(deployment: Deployment) -> Iterator[ManualClock]:
    """The deployment's clock, for a test to move past an ack deadline instead of sleeping through it
    (only what takes ``Services.clock`` sees it); its advances are taken back after the test."""
    yield deployment.clock
    deployment.clock.reset()


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
