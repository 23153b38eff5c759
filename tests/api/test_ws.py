"""Push delivery over WebSocket against real ``queuecore-server`` processes, with the ``websockets`` client.

Most scenarios share the session server (embedded SQLite), each on its own topic; the crash scenario runs
its own server (on SQLite and on Postgres), which it SIGKILLs mid-stream.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

import httpx
import jwt
import pytest
import websockets
from websockets.asyncio.client import ClientConnection, connect

from app.broker import tokens
from app.settings import Settings
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


class Api:
    def __init__(self, server: ServerProcess, key: str | None = None) -> None:
        self.server = server
        self.key = key or server.keys["production"]
        self.headers = {"Authorization": f"Bearer {self.key}"}

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        r = httpx.request(method, self.server.url + path, json=body, headers=self.headers, timeout=30)
        assert r.status_code in (200, 201, 204), r.text
        return r.json() if r.content else None

    def topic(self, partitions: int = 1, delivery: str = "at-least-once", **group_config: str) -> str:
        name = _name("ws")
        self.ok("POST", "/v1/topics", {"name": name, "partitions": partitions, "delivery": delivery})
        if group_config:
            self.ok("PUT", f"/v1/topics/{name}/groups/g", group_config)
        return name

    def publish(self, topic: str, count: int, start: int = 0) -> list[str]:
        body = {"messages": [{"data": i} for i in range(start, start + count)]}
        return [m["id"] for m in self.ok("POST", f"/v1/topics/{topic}/messages/batch", body)["messages"]]

    def ws_url(self, topic: str, **params: Any) -> str:
        query = "&".join(f"{k}={v}" for k, v in {"group": "g", "startFrom": "earliest", **params}.items())
        return f"ws://127.0.0.1:{self.server.port}/v1/topics/{topic}/consume?{query}"


class Consumer:
    """A connection and the frames it received, messages kept apart from the rest."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.welcome: dict[str, Any] = {}
        self.control: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []  # messages that came while waiting for a control frame

    @classmethod
    async def open(cls, api: Api, topic: str, **params: Any) -> Consumer:
        ws = await connect(api.ws_url(topic, **params), additional_headers=api.headers)
        consumer = cls(ws)
        consumer.welcome = json.loads(await asyncio.wait_for(ws.recv(), 5))
        assert consumer.welcome["type"] == "welcome", consumer.welcome
        return consumer

    async def frame(self, timeout: float = 5) -> dict[str, Any]:
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))

    async def messages(self, count: int, timeout: float = 5) -> list[dict[str, Any]]:
        """At least ``count`` messages (all those of the frames read), within ``timeout``."""
        got, self.pending = self.pending, []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            frame = await self.frame(max(0.01, deadline - time.monotonic()))
            if frame["type"] == "message":
                got.append(frame)
            elif frame["type"] == "messages":
                assert len(frame["messages"]) > 1
                got.extend(frame["messages"])
            else:
                self.control.append(frame)
        return got

    async def quiet(self, seconds: float) -> list[dict[str, Any]]:
        """Every message arriving within ``seconds`` (expected: none, mostly)."""
        got, self.pending = self.pending, []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                frame = await self.frame(left)
            except TimeoutError:
                break
            if frame["type"] == "message":
                got.append(frame)
            elif frame["type"] == "messages":
                got.extend(frame["messages"])
            else:
                self.control.append(frame)
        return got

    async def until(self, kind: str, timeout: float = 5) -> dict[str, Any]:
        for frame in self.control:
            if frame["type"] == kind:
                self.control.remove(frame)
                return frame
        deadline = time.monotonic() + timeout
        while True:
            frame = await self.frame(max(0.01, deadline - time.monotonic()))
            if frame["type"] == kind:
                return frame
            if frame["type"] == "message":
                self.pending.append(frame)
            elif frame["type"] == "messages":
                self.pending.extend(frame["messages"])
            else:
                self.control.append(frame)

    async def ack(self, ids: list[str]) -> dict[str, Any]:
        await self.ws.send(json.dumps({"type": "ack", "ids": ids}))
        return await self.until("acked")

    async def close(self) -> None:
        await self.ws.close()


