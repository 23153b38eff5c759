"""Broker fixtures: the domain's calls against a real metadata store and the real local log engine.

``ON_DATABASES`` runs a test on the SQLite and the Postgres deployments of ``tests/conftest.py``
(``deployment``; both use the local log engine), sharing their session-wide apps with the rest of the
suite. ``make_topic`` (from ``tests/broker/delivery/conftest.py``) creates a topic in a fresh project.
"""

from __future__ import annotations

import pytest

from tests.broker.delivery.conftest import MakeTopic, TopicUnderTest, make_topic

__all__ = ["ON_DATABASES", "MakeTopic", "TopicUnderTest", "make_topic"]

ON_DATABASES = pytest.mark.parametrize("deployment", ["sqlite", "postgres"], indirect=True)
"""Run on the two metadata databases (the JetStream deployment differs only in its log engine)."""
