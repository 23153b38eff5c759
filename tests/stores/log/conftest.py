"""Log engine fixtures: every backend behind one indirect ``log_backend`` fixture, and unique topic ids.

A conformance test asks for ``engine`` (an open engine of the backend named by the indirect parameter)
and, to test restarts, ``log_backend.reopen()``: close the engine and open a new one on the same storage.
``jetstream`` runs against the session's real 3-node cluster (``tests/fixtures/nats.py``); its
"storage" is the cluster, so ``reopen`` is a new engine (a new connection) on the same streams.

``outage`` (indirect too) is a backend whose storage a test may take away and give back: the local
engine's directory on a small tmpfs filled to ENOSPC (``tests/fixtures/disks.py``), every server of a
JetStream cluster of the test's own killed. ``start_child`` runs a process that crash tests SIGKILL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine, codec
from app.stores.log.local import LocalLogConfig, LocalLogEngine
from app.stores.log.protocol import LogEngine
from infra.nats_cluster import NatsCluster
from tests.fixtures.disks import small_disk
from tests.fixtures.nats import free_base_port

REPO = Path(__file__).resolve().parents[3]

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

    def _make(self, jetstream: dict[str, Any]) -> LogEngine:
        if self.kind == "local":
            return LocalLogEngine(self.root, LOCAL_CONFIG)
        if self.kind == "jetstream":
            return JetStreamLogEngine(JetStreamConfig(servers=tuple(self.nats_url.split(",")), **jetstream))
        raise ValueError(self.kind)

    async def open(self, **jetstream: Any) -> LogEngine:
        """Open an engine on this storage; ``jetstream`` changes ``JetStreamConfig`` fields of a JetStream
        engine (the local engine has none of them)."""
        engine = self._make(jetstream)
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

    @contextlib.asynccontextmanager
    async def refusing(self, topic_id: str, partition: int) -> AsyncIterator[None]:
        """While inside, one partition takes no records - on JetStream: its stream refuses every message,
        as a stream without a leader does, so that a batch spanning it is cut after its other partitions'
        parts. The local engine has no such state short of a failed disk (which takes it offline whole):
        nothing changes there, and a process killed mid-batch leaves batches cut on its own."""
        if self.kind != "jetstream":
            yield
            return
        engine = JetStreamLogEngine(JetStreamConfig(servers=tuple(self.nats_url.split(","))))
        await engine.start()
        try:
            name = codec.stream_name(topic_id, partition)
            config = (await engine.streams.info(topic_id, partition))["config"]
            await engine.client.api(f"STREAM.UPDATE.{name}", {**config, "max_msg_size": 1}, stream=name)
            try:
                yield
            finally:
                await engine.client.api(f"STREAM.UPDATE.{name}", config, stream=name)
        finally:
            await engine.close()


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


class Outage:
    """A backend whose storage goes away at ``inject()`` and comes back at ``heal()`` (``outage``)."""

    def __init__(
        self,
        backend: LogBackend,
        inject: Callable[[], object],
        heal: Callable[[], object],
        **jetstream: Any,
    ) -> None:
        self.backend = backend
        self.inject, self.heal = inject, heal
        self._jetstream = jetstream

    async def open(self) -> LogEngine:
        return await self.backend.open(**self._jetstream)


@pytest.fixture
async def outage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Outage]:
    if request.param == "local":
        with small_disk(tmp_path / "log", 8) as disk:  # skips where no tmpfs may be mounted
            backend = LogBackend("local", disk.path)
            try:
                yield Outage(backend, disk.fill, disk.free)
            finally:
                disk.free()  # a clean close writes its checkpoint
                await backend.close()
        return
    # A cluster of the test's own (JetStream refuses to cluster one server alone), all of it killed. Requests
    # time out after 1 s (5 s by default), so that a health check without a server answers in a second.
    cluster = NatsCluster(tmp_path / "nats", base_port=free_base_port()).start()
    nodes = range(len(cluster.nodes))
    backend = LogBackend("jetstream", tmp_path / "log", cluster.url)
    try:
        yield Outage(
            backend,
            lambda: [cluster.kill(i) for i in nodes],
            lambda: [cluster.restart(i, wait=False) for i in nodes],
            request_timeout_seconds=1.0,
        )
    finally:
        await backend.close()
        cluster.stop()


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


def start_child(*args: str) -> subprocess.Popen[bytes]:
    """``python *args`` in a process of its own on this checkout, its stdout and stderr piped, returned once
    it printed ``READY`` (what crash tests then kill)."""
    child = subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    first = child.stdout.readline()
    if first != b"READY\n":
        child.kill()
        _, err = child.communicate(timeout=10)
        raise AssertionError(first + err)
    return child