@pytest.fixture(params=["embedded", "jetstream"])
def api(request: pytest.FixtureRequest) -> Api:
    """The embedded default server, and the scale-out one (Postgres, Redis, JetStream)."""
    return Api(request.getfixturevalue("server" if request.param == "embedded" else "jetstream_server"))


class TestUpgrade:
    async def test_welcome_then_messages_in_offset_order_per_partition(self, api: Api) -> None:
        topic = api.topic(partitions=3)
        ids = api.publish(topic, 60)
        c = await Consumer.open(api, topic)
        assert c.welcome["assignments"] == [0, 1, 2] and c.welcome["memberId"].startswith("csr_")
        assert isinstance(c.welcome["generationId"], int)
        got = await c.messages(60)
        assert sorted(m["id"] for m in got) == sorted(ids)
        by_partition: dict[int, list[int]] = defaultdict(list)
        for m in got:
            by_partition[m["partition"]].append(m["offset"])
            assert m["attempt"] == 1 and m["ackDeadline"].endswith("Z") and m["topic"] == topic
            assert m["key"] is None and m["headers"] == {} and "data" in m
        assert all(offsets == sorted(offsets) for offsets in by_partition.values())
        await c.close()

    async def test_refusals_carry_the_status_and_the_envelope(self, api: Api) -> None:
        topic = api.topic()
        cases = [
            (api.ws_url(topic), {}, 401, "INVALID_API_KEY"),
            (api.ws_url(topic), {"Authorization": "Bearer pq_live_sk_" + "x" * 32}, 401, "INVALID_API_KEY"),
            (api.ws_url("no-such-topic"), api.headers, 404, "TOPIC_NOT_FOUND"),
            (api.ws_url(topic, maxInFlight=0), api.headers, 400, "INVALID_REQUEST"),
            (api.ws_url(topic, startFrom="middle"), api.headers, 400, "INVALID_REQUEST"),
            (api.ws_url(topic).replace("group=g&", "group=&"), api.headers, 400, "INVALID_REQUEST"),
        ]
        for url, headers, status, code in cases:
            with pytest.raises(websockets.InvalidStatus) as refused:
                await connect(url, additional_headers=headers)
            response = refused.value.response
            assert response.status_code == status, url
            error = json.loads(response.body)["error"]
            assert (
                error["code"] == code and error["status"] == status and error["requestId"].startswith("req_")
            )
        # Refused upgrades are counted under their own status, not as server errors.
        async with httpx.AsyncClient(timeout=10) as http:
            metrics = (await http.get(api.server.url + "/metrics")).text
        route = 'route="/v1/topics/{name}/consume"'
        assert f'method="WS",{route},status="401"' in metrics
        assert f'method="WS",{route},status="404"' in metrics
        assert f'method="WS",{route},status="500"' not in metrics
        # A refusal is a normal answer: logged at INFO with its request id, never as a server error.
        assert api.server.log_path is not None
        lines = [json.loads(line) for line in api.server.log_path.read_text().splitlines() if line]
        assert not [x for x in lines if x["level"] == "error" and "handshake" in x["msg"]]
        refused = [
            x for x in lines if x.get("route") == "/v1/topics/{name}/consume" and x.get("status") == 404
        ]
        assert refused and all(x["level"] == "info" and x["requestId"].startswith("req_") for x in refused)

    async def test_malformed_frames_get_an_error_frame_not_a_disconnect(self, api: Api) -> None:
        topic = api.topic()
        api.publish(topic, 1)
        c = await Consumer.open(api, topic)
        [m] = await c.messages(1)
        for bad in ("not json", json.dumps([1]), json.dumps({"type": "dance"}), json.dumps({"type": "ack"})):
            await c.ws.send(bad)
            error = (await c.until("error"))["error"]
            assert error["code"] == "INVALID_REQUEST" and error["status"] == 400
        assert (await c.ack([m["id"], "msg_bogus"]))["ids"] == [m["id"]]
        await c.close()


