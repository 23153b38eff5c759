"""A rolling restart of every API process of `make cluster`'s shape while the Python SDK publishes and
consumes an exactly-once topic (tests/system/faults/rollout.py): no error reaches an SDK caller, nothing
acknowledged is lost, nothing is delivered twice. bench/rolling_restart.py (`make rolling-restart`) runs the
same followed by a lame-duck restart of every NATS server (half a minute each, NATS's minimum: too long for
`make test`) and writes what each step costs (publish p99, delivery gaps) to bench/results/rolling_restart.md."""

from __future__ import annotations

import asyncio
import os
import secrets

import pytest

from infra.cluster import Cluster
from tests.fixtures.database import drop_database
from tests.fixtures.nats import free_base_port
from tests.fixtures.server import free_port
from tests.system.faults.rollout import run

pytestmark = pytest.mark.long  # make test-long and make rolling-restart, not make test


async def test_a_rolling_restart_of_every_process_is_invisible_to_sdk_callers(tmp_path):
    front = free_port()
    cluster = Cluster(
        tmp_path / "cluster",
        front_port=front,
        api_ports=(free_port(), free_port(), free_port()),
        nats_port=free_base_port(),
        database=f"qc_test_rollout_{os.getpid()}_{secrets.token_hex(3)}",
        rate_limit_prefix=f"qc:test:{secrets.token_hex(4)}:",
        demo_user=False,
    )
    try:
        # Cluster's start and stop are blocking (they run asyncio themselves): off this test's loop.
        await asyncio.to_thread(cluster.start, True)
        await asyncio.to_thread(cluster.set_limits, "publish=100000,consume=100000,admin=10000")
        outcome = await run(cluster, cluster.keys["production"], nats=False)
    finally:
        await asyncio.to_thread(cluster.stop)
        await drop_database(cluster.database)
    summary = (
        outcome.publish_errors[:3],
        outcome.lost[:10],
        outcome.duplicate_deliveries,
        outcome.consumer_errors[:5],
        outcome.phases,
    )
    assert outcome.published > 200 and outcome.delivered >= outcome.published, summary
    assert outcome.publish_errors == [], summary
    assert outcome.lost == [], summary
    assert outcome.duplicates == [], summary
    # Every step was a real restart under load: each phase saw publishes answered.
    assert [p["phase"] for p in outcome.phases][1:] == [f"api-{i} restart" for i in (1, 2, 3)]
    assert all(p["publishes"] for p in outcome.phases), outcome.phases
