"""The zones of the NATS servers, from their ``az:<zone>`` tags (``app/stores/log/jetstream/zones.py``), asked
of the session's real 3-node cluster (``n0``/``n1``/``n2`` in ``zone-a``/``-b``/``-c``) by an engine whose
connection is an ordinary account's, as every deployment's is."""

from __future__ import annotations

import secrets

import pytest

from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine
from app.stores.log.jetstream.zones import Zones
from app.stores.log.protocol import TopicLogConfig

SESSION_ZONES = {"n0": "zone-a", "n1": "zone-b", "n2": "zone-c"}


@pytest.fixture
def engine(js_engine: JetStreamLogEngine) -> JetStreamLogEngine:
    return js_engine


class TestZonesOfServers:
    async def test_every_server_answers_with_its_zone(self, engine):
        assert await engine.zones.of(SESSION_ZONES) == SESSION_ZONES
        assert {name: engine.zones.known(name) for name in SESSION_ZONES} == SESSION_ZONES

    async def test_a_server_that_does_not_answer_is_in_no_zone_and_not_asked_for_again_at_once(self, engine):
        zones = Zones(lambda: engine.nc, "az", wait_seconds=0.2)
        assert await zones.of([*SESSION_ZONES, "gone"]) == {**SESSION_ZONES, "gone": None}
        asked_at = zones._asked_at
        # Within REFRESH_SECONDS a describe naming it again does not ask (nor wait for it) again.
        assert await zones.of(["gone", "n1"]) == {"gone": None, "n1": "zone-b"}
        assert zones._asked_at == asked_at

    async def test_servers_without_the_tag_are_in_no_zone(self, nats_cluster):
        # The session servers carry az:<zone>, not rack:<zone>.
        engine = JetStreamLogEngine(
            JetStreamConfig(servers=tuple(nats_cluster.url.split(",")), zone_tag="rack")
        )
        await engine.start()
        try:
            topic = f"top_{secrets.token_hex(6)}"
            await engine.create_topic(topic, 1, TopicLogConfig())
            [described] = await engine.describe_partitions(topic, 1)
            assert {r.server for r in described.replicas} == set(SESSION_ZONES)
            assert {r.zone for r in described.replicas} == {None}
            await engine.delete_topic(topic)
        finally:
            await engine.close()


class TestBeforeAsking:
    async def test_partition_info_names_zones_only_once_known(self, nats_cluster):
        # partition_info never asks the servers (it is on the read and delivery paths); a describe does.
        engine = JetStreamLogEngine(JetStreamConfig(servers=tuple(nats_cluster.url.split(","))))
        await engine.start()
        try:
            topic = f"top_{secrets.token_hex(6)}"
            await engine.create_topic(topic, 1, TopicLogConfig())
            before = await engine.partition_info(topic, 0)
            assert {r.zone for r in before.replicas} == {None}
            await engine.describe_partitions(topic, 1)
            after = await engine.partition_info(topic, 0)
            assert {r.server: r.zone for r in after.replicas} == {
                r.server: SESSION_ZONES[r.server] for r in after.replicas
            }
            await engine.delete_topic(topic)
        finally:
            await engine.close()