class TestTopicDeleted:
    @pytest.mark.parametrize("holding", [True, False], ids=["holding-a-message", "idle"])
    async def test_the_member_gets_topic_not_found_and_a_normal_close(self, api: Api, holding: bool) -> None:
        topic = api.topic(partitions=2, delivery="exactly-once")
        c = await Consumer.open(api, topic)
        if holding:
            api.publish(topic, 1)
            await c.messages(1)
        api.ok("DELETE", f"/v1/topics/{topic}")
        error = (await c.until("error"))["error"]
        assert error["code"] == "TOPIC_NOT_FOUND" and error["status"] == 404 and topic in error["message"]
        with pytest.raises(websockets.ConnectionClosedOK):
            await c.frame()
        assert c.ws.close_code == 1000
        # A product answer, not a server fault: nothing about this member is logged as an error.
        assert api.server.log_path is not None
        member = c.welcome["memberId"]
        errors = [
            line
            for line in api.server.log_path.read_text().splitlines()
            if '"level":"error"' in line and (topic in line or member in line or "UnknownLog" in line)
        ]
        assert errors == []


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
        topic = api.topic(ackTimeout="1s")
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


class TestFlowControl:
    async def test_no_more_than_max_in_flight_unacked(self, api: Api) -> None:
        topic = api.topic(partitions=2)
        api.publish(topic, 20)
        c = await Consumer.open(api, topic, maxInFlight=5)
        got = await c.messages(5)
        assert len(got) == 5
        assert await c.quiet(1.2) == []
        await c.ack([got[0]["id"], got[1]["id"]])
        more = await c.messages(2)
        assert len(more) == 2 and await c.quiet(1.2) == []
        seen = {m["id"] for m in got + more}
        await c.ack(list(seen - {got[0]["id"], got[1]["id"]}))
        rest = await c.messages(5)
        assert len(rest) == 5 and not seen & {m["id"] for m in rest}
        await c.close()

    async def test_a_full_window_drains_while_the_beat_polls(self, api: Api) -> None:
        # Acked frame by frame, the window stays nearly full, and a beat's lease-row poll holds some of
        # its room back now and then: delivery must wait for the beat then, not spin and stall the loop.
        topic = api.topic(delivery="exactly-once")
        for start in range(0, 20_000, 1_000):
            api.publish(topic, 1_000, start)
        ws = await connect(api.ws_url(topic, maxInFlight=1000), additional_headers=api.headers, max_size=None)
        assert json.loads(await ws.recv())["type"] == "welcome"
        acked = 0

        async def drain() -> None:
            nonlocal acked
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] in ("message", "messages"):
                    batch = frame["messages"] if frame["type"] == "messages" else [frame]
                    await ws.send(json.dumps({"type": "ack", "ids": [m["id"] for m in batch]}))
                elif frame["type"] == "acked":
                    acked += len(frame["ids"])
                    if acked >= 20_000:
                        return

        await asyncio.wait_for(drain(), 30)  # a spinning loop stalls the server: this times out
        await ws.close()


