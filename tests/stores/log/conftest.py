"""Log engine fixtures: every backend behind one indirect ``log_backend`` fixture, and unique topic ids.

A conformance test asks for ``engine`` (an open engine of the backend named by the indirect parameter)
and, to test restarts, ``log_backend.reopen()``: close the engine and open a new one on the same storage.
``jetstream`` runs against the session's real 3-node cluster (``tests/fixtures/nats.py``); its
"storage" is the cluster, so ``reopen`` is a new engine (a new connection) on the same streams.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine
from app.stores.log.local import LocalLogConfig, LocalLogEngine
from app.stores.log.protocol import LogEngine

BACKENDS = ["local", "jetstream"]

# Small segments so that rolls and retention happen with little data.
LOCAL_CONFIG = LocalLogConfig(
    segment_bytes=16 * 1024,
    segment_ms=7 * 24 * 3600 * 1000,
    index_interval_bytes=1024,
    open_files=192,
)


class LogBackend:
    """Opens engines of one kind on one storage location."""

    def __init__(self, kind: str, root: Path, nats_url: str = "") -> None:
        self.kind = kind
        self.root = root
        self.nats_url = nats_url
        self.current: LogEngine | None = None

    def _make(self) -> LogEngine:
        if self.kind == "local":
            return LocalLogEngine(self.root, LOCAL_CONFIG)
        if self.kind == "jetstream":
            return JetStreamLogEngine(JetStreamConfig(servers=tuple(self.nats_url.split(","))))
        raise ValueError(self.kind)

    async def open(self) -> LogEngine:
        engine = self._make()
        await engine.start()
        self.current = engine
        return engine

    async def reopen(self) -> LogEngine:
        """Close the current engine (cleanly) and open a new one on the same storage."""
        if self.current is not None:
            await self.current.close()
            self.current = None
        return await self.open()

    async def close(self) -> None:
        if self.current is not None:
            await self.current.close()
            self.current = None


@pytest.fixture
async def log_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LogBackend]:
    nats_url = request.getfixturevalue("nats_cluster").url if request.param == "jetstream" else ""
    backend = LogBackend(request.param, tmp_path / "log", nats_url)
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
async def engine(log_backend: LogBackend) -> LogEngine:
    return await log_backend.open()


@pytest.fixture
def topic_id() -> Callable[[], str]:
    """Makes topic ids no other test uses."""
    return lambda: f"top_{secrets.token_hex(6)}"


def local_config(**overrides: int) -> LocalLogConfig:
    """``LOCAL_CONFIG`` with some knobs changed."""
    return dataclasses.replace(LOCAL_CONFIG, **overrides)


async def open_local(root: Path, **overrides: int) -> LocalLogEngine:
    engine = LocalLogEngine(root, local_config(**overrides))
    await engine.start()
    return engine


def crash(engine: LocalLogEngine) -> None:
    """Abandon ``engine`` as a SIGKILL would: no flush, no checkpoint, no clean-shutdown marker.

    Its background tasks are cancelled and its threads stopped so that it cannot touch the files any
    more; what it wrote is in the page cache, exactly what a killed process leaves behind. In-memory
    index entries not yet written are lost, as they would be.
    """
    manager = engine.manager
    for task in manager._tasks:
        task.cancel()
    manager.closing = True
    manager._write_executor.shutdown(wait=True)
    manager._read_executor.shutdown(wait=True)
