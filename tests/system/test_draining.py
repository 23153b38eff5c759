"""Draining on SIGTERM (PRODUCT.md "Operating details that clients see"), on two real API processes of one
deployment (JetStream, Postgres, Redis): the process told to stop answers health 503 ``draining``, sends its
WebSocket members a ``draining`` frame and closes them with 1012 (its Server-Sent Events streams a
``draining`` event, then their end), hands their partitions to the members on
the other node at once (long before any session timeout), keeps answering calls while it drains, and exits
by itself."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.api.sse_client import open_stream
from tests.api.ws_client import Api, Consumer
from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env


@pytest.fixture
async def pair(tmp_path_factory, nats_cluster):
    name = f"qc_test_drain_{os.getpid()}_{secrets.token_hex(4)}"
    await create_database(name)
    tmp = tmp_path_factory.mktemp("draining")
    secret = secrets.token_urlsafe(32)
    servers = []
    for i in range(2):
        env = server_env(
            tmp / f"node{i}",
            database_url(name),
            QUEUECORE_LOG_ENGINE="jetstream",
            QUEUECORE_NATS_URL=nats_cluster.url,
            QUEUECORE_REDIS_URL="redis://127.0.0.1:6379/0",
            QUEUECORE_RATE_LIMIT_PREFIX=f"qc:test:{secrets.token_hex(4)}:",
            QUEUECORE_SECRET_KEY=secret,
            QUEUECORE_DRAIN_SECONDS="8",
        )
        servers.append(
            ServerProcess(env=env, port=free_port(), data_dir=tmp / f"node{i}", log_path=tmp / f"node{i}.log")
        )
    cli(servers[0].env, "migrate")
    boot = bootstrap(servers[0].env, "draining", "--tier", "pro")
    for server in servers:
        server.keys = boot["keys"]
        server.start()
    yield servers
    for server in servers:
        server.stop()
    await drop_database(name)


async def test_sigterm_drains_push_members_to_the_other_node_and_exits(pair):
    draining, staying = pair
    api, other = Api(draining), Api(staying)
    topic = api.topic(partitions=2)
    api.ok("PUT", f"/v1/topics/{topic}/groups/g", {"sessionTimeout": "60s"})  # a handover never waits for it
    leaving = await Consumer.open(api, topic)
    remaining = await Consumer.open(other, topic)
    assert remaining.welcome["assignments"]  # the group split its two partitions between the nodes
    await leaving.until("rebalance", 10)

    async with httpx.AsyncClient(base_url=draining.url, headers=api.headers, timeout=10) as http:
        draining.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        # The frame, then the close with 1012.
        frame = await leaving.until("draining", 5)
        assert frame == {"type": "draining"}
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(leaving.ws.recv(), 5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        # Still answering while it drains: health says draining (503), a publish is served.
        health = await http.get("/v1/health")
        assert health.status_code == 503 and health.json()["status"] == "draining"
        published = await http.post(f"/v1/topics/{topic}/messages", json={"data": "during the drain"})
        assert published.status_code == 201, published.text
        # A push connection opened meanwhile (a balancer notices a draining node only at its next health
        # check) is told to go elsewhere at once: `draining`, then 1012, and it never joins the group.
        async with connect(api.ws_url(topic), additional_headers=api.headers) as late:
            assert json.loads(await asyncio.wait_for(late.recv(), 5)) == {"type": "draining"}
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(late.recv(), 5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        # The other node's member has both partitions long before the 60 s session timeout.
        while True:
            rebalance = await remaining.until("rebalance", 10)
            if sorted(rebalance["assignments"]) == [0, 1]:
                break
        # Seen while the node still drains (8 s): handed over by the drain, not by the 60 s session's expiry.
        assert draining.process.poll() is None
    # And the process exits by itself, cleanly, after its drain period.
    exit_code = await asyncio.to_thread(draining.process.wait, 30)
    assert exit_code == 0
    assert time.monotonic() - signalled >= 8  # it kept serving for QUEUECORE_DRAIN_SECONDS
    # The message published during the drain is delivered on the node that stayed.
    received = await remaining.messages(1, timeout=10)
    assert any(m["data"] == "during the drain" for m in received)
    await remaining.close()
    draining.process = None
    log = draining.log_path.read_text() if draining.log_path else ""
    assert "draining: health answers 503, 1 push connections" in log


async def test_sigterm_ends_event_streams_with_draining_and_hands_their_partitions_over(pair):
    draining, staying = pair
    api = Api(draining)
    topic = api.topic(partitions=2)
    api.ok("PUT", f"/v1/topics/{topic}/groups/g", {"sessionTimeout": "60s"})  # a handover never waits for it
    path = f"/v1/topics/{topic}/groups/g/events"
    async with (
        httpx.AsyncClient(base_url=draining.url, timeout=30) as near,
        httpx.AsyncClient(base_url=staying.url, timeout=30) as far,
        open_stream(near, path, api.headers) as leaving,
    ):
        assert (await leaving.next()).event == "welcome"
        async with open_stream(far, path, api.headers) as remaining:
            assert (await remaining.next()).event == "welcome"
            await leaving.until("rebalance", 10)  # the group split its two partitions between the nodes
            draining.process.send_signal(signal.SIGTERM)
            said = await leaving.until("draining", 5)
            assert said.json() == {}
            await leaving.ended(timeout=5)
            # The other node's member has both partitions long before the 60 s session timeout.
            while True:
                rebalance = (await remaining.until("rebalance", 10)).json()
                if sorted(rebalance["assignments"]) == [0, 1]:
                    break
            # Seen while the node still drains (8 s): handed over by the drain, not by the 60 s session's
            # expiry.
            assert draining.process.poll() is None
    exit_code = await asyncio.to_thread(draining.process.wait, 30)
    assert exit_code == 0
    draining.process = None
