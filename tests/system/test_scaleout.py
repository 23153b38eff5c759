"""Several stateless API processes on one JetStream cluster: any process answers any call of any member, and a
killed one's push members move to the others. Real processes: a 3-node NATS cluster of this module's own,
three ``queuecore-server`` processes sharing Postgres, Redis and the cluster.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.nats_cluster import NatsCluster
from tests.api.ws_client import Api, Consumer
from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.nats import free_base_port
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env

pytestmark = pytest.mark.slow


@dataclass
class ScaleOut:
    """A NATS cluster and API processes in front of it, one demo project's production key."""

    cluster: NatsCluster
    nodes: list[ServerProcess]
    key: str

    def http(self, node: int) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.nodes[node].url, headers={"Authorization": f"Bearer {self.key}"}, timeout=30
        )


def start_scaleout(
    root: Path, database: str, api_nodes: int, *, nats_nodes: int = 3, **env_extra: str
) -> ScaleOut:
    cluster = NatsCluster(root / "nats", base_port=free_base_port(size=nats_nodes), size=nats_nodes).start()
    env = server_env(
        root / "data",
        database,
        QUEUECORE_LOG_ENGINE="jetstream",
        QUEUECORE_NATS_URL=cluster.url,
        QUEUECORE_REDIS_URL="redis://127.0.0.1:6379/0",
        QUEUECORE_RATE_LIMIT_PREFIX=f"qc:test:{secrets.token_hex(4)}:",
        **env_extra,
    )
    cli(env, "migrate")
    boot = bootstrap(env, "scaleout", "--tier", "pro")
    nodes = []
    for i in range(api_nodes):
        node = ServerProcess(
            env=env,
            port=free_port(),
            data_dir=root / "data",
            keys=boot["keys"],
            log_path=root / f"api{i}.log",
        )
        node.start()
        nodes.append(node)
    return ScaleOut(cluster, nodes, boot["keys"]["production"])


@pytest.fixture(scope="module")
def scaleout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScaleOut]:
    name = f"qc_test_scaleout_{secrets.token_hex(4)}"
    asyncio.run(create_database(name))
    deployment = start_scaleout(tmp_path_factory.mktemp("scaleout"), database_url(name), api_nodes=3)
    try:
        yield deployment
    finally:
        for node in deployment.nodes:
            node.stop()
        deployment.cluster.stop()
        asyncio.run(drop_database(name))


async def _ok(response: httpx.Response) -> Any:
    assert response.status_code in (200, 201, 204), response.text
    return response.json() if response.content else None


async def _topic(http: httpx.AsyncClient, **body: Any) -> str:
    name = f"so-{secrets.token_hex(4)}"
    await _ok(await http.post("/v1/topics", json={"name": name, **body}))
    return name


class TestAnyNodeAnswers:
    async def test_a_pull_member_joins_on_one_node_polls_on_another_and_acks_on_a_third(self, scaleout):
        a, b, c = (scaleout.http(i) for i in range(3))
        async with a, b, c:
            topic = await _topic(a, partitions=2, delivery="exactly-once")
            published = await _ok(
                await b.post(
                    f"/v1/topics/{topic}/messages/batch", json={"messages": [{"data": i} for i in range(10)]}
                )
            )
            assert published["messages"][0]["id"].startswith("msg_")
            joined = await _ok(
                await a.post(f"/v1/topics/{topic}/groups/g/members", json={"startFrom": "earliest"})
            )
            got: list[dict[str, Any]] = []
            for _ in range(10):
                polled = await _ok(
                    await b.post(
                        f"/v1/topics/{topic}/groups/g/poll",
                        json={
                            "memberId": joined["memberId"],
                            "generationId": joined["generationId"],
                            "maxMessages": 100,
                            "waitSeconds": 2,
                        },
                    )
                )
                got.extend(polled["messages"])
                if len(got) >= 10:
                    break
            assert sorted(m["data"] for m in got) == list(range(10))
            member = {"memberId": joined["memberId"], "generationId": joined["generationId"]}
            acked = await _ok(
                await c.post(
                    f"/v1/topics/{topic}/groups/g/ack", json={**member, "ids": [m["id"] for m in got]}
                )
            )
            assert sorted(acked["ids"]) == sorted(m["id"] for m in got) and acked["failed"] == []
            offsets = await _ok(await a.get(f"/v1/topics/{topic}/groups/g/offsets"))
            assert sum(p["current"] for p in offsets["data"]) == 10

            # A long poll on one node is woken by a publish on another: it returns the message, not an empty
            # answer at the end of its 20 s wait.
            waiting = asyncio.create_task(
                c.post(
                    f"/v1/topics/{topic}/groups/g/poll",
                    json={**member, "maxMessages": 10, "waitSeconds": 20},
                )
            )
            await asyncio.sleep(0.5)
            await _ok(await a.post(f"/v1/topics/{topic}/messages", json={"data": "late"}))
            polled = await _ok(await waiting)
            assert [m["data"] for m in polled["messages"]] == ["late"]


