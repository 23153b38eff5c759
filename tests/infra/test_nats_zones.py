"""The NATS cluster of the tests and ``make cluster`` (infra/nats_cluster.py) keeps a stream's replicas in
different availability zones: each node carries an ``az:<zone>`` server tag and JetStream's
``unique_tag: "az"`` refuses to put two replicas of one stream in one zone."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine
from app.stores.log.protocol import ReplicasUnavailable, TopicLogConfig
from infra.nats_cluster import NatsCluster
from tests.fixtures.nats import free_base_port


def _varz(node_monitor_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{node_monitor_port}/varz", timeout=5) as answer:
        return json.load(answer)


def test_every_node_has_a_zone_and_jetstream_keeps_replicas_apart(nats_cluster: NatsCluster) -> None:
    zones = []
    for node in nats_cluster.nodes:
        varz = _varz(node.monitor_port)
        assert varz["tags"] == [f"az:{node.zone}"]
        assert varz["jetstream"]["config"]["unique_tag"] == "az"
        zones.append(node.zone)
    assert sorted(zones) == ["zone-a", "zone-b", "zone-c"]


@pytest.fixture(scope="module")
def two_zones(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """Three nodes in only two zones (n0 and n2 share zone-a)."""
    root = Path(tmp_path_factory.mktemp("nats-2az"))
    cluster = NatsCluster(root, base_port=free_base_port(), zones=("zone-a", "zone-b")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def two_zone_engine(two_zones: NatsCluster) -> AsyncIterator[JetStreamLogEngine]:
    # Its own streams (transactions, idempotency) are R1: R3 has no place here.
    engine = JetStreamLogEngine(JetStreamConfig(servers=tuple(two_zones.url.split(",")), default_replicas=1))
    await engine.start()
    yield engine
    await engine.close()


async def test_three_replicas_need_three_zones(two_zone_engine: JetStreamLogEngine) -> None:
    # Three servers are up, but two of them share a zone: R3 cannot be placed (without unique_tag it would
    # be, with two replicas in zone-a); R1 still can.
    with pytest.raises(ReplicasUnavailable):
        await two_zone_engine.create_topic("three_in_two", 1, TopicLogConfig(replicas=3))
    await two_zone_engine.create_topic("one_in_two", 1, TopicLogConfig(replicas=1))
    assert await two_zone_engine.streams.partitions("one_in_two") == [0]
