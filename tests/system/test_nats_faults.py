"""The JetStream engine when NATS servers die: real processes, SIGKILL.

- One node of three killed under continuous publishing (single and batch) and consuming: nothing
  acknowledged is lost or changed, no batch is partly there, publishing resumes after at most a few seconds
  of 503, the consumer goes on, and the node rejoins and catches up.
- Quorum lost (two of three killed): publishes answer 503, never a 2xx; health says degraded; when the
  servers come back, everything heals without restarting the API.

Each test has a cluster and two API processes of its own (they are broken on purpose).
"""

from __future__ import annotations

import asyncio
import random
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.nats_cluster import NatsCluster
from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.nats import free_base_port
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env
from tests.system.test_scaleout import ScaleOut, start_scaleout

pytestmark = pytest.mark.slow

BATCH = 10


@pytest.fixture
def deployment(tmp_path) -> Iterator[ScaleOut]:
    yield from _deployment(tmp_path, nats_nodes=3)


@pytest.fixture
def six_nodes(tmp_path) -> Iterator[ScaleOut]:
    """Six NATS nodes, two in each of three zones (node i in zone ``i % 3``)."""
    yield from _deployment(tmp_path, nats_nodes=6)


def _deployment(tmp_path: Path, nats_nodes: int) -> Iterator[ScaleOut]:
    name = f"qc_test_faults_{secrets.token_hex(4)}"
    asyncio.run(create_database(name))
    # Commit records left by a killed API process are rolled forward after 1 s (10 s by default).
    scaleout = start_scaleout(
        tmp_path,
        database_url(name),
        api_nodes=2,
        nats_nodes=nats_nodes,
        QUEUECORE_JETSTREAM__RECOVER_AFTER_SECONDS="1",
        QUEUECORE_JETSTREAM__RECOVERY_INTERVAL_SECONDS="0.5",
    )
    try:
        yield scaleout
    finally:
        for node in scaleout.nodes:
            node.stop()
        scaleout.cluster.stop()
        asyncio.run(drop_database(name))