class TestApiNodeKilled:
    async def test_its_push_members_partitions_move_to_members_on_other_nodes(self, scaleout):
        # Two push members, on nodes 1 and 2, share four partitions of an exactly-once topic. Node 1 is
        # SIGKILLed with messages delivered to its member, half of them acked: the member on node 2 takes
        # the partitions over from the checkpoint — nothing acked comes again, everything unacked does.
        api0, api1, api2 = (Api(node, scaleout.key) for node in scaleout.nodes[:3])
        topic = api0.topic(partitions=4, delivery="exactly-once", sessionTimeout="3s", ackTimeout="60s")
        first = await Consumer.open(api1, topic, maxInFlight=100)
        second = await Consumer.open(api2, topic, maxInFlight=100)
        await first.until("rebalance", timeout=10)  # the second member's join gave it half the partitions
        ids = api0.publish(topic, 40)
        assert len(ids) == 40
        # Each member receives the messages of its partitions; wait for all 40 between them.
        got_first: list[dict[str, Any]] = []
        got_second: list[dict[str, Any]] = []
        for _ in range(40):
            got_first += await first.quiet(0.2)
            got_second += await second.quiet(0.2)
            if len(got_first) + len(got_second) >= 40:
                break
        assert len(got_first) + len(got_second) == 40 and got_first and got_second, (
            len(got_first),
            len(got_second),
        )
        acked = {m["id"] for m in got_first[::2]}
        assert set((await first.ack(sorted(acked)))["ids"]) == acked
        unacked = {m["id"] for m in got_first} - acked
        assert acked and unacked

        scaleout.nodes[1].stop(signal.SIGKILL)
        try:
            moved: list[dict[str, Any]] = []
            # sessionTimeout (3 s) + 1 s is the promise; the loop's bound leaves slack for this shared machine.
            for _ in range(40):
                moved += await second.quiet(0.25)
                if unacked <= {m["id"] for m in moved}:
                    break
            moved_ids = {m["id"] for m in moved}
            assert unacked <= moved_ids, (
                f"{len(unacked - moved_ids)} unacked messages were not delivered again"
            )
            assert not (acked & moved_ids), "acked messages were delivered again on an exactly-once topic"
            await second.close()
        finally:
            scaleout.nodes[1].start()


class TestIdempotencyAcrossNodes:
    async def test_a_key_seen_by_one_node_is_replayed_by_every_other(self, scaleout):
        a, b, c = (scaleout.http(i) for i in range(3))
        async with a, b, c:
            topic = await _topic(a, partitions=3)
            first = await a.post(
                f"/v1/topics/{topic}/messages", json={"data": 1}, headers={"Idempotency-Key": "k1"}
            )
            assert first.status_code == 201 and "idempotent-replayed" not in first.headers
            for node in (b, c):
                again = await node.post(
                    f"/v1/topics/{topic}/messages", json={"data": "other"}, headers={"Idempotency-Key": "k1"}
                )
                assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
                assert again.json() == first.json()
            items = [{"data": i, "idempotencyKey": f"b{i}"} for i in range(5)]
            batch = await _ok(await b.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items}))
            replay = await c.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
            replayed = replay.json()["messages"]
            assert all(m.pop("replayed") is True for m in replayed) and replayed == batch["messages"]
            described = await _ok(await a.get(f"/v1/topics/{topic}"))
            assert sum(p["latestOffset"] for p in described["partitionDetails"]) == 6

    async def test_the_same_key_on_every_node_at_once_is_appended_once(self, scaleout):
        nodes = [scaleout.http(i) for i in range(3)]
        try:
            topic = await _topic(nodes[0], partitions=3)
            answers = await asyncio.gather(
                *(
                    nodes[i % 3].post(
                        f"/v1/topics/{topic}/messages", json={"data": i}, headers={"Idempotency-Key": "race"}
                    )
                    for i in range(12)
                )
            )
            assert {r.status_code for r in answers} == {201}
            assert len({r.json()["id"] for r in answers}) == 1
            assert sum(r.headers.get("idempotent-replayed") != "true" for r in answers) == 1
            described = await _ok(await nodes[1].get(f"/v1/topics/{topic}"))
            assert sum(p["latestOffset"] for p in described["partitionDetails"]) == 1
        finally:
            for node in nodes:
                await node.aclose()


class TestSeekAcrossNodes:
    async def test_a_seek_on_one_node_moves_a_push_member_on_another(self, scaleout):
        api0, api2 = Api(scaleout.nodes[0], scaleout.key), Api(scaleout.nodes[2], scaleout.key)
        topic = api0.topic(partitions=1, delivery="at-least-once")
        api0.publish(topic, 10)
        member = await Consumer.open(api2, topic, maxInFlight=100)
        try:
            got = await member.messages(10, timeout=10)
            await member.ack([m["id"] for m in got])
            assert await member.quiet(0.5) == []
            async with scaleout.http(0) as http:
                await _ok(
                    await http.post(
                        f"/v1/topics/{topic}/groups/g/offsets/seek", json={"partition": 0, "offset": 4}
                    )
                )
            # Seen by the member on node 2 at its next beat (every 0.5 s): delivery resumes at offset 4.
            again = await member.messages(6, timeout=5)
            assert [m["offset"] for m in again][:6] == [4, 5, 6, 7, 8, 9]
        finally:
            await member.close()


class TestRevocationAcrossNodes:
    async def test_a_key_revoked_is_refused_by_every_node_within_a_second(self, scaleout):
        env = scaleout.nodes[0].env
        created = json.loads(
            (
                await asyncio.to_thread(
                    cli, env, "keys", "create", "--project", "scaleout", "--environment", "staging", "--json"
                )
            ).stdout
        )
        headers = {"Authorization": f"Bearer {created['key']}"}
        for node in scaleout.nodes:  # every node has seen (and cached) the key
            async with httpx.AsyncClient(base_url=node.url, timeout=30) as http:
                assert (await http.get("/v1/topics", headers=headers)).status_code == 200
        await asyncio.to_thread(cli, env, "keys", "revoke", "--id", created["id"])
        await asyncio.sleep(1.0)
        for node in scaleout.nodes:
            async with httpx.AsyncClient(base_url=node.url, timeout=30) as http:
                refused = await http.get("/v1/topics", headers=headers)
                assert refused.status_code == 401, (node.port, refused.text)
