"""What the log engine conformance suites share: ``every_engine`` (each scenario on every backend of
``conftest.BACKENDS``), records to append and reads to the end."""

from __future__ import annotations

import pytest

from app.stores.log.protocol import LogEngine, RecordIn
from tests.stores.log.conftest import BACKENDS

every_engine = pytest.mark.parametrize("log_backend", BACKENDS, indirect=True)


def values(records) -> list[bytes]:
    return [r.value for r in records]


def batch(prefix: str, n: int, **kwargs) -> list[RecordIn]:
    return [RecordIn(value=f"{prefix}-{i}".encode(), **kwargs) for i in range(n)]


async def read_all(engine: LogEngine, topic: str, partition: int, offset: int = 0) -> list:
    out = []
    while True:
        chunk = await engine.read(topic, partition, offset, max_records=500)
        if not chunk:
            return out
        out.extend(chunk)
        offset = chunk[-1].offset + 1