async def _read_partition(http: httpx.AsyncClient, topic: str, partition: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = await http.get(
            f"/v1/topics/{topic}/partitions/{partition}/messages",
            params={"fromOffset": offset, "limit": 1000},
        )
        assert page.status_code == 200, page.text
        body = page.json()
        out.extend(body["data"])
        if not body["data"]:
            return out
        offset = body["data"][-1]["offset"] + 1


async def _published_again(api: httpx.AsyncClient, topic: str, failure: str) -> None:
    """Publish ``"after"`` until it is stored (503 meanwhile, never another answer), a bounded number of tries."""
    for _ in range(120):
        after = await api.post(f"/v1/topics/{topic}/messages", json={"data": "after"})
        if after.status_code == 201:
            return
        assert after.status_code == 503, after.text
        await asyncio.sleep(0.5)
    pytest.fail(failure)


class TestOneNodeKilled:
    async def test_nothing_acknowledged_is_lost_and_no_batch_is_partial(self, deployment):
        await _nothing_lost_while_down(deployment, [0], "one node of three down")


class TestZoneLost:
    async def test_a_whole_zone_down_loses_nothing_acknowledged(self, six_nodes):
        """Both nodes of zone-a SIGKILLed at once: every stream keeps two replicas (one per other zone,
        ``unique_tag``), the meta group four of six nodes; publishing and consuming go on."""
        down = [node.index for node in six_nodes.cluster.nodes if node.zone == "zone-a"]
        assert len(down) == 2
        await _nothing_lost_while_down(six_nodes, down, "zone-a down", lost_zone="zone-a")


async def _described(api: httpx.AsyncClient, topic: str) -> list[dict[str, Any]]:
    """The topic's ``partitionDetails``, asked until answered (503 while a stream elects a leader; a
    bounded number of tries)."""
    for _ in range(60):
        r = await api.get(f"/v1/topics/{topic}")
        if r.status_code == 200:
            details: list[dict[str, Any]] = r.json()["partitionDetails"]
            return details
        assert r.status_code == 503, r.text
        await asyncio.sleep(0.5)
    pytest.fail(f"describe of {topic} never answered")


def _leaders(details: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each partition's one leader (asserting there is exactly one)."""
    leaders = []
    for p in details:
        leading = [r for r in p["replicas"] if r["leader"]]
        assert len(leading) == 1, p
        leaders.append(leading[0])
    return leaders


async def _nothing_lost_while_down(
    deployment: ScaleOut, down: list[int], what: str, lost_zone: str | None = None
) -> None:
    cluster = deployment.cluster
    publisher, consumer = deployment.http(0), deployment.http(1)
    async with publisher, consumer:
        topic = f"faults-{secrets.token_hex(4)}"
        created = await publisher.post(
            "/v1/topics", json={"name": topic, "partitions": 3, "delivery": "exactly-once", "replicas": 3}
        )
        assert created.status_code == 201, created.text
        stored: dict[tuple[int, int], Any] = {}  # (partition, offset) -> data, of every 2xx
        placed_at: list[tuple[float, int]] = []  # when each acknowledged message was answered, where
        statuses: list[tuple[float, int]] = []
        batches_tried = 0
        stop = asyncio.Event()

        async def publish() -> None:
            nonlocal batches_tried
            n = 0
            while not stop.is_set():
                n += 1
                if n % 2:
                    data: Any = {"single": n}
                    r = await publisher.post(f"/v1/topics/{topic}/messages", json={"data": data})
                    if r.status_code == 201:
                        stored[(r.json()["partition"], r.json()["offset"])] = data
                        placed_at.append((time.monotonic(), r.json()["partition"]))
                else:
                    batches_tried += 1
                    items = [{"data": {"batch": n, "i": i}} for i in range(BATCH)]
                    r = await publisher.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
                    if r.status_code == 201:
                        for item, placed in zip(items, r.json()["messages"], strict=True):
                            stored[(placed["partition"], placed["offset"])] = item["data"]
                            placed_at.append((time.monotonic(), placed["partition"]))
                assert r.status_code in (201, 503), r.text  # never a 500, never another answer
                if r.status_code == 503:
                    assert r.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
                statuses.append((time.monotonic(), r.status_code))

        received: list[tuple[int, int, Any]] = []

        async def consume() -> None:
            joined = (
                await consumer.post(f"/v1/topics/{topic}/groups/g/members", json={"startFrom": "earliest"})
            ).json()
            member = {"memberId": joined["memberId"], "generationId": joined["generationId"]}

            def all_in() -> bool:  # a 503'd publish may have been stored too: compare sets, not counts
                return set(stored) <= {(p, o) for p, o, _ in received}

            while not stop.is_set() or not all_in():
                r = await consumer.post(
                    f"/v1/topics/{topic}/groups/g/poll",
                    json={**member, "maxMessages": 500, "waitSeconds": 1},
                )
                if r.status_code != 200:
                    assert r.status_code == 503, r.text
                    await asyncio.sleep(0.1)
                    continue
                messages = r.json()["messages"]
                received.extend((m["partition"], m["offset"], m["data"]) for m in messages)
                if messages:
                    acked = await consumer.post(
                        f"/v1/topics/{topic}/groups/g/ack",
                        json={**member, "ids": [m["id"] for m in messages]},
                    )
                    assert acked.status_code == 200 and acked.json()["failed"] == [], acked.text
                if stop.is_set() and not messages and all_in():
                    return

        if lost_zone is not None:
            # Before: each partition's three copies in three zones (unique_tag), one of them leading.
            for p in await _described(publisher, topic):
                assert len(p["replicas"]) == 3 and len({r["zone"] for r in p["replicas"]}) == 3, p
            _leaders(await _described(publisher, topic))
        publishing = asyncio.create_task(publish())
        consuming = asyncio.create_task(consume())
        await asyncio.sleep(2)
        killed_at = time.monotonic()
        for index in down:
            cluster.kill(index)  # SIGKILL, with publishes and acks in flight
        # Streams whose leader was on it elect another: JetStream's election timeout is 4-9 s.
        await asyncio.sleep(15)
        if lost_zone is not None:
            # Describe shows every partition led from a zone that is up; the lost zone's copies still
            # listed, in their zone (the API knew it from before), none of them leading.
            details = await _described(publisher, topic)
            assert all(leader["zone"] not in (lost_zone, None) for leader in _leaders(details)), details
            for p in details:
                assert [r["zone"] for r in p["replicas"]].count(lost_zone) == 1, p
                assert not any(r["current"] for r in p["replicas"] if r["zone"] == lost_zone), p
        restarted_at = time.monotonic()
        for index in down:  # each rejoins on its own store; ready = caught up
            await asyncio.to_thread(cluster.restart, index)
        await asyncio.sleep(3)
        stop.set()
        await publishing
        try:
            await asyncio.wait_for(consuming, 60)
        except TimeoutError:
            offsets = (await consumer.get(f"/v1/topics/{topic}/groups/g/offsets")).json()
            missing = sorted(set(stored) - {(p, o) for p, o, _ in received})
            pytest.fail(
                f"consumer stuck: {len(received)} of {len(stored)}; offsets {offsets}; missing {missing[:20]}"
            )

        # Publishing went on while the node was down, and after it came back.
        # (Answers are timed when they come: a publish caught by the kill waits out its 5 s timeout.)
        # Every partition took publishes while the nodes were down (once its stream had elected a leader
        # where it had lost one): none lost its quorum.
        assert {p for t, p in placed_at if killed_at + 2 < t < restarted_at} == {0, 1, 2}, (
            f"{what}: a partition took no publish"
        )
        during = [s for t, s in statuses if killed_at < t < restarted_at]
        assert 201 in during[during.index(503) if 503 in during else 0 :], (
            f"no publish succeeded with {what}",
            during,
        )
        assert [s for _, s in statuses][-5:] == [201] * 5
        # Every acknowledged message is where its answer said, unchanged.
        log = {
            p: {m["offset"]: m["data"] for m in await _read_partition(publisher, topic, p)} for p in range(3)
        }
        for (partition, offset), data in stored.items():
            assert log[partition].get(offset) == data, (partition, offset)
        # No batch is partly there, whatever its publisher heard.
        counts: dict[int, int] = {}
        for records in log.values():
            for data in records.values():
                if isinstance(data, dict) and "batch" in data:
                    counts[data["batch"]] = counts.get(data["batch"], 0) + 1
        assert all(count == BATCH for count in counts.values()), counts
        # The consumer got every acknowledged message, once (exactly-once, all acked).
        seen = [(p, o) for p, o, _ in received]
        assert len(seen) == len(set(seen))
        assert set(stored) <= set(seen)
        assert batches_tried > 0 and len(stored) > 0


class TestQuorumLost:
    async def test_publishes_are_503_health_degraded_and_it_heals_without_a_restart(self, deployment):
        cluster = deployment.cluster
        api = deployment.http(0)
        async with api:
            topic = f"quorum-{secrets.token_hex(4)}"
            assert (await api.post("/v1/topics", json={"name": topic, "partitions": 1})).status_code == 201
            before = await api.post(f"/v1/topics/{topic}/messages", json={"data": "before"})
            assert before.status_code == 201, before.text

            cluster.kill(1)
            cluster.kill(2)
            for i in range(3):
                r = await api.post(f"/v1/topics/{topic}/messages", json={"data": f"lost-{i}"})
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
            batch = await api.post(
                f"/v1/topics/{topic}/messages/batch", json={"messages": [{"data": 1}, {"data": 2}]}
            )
            assert batch.status_code == 503, batch.text
            health = None
            for _ in range(20):  # the API reconnects to the server left, which cannot answer for JetStream
                health = await api.get("/v1/health")
                if health.json()["checks"]["logEngine"] == "degraded":
                    break
                await asyncio.sleep(0.5)
            assert health is not None and health.json()["status"] == "degraded", health.json()
            assert health.json()["checks"]["logEngine"] == "degraded"
            # What the QueueCoreJetStreamQuorumLost alert reads (infra/prometheus/alerts.yml).
            scraped = (await api.get("/metrics")).text
            assert 'queuecore_log_engine_degraded{engine="jetstream"} 1.0' in scraped
            assert 'queuecore_store_up{store="log_engine"} 1.0' in scraped

            await asyncio.to_thread(cluster.restart, 1)
            await asyncio.to_thread(cluster.restart, 2)
            await _published_again(api, topic, "publishing did not come back when quorum did")
            assert (await api.get("/v1/health")).json()["status"] == "ok"
            records = await _read_partition(api, topic, 0)
            assert records[0]["data"] == "before" and records[-1]["data"] == "after"


class TestWholeClusterDown:
    async def test_publishes_are_503_health_down_and_it_heals_without_a_restart(self, deployment):
        cluster = deployment.cluster
        api = deployment.http(0)
        async with api:
            topic = f"outage-{secrets.token_hex(4)}"
            assert (await api.post("/v1/topics", json={"name": topic, "partitions": 2})).status_code == 201
            assert (
                await api.post(f"/v1/topics/{topic}/messages", json={"data": "before"})
            ).status_code == 201
            for node in range(3):
                cluster.kill(node)
            r = await api.post(f"/v1/topics/{topic}/messages", json={"data": "lost"})
            assert r.status_code == 503 and r.json()["error"]["code"] == "SERVICE_UNAVAILABLE", r.text
            health = await api.get("/v1/health")
            assert health.status_code == 503 and health.json()["checks"]["logEngine"] == "down", health.json()
            # What the QueueCoreStoreDown alert reads (infra/prometheus/alerts.yml).
            assert 'queuecore_store_up{store="log_engine"} 0.0' in (await api.get("/metrics")).text
            # Reads answer 503 too (nothing to read from), never a 500.
            read = await api.get(f"/v1/topics/{topic}/partitions/0/messages", params={"fromOffset": 0})
            assert read.status_code == 503, read.text

            for node in range(3):
                await asyncio.to_thread(cluster.restart, node, False)
            await asyncio.to_thread(cluster.wait_ready, 60.0)
            await _published_again(api, topic, "publishing did not come back with the cluster")
            assert (await api.get("/v1/health")).json()["status"] == "ok"


class TestStartedWithoutNats:
    async def test_the_api_starts_answers_503_and_serves_once_nats_answers(self, tmp_path):
        name = f"qc_test_nonats_{secrets.token_hex(4)}"
        await create_database(name)
        cluster = NatsCluster(tmp_path / "nats", base_port=free_base_port())  # not started yet
        env = server_env(
            tmp_path / "data",
            database_url(name),
            QUEUECORE_LOG_ENGINE="jetstream",
            QUEUECORE_NATS_URL=cluster.url,
        )
        node = ServerProcess(
            env=env, port=free_port(), data_dir=tmp_path / "data", log_path=tmp_path / "api.log"
        )
        try:
            await asyncio.to_thread(cli, env, "migrate")
            keys = (await asyncio.to_thread(bootstrap, env, "nonats", "--tier", "pro"))["keys"]
            node.launch()
            async with httpx.AsyncClient(
                base_url=node.url, headers={"Authorization": f"Bearer {keys['production']}"}, timeout=30
            ) as api:
                health = None
                for _ in range(100):  # up, though no NATS server answers
                    try:
                        health = await api.get("/v1/health")
                        break
                    except httpx.TransportError:
                        await asyncio.sleep(0.2)
                assert health is not None and health.status_code == 503
                assert health.json()["checks"]["logEngine"] == "down"
                created = await api.post("/v1/topics", json={"name": "later"})
                assert created.status_code == 503, created.text

                await asyncio.to_thread(cluster.start)
                for _ in range(120):
                    created = await api.post("/v1/topics", json={"name": "later"})
                    if created.status_code == 201:
                        break
                    await asyncio.sleep(0.5)
                assert created.status_code == 201, created.text
                published = await api.post("/v1/topics/later/messages", json={"data": 1})
                assert published.status_code == 201 and published.json()["durability"] == "replicated:3"
        finally:
            node.stop()
            cluster.stop()
            await drop_database(name)


class TestApiNodeKilledMidBatch:
    async def test_every_batch_is_whole_or_absent_in_every_partition(self, deployment):
        # Batches across three partitions go through a commit record: SIGKILL the API process while many are
        # in flight, and the other process rolls forward whatever committed. Every batch is then in all
        # three partitions or in none, whatever its publisher heard. Killed again until a kill has
        # actually left a commit record behind (the survivor says it rolled one forward).
        killed, survivor = deployment.nodes
        assert survivor.log_path is not None
        async with deployment.http(1) as other:
            topic = f"midbatch-{secrets.token_hex(4)}"
            assert (await other.post("/v1/topics", json={"name": topic, "partitions": 3})).status_code == 201
            answered: set[int] = set()

            async def publish(writer: int) -> None:
                async with deployment.http(0) as http:
                    for n in range(10_000):
                        batch = writer * 100_000 + n
                        items = [{"data": {"batch": batch, "i": i}, "partition": i % 3} for i in range(BATCH)]
                        try:
                            r = await http.post(
                                f"/v1/topics/{topic}/messages/batch", json={"messages": items}
                            )
                        except httpx.TransportError:
                            return  # the process is gone
                        if r.status_code == 201:
                            answered.add(batch)

            rolled = 0
            pause = random.Random(7)
            for cycle in range(16):
                if cycle:
                    await asyncio.to_thread(killed.start)
                writers = [asyncio.create_task(publish(cycle * 10 + w)) for w in range(8)]
                target = len(answered) + 20
                while len(answered) < target:
                    await asyncio.sleep(0.01)
                # The eight writers' answers come in bursts, each followed at once by eight new requests still
                # before their commit records: a kill right after a burst rarely catches one in the window.
                await asyncio.sleep(pause.uniform(0.003, 0.03))
                killed.stop(signal.SIGKILL)  # with batches in flight on eight connections
                await asyncio.gather(*writers)
                await asyncio.sleep(2.5)  # recovery runs after 1 s, every 0.5 s, on the survivor
                rolled = survivor.log_path.read_text().count("rolled forward transaction")
                if rolled:
                    break
            assert rolled, "no kill left a commit record behind: the roll-forward was not exercised"

            counts: dict[int, int] = {}
            for partition in range(3):
                for record in await _read_partition(other, topic, partition):
                    counts[record["data"]["batch"]] = counts.get(record["data"]["batch"], 0) + 1
            assert answered <= set(counts), "an answered batch is missing"
            assert all(count == BATCH for count in counts.values()), {
                b: c for b, c in counts.items() if c != BATCH
            }


class TestApiNodeKilledMidGroupCommit:
    async def test_every_answered_publish_is_stored_where_it_was_answered_and_no_batch_is_cut(
        self, deployment
    ):
        # Forty connections publish to one partition at once, so the killed process's writes are coalesced
        # (several callers' records in one atomic batch): singles, and batches of 5 to the same partition.
        # SIGKILL it mid-stream, three times. Afterwards every 2xx is readable at the offset it answered,
        # with its data; every 5-message batch is there whole or not at all.
        killed = deployment.nodes[0]
        async with deployment.http(1) as other:
            topic = f"groupcommit-{secrets.token_hex(4)}"
            assert (await other.post("/v1/topics", json={"name": topic, "partitions": 1})).status_code == 201
            answered: dict[int, Any] = {}  # offset -> data

            async def publish(writer: int) -> None:
                async with deployment.http(0) as http:
                    for n in range(100_000):
                        tag = f"{writer}-{n}"
                        try:
                            if n % 3:
                                r = await http.post(f"/v1/topics/{topic}/messages", json={"data": tag})
                                if r.status_code == 201:
                                    answered[r.json()["offset"]] = tag
                            else:
                                items = [{"data": f"{tag}/{i}"} for i in range(5)]
                                r = await http.post(
                                    f"/v1/topics/{topic}/messages/batch", json={"messages": items}
                                )
                                if r.status_code == 201:
                                    for result, item in zip(r.json()["messages"], items, strict=True):
                                        answered[result["offset"]] = item["data"]
                        except httpx.TransportError:
                            return  # the process is gone

            for cycle in range(3):
                if cycle:
                    await asyncio.to_thread(killed.start)
                writers = [asyncio.create_task(publish(cycle * 100 + w)) for w in range(40)]
                target = len(answered) + 300
                while len(answered) < target:
                    await asyncio.sleep(0.01)
                killed.stop(signal.SIGKILL)
                await asyncio.gather(*writers)

            stored = {r["offset"]: r["data"] for r in await _read_partition(other, topic, 0)}
            assert sorted(stored) == list(range(len(stored))), "offsets are not dense"
            for offset, data in answered.items():
                assert stored.get(offset) == data, (offset, data, stored.get(offset))
            batches: dict[str, int] = {}
            for data in stored.values():
                if "/" in data:
                    batches[data.split("/")[0]] = batches.get(data.split("/")[0], 0) + 1
            assert all(count == 5 for count in batches.values()), {b: c for b, c in batches.items() if c != 5}
