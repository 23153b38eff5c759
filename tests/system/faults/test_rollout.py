"""A rolling restart of every API process of `make cluster`'s shape, then of its own Postgres and Redis,
while the Python, Node.js and Go SDKs each publish and consume an exactly-once topic
(tests/system/faults/rollout.py): no error reaches an SDK caller, nothing acknowledged is lost, nothing is
delivered twice. bench/rolling_restart.py (`make rolling-restart`) runs the same followed by a lame-duck
restart of every NATS server (half a minute each, NATS's minimum: too long for `make test`) and writes what
each step costs (publish p99, delivery gaps) to bench/results/rolling_restart.md.

The rollout itself is long (`make test-long`, which builds the Node and Go clients' SDKs first); how the
Node and Go clients' output is read and counted is checked in `make test`."""

from __future__ import annotations

import asyncio
import json
import os
import secrets

import pytest

from infra.cluster import Cluster
from tests.fixtures.nats import free_base_port
from tests.fixtures.postgres import PrivatePostgres
from tests.fixtures.redis import RedisServer
from tests.fixtures.server import free_port
from tests.system.faults.rollout import SDKS, Phase, outcome, read_record, run


def _lines(*events: dict[str, object]) -> list[str]:
    return [json.dumps(e) for e in events]


class TestReadRecord:
    def test_publishes_deliveries_and_errors_are_counted_as_the_python_load_counts_them(self):
        record = read_record(
            _lines(
                {"event": "publish", "value": 0, "at": 10.1, "seconds": 0.01},
                {"event": "publish", "value": 1, "at": 10.2, "seconds": 0.02},
                {"event": "publish_error", "at": 10.3, "error": "ServiceUnavailableError: 503"},
                {"event": "publish", "value": 3, "at": 12.5, "seconds": 0.03},
                {"event": "delivery", "value": 0, "partition": 2, "offset": 0, "attempt": 1, "at": 10.4},
                {"event": "delivery", "value": 1, "partition": 0, "offset": 0, "attempt": 1, "at": 10.5},
                {"event": "delivery", "value": 1, "partition": 0, "offset": 0, "attempt": 2, "at": 12.6},
                {"event": "consumer_error", "at": 12.0, "error": "AckError: ACK_EXPIRED"},
            )
        )
        phases = [Phase("steady", 10.0, 12.0), Phase("api-1 restart", 12.0, 13.0)]
        result = outcome("node", record, phases)
        assert (result.sdk, result.published, result.delivered) == ("node", 3, 2)
        assert result.publish_errors == ["ServiceUnavailableError: 503"]
        assert result.consumer_errors == ["AckError: ACK_EXPIRED"]
        assert result.lost == [3]
        assert result.duplicates == [1]
        # The same offset twice: a redelivery, in the phase it came in.
        assert result.duplicate_deliveries == {1: [(0, 0, 1, "steady"), (0, 0, 2, "api-1 restart")]}
        assert [(p["phase"], p["publishes"], p["deliveries"]) for p in result.phases] == [
            ("steady", 2, 2),
            ("api-1 restart", 1, 1),
        ]
        assert not result.ok

    def test_a_clean_record_is_ok(self):
        record = read_record(
            _lines(
                {"event": "publish", "value": 0, "at": 1.0, "seconds": 0.01},
                {"event": "delivery", "value": 0, "partition": 1, "offset": 0, "attempt": 1, "at": 1.1},
            )
        )
        result = outcome("go", record, [Phase("steady", 0.0, 2.0)])
        assert result.ok and (result.published, result.delivered) == (1, 1)

    def test_a_torn_line_fails_the_run_as_the_clients_own_error(self):
        lines = _lines({"event": "publish", "value": 0, "at": 1.0, "seconds": 0.01})
        record = read_record([*lines, '{"event": "deliv'])
        result = outcome("go", record, [Phase("steady", 0.0, 2.0)], ["the go client exited with 2: panic"])
        assert result.publish_errors == [] and result.consumer_errors == []
        assert result.client_errors[0] == "the go client exited with 2: panic"
        assert result.client_errors[1].startswith("unreadable line 2: ")
        assert not result.ok


@pytest.mark.long  # make test-long and make rolling-restart, not make test
async def test_a_rolling_restart_of_every_process_is_invisible_to_sdk_callers(tmp_path):
    front = free_port()
    # Its own Postgres and Redis, restarted after the API processes (never the machine's shared ones).
    postgres, redis = PrivatePostgres(), RedisServer(free_port(), tmp_path)
    postgres.start()
    redis.start()
    cluster = Cluster(
        tmp_path / "cluster",
        front_port=front,
        api_ports=(free_port(), free_port(), free_port()),
        nats_port=free_base_port(),
        database=f"qc_test_rollout_{os.getpid()}_{secrets.token_hex(3)}",
        rate_limit_prefix=f"qc:test:{secrets.token_hex(4)}:",
        demo_user=False,
        postgres_admin=postgres.admin_dsn,
        redis_url=redis.url,
    )
    stores = [("postgres restart", postgres.restart), ("redis restart", redis.restart)]
    try:
        # Cluster's start and stop are blocking (they run asyncio themselves): off this test's loop.
        await asyncio.to_thread(cluster.start, True)
        await asyncio.to_thread(cluster.set_limits, "publish=100000,consume=100000,admin=10000")
        outcomes = await run(cluster, cluster.keys["production"], nats=False, stores=stores)
    finally:
        await asyncio.to_thread(cluster.stop)
        redis.kill()
        postgres.remove()
    assert list(outcomes) == list(SDKS)
    restarts = [f"api-{i} restart" for i in (1, 2, 3)] + ["postgres restart", "redis restart"]
    for sdk, outcome_ in outcomes.items():
        summary = (
            sdk,
            outcome_.client_errors,
            outcome_.publish_errors[:3],
            outcome_.lost[:10],
            outcome_.duplicate_deliveries,
            outcome_.consumer_errors[:5],
            outcome_.phases,
        )
        assert outcome_.client_errors == [], summary
        assert outcome_.published > 200 and outcome_.delivered >= outcome_.published, summary
        assert outcome_.publish_errors == [], summary
        assert outcome_.lost == [], summary
        assert outcome_.duplicates == [], summary
        # Every step was a real restart under load: each phase saw publishes answered.
        assert [p["phase"] for p in outcome_.phases][1:] == restarts
        assert all(p["publishes"] for p in outcome_.phases), summary