class TestGroups:
    async def test_consumers_joining_mid_stream_never_share_a_message(self, api: Api) -> None:
        topic = api.topic(partitions=6)
        ids = set(api.publish(topic, 300))
        holders: dict[str, list[str]] = defaultdict(list)
        consumers: list[Consumer] = []

        async def run(c: Consumer) -> None:
            while True:
                got = await c.messages(1, timeout=30)
                for m in got:
                    holders[m["id"]].append(c.welcome["memberId"])
                await asyncio.sleep(0.02)  # hold them a little while others join
                await c.ws.send(json.dumps({"type": "ack", "ids": [m["id"] for m in got]}))

        tasks = []
        for _ in range(3):
            c = await Consumer.open(api, topic, maxInFlight=10)
            consumers.append(c)
            tasks.append(asyncio.create_task(run(c)))
            await asyncio.sleep(0.3)
        ids |= set(api.publish(topic, 300, start=300))
        deadline = time.monotonic() + 20
        while set(holders) != ids and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert set(holders) == ids
        assert all(len(h) == 1 for h in holders.values()), {k: v for k, v in holders.items() if len(v) > 1}
        owners = [set() for _ in consumers]
        for c, owned in zip(consumers, owners, strict=True):
            owned.update(c.welcome["assignments"])
        assert {len(set(h)) for h in holders.values()} == {1}
        members_used = {h[0] for h in holders.values()}
        assert len(members_used) == 3  # every member got its share after the rebalances
        for c in consumers:
            await c.close()

    async def test_a_closed_connection_releases_its_partitions_at_once(self, api: Api) -> None:
        topic = api.topic(partitions=2, ackTimeout="1m")
        first = await Consumer.open(api, topic)
        second = await Consumer.open(api, topic)
        rebalance = await first.until("rebalance")
        assert sorted(rebalance["assignments"] + second.welcome["assignments"]) == [0, 1]
        api.publish(topic, 10)
        held = await second.messages(1)  # unacked when it goes
        await second.close()
        closed_at = time.monotonic()
        grown = await first.until("rebalance", timeout=3)
        assert grown["assignments"] == [0, 1] and time.monotonic() - closed_at < 2
        got = await first.messages(10, timeout=5)
        assert {m["id"] for m in held} <= {m["id"] for m in got}  # its unacked ones come at once
        await first.close()

    async def test_an_aborted_tcp_connection_releases_its_partitions(self, api: Api) -> None:
        topic = api.topic(partitions=2)
        first = await Consumer.open(api, topic)
        second = await Consumer.open(api, topic)
        await first.until("rebalance")
        second.ws.transport.abort()  # no close frame
        aborted_at = time.monotonic()
        assert (await first.until("rebalance", timeout=3))["assignments"] == [0, 1]
        assert time.monotonic() - aborted_at < 2
        await first.close()

    @pytest.mark.parametrize("session", [10, 3, 2])
    async def test_a_silently_hung_connection_keeps_its_partitions_for_the_session_timeout_then_goes(
        self, api: Api, session: int
    ) -> None:
        # The default sessionTimeout (10 s), a short one and the shortest (2 s): a member silent for less
        # than its group's sessionTimeout keeps its partitions (a GC pause is not a death), and once
        # silent for that long it goes within a second more, whatever the server-wide ping settings.
        topic = api.topic(partitions=2, sessionTimeout=f"{session}s")
        first = await Consumer.open(api, topic)
        script = (
            "import os, signal, sys, json\n"
            "from websockets.sync.client import connect\n"
            "with connect(sys.argv[1], additional_headers={'Authorization': sys.argv[2]}) as ws:\n"
            "    print(json.loads(ws.recv())['type'], flush=True)\n"
            "    sys.stdin.readline()\n"
            "    ws.ping()  # the last thing the server hears from it\n"
            "    os.kill(os.getpid(), signal.SIGSTOP)  # TCP stays open; nothing answers pings any more\n"
        )
        hung = subprocess.Popen(  # noqa: ASYNC220 - started once, read with one readline
            [sys.executable, "-c", script, api.ws_url(topic), api.headers["Authorization"]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            assert hung.stdout is not None and hung.stdout.readline().strip() == b"welcome"
            await first.until("rebalance")
            assert hung.stdin is not None
            hung.stdin.write(b"go\n")
            hung.stdin.flush()
            stopped_at = time.monotonic()
            assert (await first.until("rebalance", timeout=session + 1))["assignments"] == [0, 1]
            silent_for = time.monotonic() - stopped_at
            assert session - 0.2 <= silent_for <= session + 1, silent_for
        finally:
            hung.kill()
            hung.wait()
        await first.close()


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


class TestTokens:
    def _token(self, api: Api, topic: str, **extra: str) -> str:
        return api.ok("POST", "/v1/tokens/websocket", {"topic": topic, **extra})["token"]

    async def _refused(self, url: str) -> dict[str, Any]:
        with pytest.raises(websockets.InvalidStatus) as refused:
            await connect(url)
        assert refused.value.response.status_code == 401
        return json.loads(refused.value.response.body)["error"]

    async def test_a_token_opens_its_topic_only(self, api: Api, server: ServerProcess) -> None:
        topic, other = api.topic(), api.topic()
        issued = api.ok("POST", "/v1/tokens/websocket", {"topic": topic})
        expires = issued["expiresAt"]
        assert expires.endswith("Z")
        ws = await connect(api.ws_url(topic, token=issued["token"]))
        assert json.loads(await ws.recv())["type"] == "welcome"
        await ws.close()
        assert (await self._refused(api.ws_url(other, token=issued["token"])))["code"] == "INVALID_API_KEY"

    async def test_a_token_does_not_open_a_recreated_topic_of_the_same_name(self, api: Api) -> None:
        topic = api.topic()
        token = self._token(api, topic)
        api.ok("DELETE", f"/v1/topics/{topic}")
        api.ok("POST", "/v1/topics", {"name": topic})
        await asyncio.sleep(1.1)  # past the topic cache's TTL
        assert (await self._refused(api.ws_url(topic, token=token)))["code"] == "INVALID_API_KEY"

    async def test_a_group_bound_token_opens_its_group_only(self, api: Api) -> None:
        topic = api.topic()
        token = self._token(api, topic, group="g")
        ws = await connect(api.ws_url(topic, token=token))
        await ws.close()
        await self._refused(api.ws_url(topic, token=token).replace("group=g", "group=h"))

    async def test_expired_and_forged_tokens_are_refused(self, api: Api, server: ServerProcess) -> None:
        topic = api.topic()
        claims = jwt.decode(self._token(api, topic), options={"verify_signature": False})
        secret = Settings(data_dir=server.data_dir).server_secret()
        fields: dict[str, Any] = {
            "key_id": claims["sub"],
            "project_id": claims["prj"],
            "environment": claims["env"],
            "topic_id": claims["tid"],
            "topic": topic,
            "group": None,
        }
        expired = tokens.issue(secret, ttl_seconds=-5, **fields).token
        await self._refused(api.ws_url(topic, token=expired))
        forged = tokens.issue(b"not the server secret", **fields).token
        await self._refused(api.ws_url(topic, token=forged))
        await self._refused(api.ws_url(topic, token="garbage"))
        assert claims["exp"] - claims["iat"] <= 300

    async def test_a_token_of_a_revoked_key_is_refused(self, api: Api, server: ServerProcess) -> None:
        project = _name("tok")
        boot = bootstrap(server.env, project, "--tier", "pro")
        own = Api(server, boot["keys"]["production"])
        topic = own.topic()
        token = self._token(own, topic)
        key_id = jwt.decode(token, options={"verify_signature": False})["sub"]
        cli(server.env, "keys", "revoke", "--id", key_id)
        assert (await self._refused(own.ws_url(topic, token=token)))["code"] == "INVALID_API_KEY"


class TestRateLimit:
    async def test_opening_a_websocket_is_charged_as_consume(self, server: ServerProcess) -> None:
        boot = json.loads(
            cli(server.env, "bootstrap", "--project", _name("rl"), "--tier", "developer", "--json").stdout
        )
        own = Api(server, boot["keys"]["production"])
        topic = own.topic()
        statuses = []
        open_ones = []
        for _ in range(55):  # developer: 50 consume requests per second
            try:
                ws = await connect(own.ws_url(topic), additional_headers=own.headers)
                open_ones.append(ws)
                statuses.append(101)
            except websockets.InvalidStatus as refused:
                statuses.append(refused.response.status_code)
                body = json.loads(refused.response.body)
                assert body["error"]["code"] == "RATE_LIMIT_EXCEEDED"
                assert int(refused.response.headers["Retry-After"]) >= 1
        assert statuses.count(429) >= 1 and statuses.count(101) <= 50
        # Frames after the upgrade are not charged: an open connection keeps acking.
        ws, others = open_ones[0], open_ones[1:]
        for other in others:
            await other.close()
        for _ in range(60):  # more frames than the limit, within a second
            await ws.send(json.dumps({"type": "ack", "ids": ["x"]}))
        answered = 0
        while answered < 60:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert frame["type"] != "error", frame
            answered += frame["type"] == "acked"
        await ws.close()


@pytest.fixture(params=["sqlite", "postgres"])
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
