"""Fixtures of the SDK's tests. Self-contained: nothing here comes from the repository's tests/ or app/.

Unit tests drive the clients over ``httpx.MockTransport`` (``mock_client`` / ``mock_async_client``).
Integration tests (``pytest.mark.integration``) share one real ``queuecore-server`` process per session
(``server``), started through its operator CLI as an operator would: migrate, bootstrap projects, serve.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Callable

import httpx
import pytest
from sdk_support import Handler, Recorder, Server, free_port, unique

import queuecore


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One real server for the session, on the embedded defaults, in a temp data dir."""
    data_dir = tmp_path_factory.mktemp("queuecore-data")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
    env.update({"QUEUECORE_DATA_DIR": str(data_dir), "QUEUECORE_LOG_LEVEL": "WARNING"})
    srv = Server(data_dir=data_dir, port=free_port(), env=env)
    srv.cli("migrate")
    # Keys per purpose, so tests never share a namespace of topics (or a rate-limit window):
    #   sdk-test: development = resource tests, staging = CLI tests, production = README examples;
    #   sdk-docs: development = the docs examples (sync), staging = the same (async);
    #   sdk-dev (developer tier: admin 10 req/s): the rate-limit tests.
    generous = "publish=100000,consume=100000,admin=100000"
    srv.bootstrap("sdk-test", "enterprise", limits=generous)
    srv.bootstrap("sdk-docs", "enterprise", limits=generous)
    srv.bootstrap("sdk-dev", "developer")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server: Server) -> Iterator[queuecore.QueueCore]:
    with queuecore.QueueCore(api_key=server.key, base_url=server.url) as c:
        yield c


@pytest.fixture
async def async_client(server: Server) -> Any:
    async with queuecore.AsyncQueueCore(api_key=server.key, base_url=server.url) as c:
        yield c


@pytest.fixture
def topic(client: queuecore.QueueCore) -> str:
    """A fresh 3-partition topic."""
    name = unique("t")
    client.topics.create(name, partitions=3)
    return name


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def mock_client(recorder: Recorder) -> Callable[..., queuecore.QueueCore]:
    """``mock_client(handler, **options)``: a ``QueueCore`` over ``httpx.MockTransport(handler)`` that records
    requests and retry sleeps instead of sleeping."""

    def make(handler: Handler, **options: Any) -> queuecore.QueueCore:
        def record(request: httpx.Request) -> httpx.Response:
            recorder.requests.append(request)
            return handler(request)

        http = httpx.Client(transport=httpx.MockTransport(record))
        c = queuecore.QueueCore(
            api_key="pq_test_sk_unit", base_url="http://queuecore.test", http_client=http, **options
        )
        c._sleep = recorder.sleeps.append  # type: ignore[method-assign]
        return c

    return make


@pytest.fixture
def mock_async_client(recorder: Recorder) -> Callable[..., queuecore.AsyncQueueCore]:
    """The ``AsyncQueueCore`` twin of ``mock_client``."""

    def make(handler: Handler, **options: Any) -> queuecore.AsyncQueueCore:
        def record(request: httpx.Request) -> httpx.Response:
            recorder.requests.append(request)
            return handler(request)

        async def sleep(seconds: float) -> None:
            recorder.sleeps.append(seconds)

        http = httpx.AsyncClient(transport=httpx.MockTransport(record))
        c = queuecore.AsyncQueueCore(
            api_key="pq_test_sk_unit", base_url="http://queuecore.test", http_client=http, **options
        )
        c._sleep = sleep  # type: ignore[method-assign]
        return c

    return make
