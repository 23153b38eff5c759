"""Acks over WebSocket against real ``queuecore-server`` processes: acks, nacks, extends and ack timeouts,
dead letters, partitions handed over only once their leases are written, and a SIGKILL mid-stream.

Most scenarios share the session servers, each on its own topic; the hand-over and crash scenarios run a
server of their own (on SQLite and on Postgres), which the crash scenario SIGKILLs.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import httpx
import pytest
import websockets

from tests.api.ws_client import Api, Consumer
from tests.conftest import BACKENDS
from tests.fixtures.server import ServerProcess, cli, free_port, server_env


class TestAcks:
    async def test_acked_once_durable_and_never_redelivered(self, api: Api) -> None:
        topic = api.topic(partitions=2, delivery="exactly-once", ackTimeout="1s")
        ids = api.publish(topic, 10)
        c = await Consumer.open(api, topic)
        got = await c.messages(10)
        answer = await c.ack([m["id"] for m in got])
        assert sorted(answer["ids"]) == sorted(ids) and answer["failed"] == []
        assert await c.quiet(1.6) == []  # past the 1 s ack timeout: nothing comes back
        await c.close()
        described = api.ok("GET", f"/v1/topics/{topic}/groups/g/offsets")["data"]
        assert sum(p["lag"] for p in described) == 0

    async def test_at_least_once_acks_are_answered_at_once_and_written_moments_later(self, api: Api) -> None:
        topic = api.topic()  # at-least-once
        api.publish(topic, 5)
        c = await Consumer.open(api, topic)
        ids = [m["id"] for m in await c.messages(5)]
        assert await c.ack(ids) == {"type": "acked", "ids": ids, "failed": []}
        current = 0
        deadline = time.monotonic() + 5
        while current < 5 and time.monotonic() < deadline:
            current = api.ok("GET", f"/v1/topics/{topic}/groups/g/offsets?partition=0")["current"]
            await asyncio.sleep(0.05)
        assert current == 5  # the committed offset caught up
        # No longer held by this connection: a repeated ack takes the durable path, and is idempotent.
        assert (await c.ack(ids[:1]))["ids"] == ids[:1]
        await c.close()
        again = await Consumer.open(api, topic)
        assert await again.quiet(1) == []
        await again.close()

    async def test_single_id_ack_and_unknown_ids_fail_per_id(self, api: Api) -> None:
        topic = api.topic()
        api.publish(topic, 1)
        c = await Consumer.open(api, topic)
        [m] = await c.messages(1)
        await c.ws.send(json.dumps({"type": "ack", "id": m["id"]}))
        assert await c.until("acked") == {"type": "acked", "ids": [m["id"]], "failed": []}
        answer = await c.ack(["nonsense"])
        assert answer["ids"] == [] and answer["failed"] == [{"id": "nonsense", "code": "INVALID_REQUEST"}]
        await c.close()

    async def test_nack_with_delay_redelivers_after_it(self, api: Api) -> None:
        topic = api.topic()
        api.publish(topic, 2)
        c = await Consumer.open(api, topic)
        first, second = await c.messages(2)
        await c.ws.send(json.dumps({"type": "nack", "id": first["id"], "reason": "busy", "delay": "1s"}))
        nacked_at = time.monotonic()
        assert (await c.until("acked"))["ids"] == [first["id"]]
        await c.ack([second["id"]])
        [again] = await c.messages(1, timeout=4)
        assert again["id"] == first["id"] and again["attempt"] == 2
        assert time.monotonic() - nacked_at >= 0.9
        await c.close()

    @pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
    async def test_a_message_nacked_then_acked_is_committed_while_connected(
        self, api: Api, delivery: str
    ) -> None:
        # No DLQ: every nack redelivers at once. The last ack is of a lease row, with nothing in memory
        # acked after it: the committed offset must still move past it (it used to wait for the close).
        topic = api.topic(delivery=delivery)
        [mid] = api.publish(topic, 1)
        c = await Consumer.open(api, topic)
        for attempt in range(1, 7):
            [m] = await c.messages(1, timeout=4)
            assert (m["id"], m["attempt"]) == (mid, attempt)
            await c.ws.send(json.dumps({"type": "nack", "id": mid, "reason": "not yet"}))
            assert (await c.until("acked"))["ids"] == [mid]
        [m] = await c.messages(1, timeout=4)
        assert m["attempt"] == 7 and (await c.ack([mid]))["ids"] == [mid]
        offsets = api.ok("GET", f"/v1/topics/{topic}/groups/g/offsets?partition=0")
        assert offsets == {"current": 1, "latest": 1, "lag": 0}  # durable before the answer
        assert await c.quiet(0.5) == []
        await c.close()

    async def test_ack_timeout_redelivers_with_the_next_attempt(self, api: Api) -> None:
        topic = api.topic(ackTimeout="1s")
        [mid] = api.publish(topic, 1)
        c = await Consumer.open(api, topic)
        [m] = await c.messages(1)
        [again] = await c.messages(1, timeout=4)
        assert (m["id"], m["attempt"]) == (mid, 1) and (again["id"], again["attempt"]) == (mid, 2)
        assert again["ackDeadline"] > m["ackDeadline"]
        await c.close()

    async def test_one_frame_acks_a_redelivery_and_first_deliveries_in_the_order_asked(
        self, api: Api
    ) -> None:
        topic = api.topic(delivery="exactly-once")
        api.publish(topic, 1)
        c = await Consumer.open(api, topic)
        [first] = await c.messages(1)
        await c.ws.send(json.dumps({"type": "nack", "id": first["id"], "reason": "later"}))
        assert (await c.until("acked"))["ids"] == [first["id"]]
        [again] = await c.messages(1, timeout=4)  # a lease row now, not an in-memory lease
        assert again["attempt"] == 2
        api.publish(topic, 2, start=1)
        second, third = await c.messages(2)
        order = [second["id"], again["id"], third["id"]]
        assert await c.ack(order) == {"type": "acked", "ids": order, "failed": []}
        offsets = api.ok("GET", f"/v1/topics/{topic}/groups/g/offsets?partition=0")
        assert offsets["current"] == 3  # durable before answering
        assert await c.quiet(1) == []
        await c.close()

    async def test_an_ack_after_the_deadline_is_ack_expired(self, api: Api) -> None:
        # A retry 30 s away: the message is not redelivered (under the same id) before the late ack.
        config = {"ackTimeout": "1s", "deadLetter": {"maxRetries": 3, "retryDelay": "30s"}}
        topic = api.topic(delivery="exactly-once", **config)
        api.publish(topic, 1)
        c = await Consumer.open(api, topic)
        [m] = await c.messages(1)
        await asyncio.sleep(1.2)
        answer = await c.ack([m["id"]])
        assert answer["ids"] == [] and answer["failed"] == [{"id": m["id"], "code": "ACK_EXPIRED"}]
        offsets = api.ok("GET", f"/v1/topics/{topic}/groups/g/offsets?partition=0")
        assert offsets["current"] == 0  # still owed: it waits for its retry
        await c.close()

    async def test_extend_moves_the_deadline(self, api: Api) -> None:
        topic = api.topic(ackTimeout="1s")
        api.publish(topic, 1)
        c = await Consumer.open(api, topic)
        [m] = await c.messages(1)
        await c.ws.send(json.dumps({"type": "extend", "id": m["id"], "seconds": 5}))
        assert (await c.until("acked"))["ids"] == [m["id"]]
        assert await c.quiet(1.6) == []
        assert (await c.ack([m["id"]]))["ids"] == [m["id"]]
        await c.close()


class TestDeadLetters:
    async def test_nacks_and_timeouts_over_websocket_end_in_the_dlq_while_the_rest_flows(
        self, api: Api
    ) -> None:
        # 2 s to nack: under load (three suites at once) a 1 s lease sometimes ran out before the nack came,
        # which then answered nothing, rightly. ``slow`` still times out twice within the 15 s below.
        topic = api.topic(ackTimeout="2s")
        api.ok("PUT", f"/v1/topics/{topic}/groups/g", {"deadLetter": {"maxRetries": 1, "retryDelay": "0s"}})
        poison, slow, *healthy = api.publish(topic, 6)
        c = await Consumer.open(api, topic)
        acked: set[str] = set()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            page = api.ok("GET", f"/v1/topics/{topic}/groups/g/dlq")
            if page["total"] == 2 and acked == set(healthy):
                break
            for m in await c.quiet(0.3):
                if m["id"] == poison:
                    await c.ws.send(json.dumps({"type": "nack", "id": poison, "reason": "bad payload"}))
                    assert (await c.until("acked"))["ids"] == [poison]
                elif m["id"] in healthy:
                    assert (await c.ack([m["id"]]))["ids"] == [m["id"]]
                    acked.add(m["id"])
                # ``slow`` is never acked: its deadline passes, twice.
        page = api.ok("GET", f"/v1/topics/{topic}/groups/g/dlq")
        reasons = {e["messageId"]: (e["reason"], e["retryCount"]) for e in page["data"]}
        assert reasons == {poison: ("bad payload", 1), slow: ("ack timeout", 1)}
        assert acked == set(healthy)
        api.ok("POST", f"/v1/topics/{topic}/groups/g/dlq/replay", {"messageId": poison})
        [again] = [m for m in await c.messages(1) if m["id"] == poison]
        assert again["attempt"] == 1
        await c.close()


class TestHandOver:
    """A push member keeps first-delivery leases in memory: partitions leave it only once it has
    written them, and seeks reach it (on SQLite and on Postgres, each with a server of its own)."""

    def _pull(self, api: Api, topic: str, path: str, body: dict[str, Any]) -> Any:
        return api.ok("POST", f"/v1/topics/{topic}/groups/g/{path}", body)

    async def test_a_pull_member_gets_a_partition_only_after_the_push_member_released_it(
        self, own_server: ServerProcess
    ) -> None:
        api = Api(own_server)
        topic = api.topic(partitions=2, delivery="exactly-once", ackTimeout="30s")
        first = set(api.publish(topic, 20))
        c = await Consumer.open(api, topic, maxInFlight=100)
        held = await c.messages(20)
        assert {m["id"] for m in held} == first
        joined = self._pull(api, topic, "members", {"startFrom": "earliest"})
        assert len(joined["assignments"]) == 1
        me = {"memberId": joined["memberId"], "generationId": joined["generationId"]}
        # Released to the pull member with the push member's leases: none of them is handed out again.
        polled = self._pull(api, topic, "poll", {**me, "maxMessages": 100, "waitSeconds": 1.5})
        assert polled["messages"] == []
        answer = await c.ack(sorted(first))
        assert set(answer["ids"]) == first and answer["failed"] == []
        offsets = api.ok("GET", f"/v1/topics/{topic}/groups/g/offsets")["data"]
        assert [o["current"] for o in offsets] == [10, 10]  # durable before answering
        later = set(api.publish(topic, 20, start=20))
        pulled = self._pull(api, topic, "poll", {**me, "maxMessages": 100, "waitSeconds": 3})["messages"]
        pushed = await c.messages(10)
        assert {m["partition"] for m in pulled} == set(joined["assignments"])
        assert {m["partition"] for m in pushed}.isdisjoint(joined["assignments"])
        assert {m["id"] for m in pulled} | {m["id"] for m in pushed} == later
        assert {m["id"] for m in pulled}.isdisjoint({m["id"] for m in pushed})
        await c.close()

    async def test_a_seek_while_pushing_resumes_delivery_there(self, own_server: ServerProcess) -> None:
        api = Api(own_server)
        topic = api.topic(partitions=1, delivery="exactly-once")
        ids = api.publish(topic, 10)
        c = await Consumer.open(api, topic, maxInFlight=100)
        got = await c.messages(10)
        assert (await c.ack([m["id"] for m in got[:4]]))["failed"] == []
        api.ok("POST", f"/v1/topics/{topic}/groups/g/offsets/seek", {"partition": 0, "offset": 2})
        again = await c.messages(8, timeout=5)
        assert [m["id"] for m in again] == ids[2:]
        assert {m["attempt"] for m in again} == {1}
        assert (await c.ack([m["id"] for m in again]))["failed"] == []
        assert await c.quiet(1) == []
        offsets = api.ok("GET", f"/v1/topics/{topic}/groups/g/offsets")["data"]
        assert offsets[0]["current"] == 10
        await c.close()

    async def test_metrics_count_the_leases_held_in_memory(self, api: Api) -> None:
        topic = api.topic(partitions=1, delivery="exactly-once")
        api.publish(topic, 7)
        c = await Consumer.open(api, topic, maxInFlight=5)
        got = await c.messages(5)
        text = (await asyncio.to_thread(httpx.get, f"{api.server.url}/metrics", timeout=10)).text
        line = next(
            x
            for x in text.splitlines()
            if x.startswith("queuecore_group_in_flight_messages") and f'topic="{topic}"' in x
        )
        assert line.endswith(" 5.0"), line
        await c.ack([m["id"] for m in got])
        await c.close()


# The deployments of this run (tests/conftest.py: Postgres with the local log engine is make test-matrix's).
@pytest.fixture(params=[b for b in ("sqlite", "postgres") if b in BACKENDS])
def own_server(request, tmp_path, postgres_database):
    env = server_env(tmp_path / "data", postgres_database if request.param == "postgres" else "")
    cli(env, "migrate")
    boot = json.loads(cli(env, "bootstrap", "--project", "crash", "--tier", "pro", "--json").stdout)
    proc = ServerProcess(env=env, port=free_port(), data_dir=tmp_path / "data", log_path=tmp_path / "srv.log")
    proc.keys = boot["keys"]
    proc.start()
    yield proc
    proc.stop()


class TestCrash:
    @pytest.mark.slow
    @pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
    async def test_sigkill_mid_stream_loses_no_ack_and_redelivers_every_unacked(
        self, own_server: ServerProcess, delivery: str
    ) -> None:
        api = Api(own_server)
        topic = api.topic(partitions=2, delivery=delivery, sessionTimeout="2s", ackTimeout="30s")
        ids = set(api.publish(topic, 40))
        c = await Consumer.open(api, topic, maxInFlight=20)
        got = await c.messages(20)
        # Out of order: every other message, so the checkpoint holds acks above its floor too.
        acked = {m["id"] for m in got[1::2]}
        assert set((await c.ack(sorted(acked)))["ids"]) == acked
        if delivery == "at-least-once":
            await asyncio.sleep(0.3)  # answered at once, written within 50 ms
        own_server.stop(signal.SIGKILL)
        own_server.start()
        with pytest.raises(websockets.ConnectionClosed):
            for _ in range(100):
                await c.frame(5)
        again = await Consumer.open(api, topic, maxInFlight=100)
        seen = {m["id"]: m for m in await again.messages(len(ids) - len(acked), timeout=15)}
        assert not acked & set(seen)
        assert set(seen) == ids - acked
        # Their first delivery was a lease held in memory: the new owner starts them over.
        assert {seen[m["id"]]["attempt"] for m in got[::2]} == {1}
        assert await again.quiet(1) == []
        await again.close()
