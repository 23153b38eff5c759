"""A JetStream engine of its own for a test, on the session's real 3-node cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine


@pytest.fixture
async def js_engine(nats_cluster) -> AsyncIterator[JetStreamLogEngine]:
    engine = JetStreamLogEngine(JetStreamConfig(servers=tuple(nats_cluster.url.split(","))))
    await engine.start()
    yield engine
    await engine.close()
