"""Push delivery over WebSocket against real ``queuecore-server`` processes, with the ``websockets`` client:
the upgrade and its refusals, frames, a deleted topic, flow control, and a group's members joining, leaving
and going silent. Acks and the hand-over are ``test_ws_acks.py``; tokens and rate limits ``test_ws_auth.py``.

The scenarios share the session servers (embedded SQLite, and the scale-out one), each on its own topic.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import defaultdict

import httpx
import pytest
import websockets
from websockets.asyncio.client import connect

from tests.api.ws_client import Api, Consumer


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
        # Neither timeout can hand them over within the wait below: only the close can.
        topic = api.topic(partitions=2, ackTimeout="1m", sessionTimeout="5m")
        first = await Consumer.open(api, topic)
        second = await Consumer.open(api, topic)
        rebalance = await first.until("rebalance")
        assert sorted(rebalance["assignments"] + second.welcome["assignments"]) == [0, 1]
        api.publish(topic, 10)
        held = await second.messages(1)  # unacked when it goes
        await second.close()
        grown = await first.until("rebalance", timeout=10)
        assert grown["assignments"] == [0, 1]
        got = await first.messages(10, timeout=5)
        assert {m["id"] for m in held} <= {m["id"] for m in got}  # its unacked ones come at once
        await first.close()

    async def test_an_aborted_tcp_connection_releases_its_partitions(self, api: Api) -> None:
        # A 5-minute session: the server notices the dropped connection itself, it does not wait it out.
        topic = api.topic(partitions=2, sessionTimeout="5m")
        first = await Consumer.open(api, topic)
        second = await Consumer.open(api, topic)
        await first.until("rebalance")
        second.ws.transport.abort()  # no close frame
        assert (await first.until("rebalance", timeout=10))["assignments"] == [0, 1]
        await first.close()

    @pytest.mark.parametrize("session", [10, 3, 2])
    async def test_a_silently_hung_connection_keeps_its_partitions_for_the_session_timeout_then_goes(
        self, api: Api, session: int
    ) -> None:
        # The default sessionTimeout (10 s), a short one and the shortest (2 s): a member silent for less
        # than its group's sessionTimeout keeps its partitions (a GC pause is not a death), and once
        # silent for that long it goes, whatever the server-wide ping settings.
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
            # Not before its session timeout; then it goes. How soon after is the benchmarks' business:
            # the wait for it is bounded, generously, not asserted.
            assert (await first.until("rebalance", timeout=2 * session + 10))["assignments"] == [0, 1]
            silent_for = time.monotonic() - stopped_at
            assert silent_for >= session - 0.2, silent_for
        finally:
            hung.kill()
            hung.wait()
        await first.close()
