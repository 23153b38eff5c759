"""Fixtures of the API tests that run against real server processes."""

from __future__ import annotations

import pytest

from tests.api.ws_client import Api


@pytest.fixture(params=["embedded", "jetstream"])
def api(request: pytest.FixtureRequest) -> Api:
    """The embedded default server, and the scale-out one (Postgres, Redis, JetStream)."""
    return Api(request.getfixturevalue("server" if request.param == "embedded" else "jetstream_server"))
