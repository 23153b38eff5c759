"""The open-connection registry (``app/broker/connections.py``): the per-key cap counts live peers only."""

from __future__ import annotations

import asyncio

import pytest

from app.broker.connections import ConnectionRegistry
from app.broker.errors import Draining

pytestmark = pytest.mark.parametrize("deployment", ["sqlite"], indirect=True)


async def test_a_peer_that_hung_up_stops_counting_against_the_cap_at_once(deployment):
    registry = ConnectionRegistry(deployment.store)
    ended = []
    first = registry.open("key_a", "websocket", ended.append)
    registry.open("key_a", "sse", ended.append)
    registry.open("key_a", "poll", ended.append)  # a long poll is not a push connection
    assert registry.push_count("key_a") == 2

    registry.release(first)  # the socket closed; its member is still leaving
    assert registry.push_count("key_a") == 1
    assert registry.push_count("key_b") == 0
    assert ended == []


async def test_a_drain_waits_for_a_released_connection_until_it_is_closed(deployment):
    registry = ConnectionRegistry(deployment.store)
    ended = []
    connection = registry.open("key_a", "websocket", ended.append)
    assert registry.drain() == 1
    assert [type(e) for e in ended] == [Draining]
    registry.release(connection)
    # Released is not gone: its member has not left yet, so a shutdown still waits for it.
    assert await registry.drained(timeout=0.2) is False
    registry.close(connection)
    assert await registry.drained(timeout=5) is True


async def test_a_connection_released_then_closed_is_forgotten(deployment):
    registry = ConnectionRegistry(deployment.store)
    connection = registry.open("key_a", "websocket", lambda _: None)
    registry.release(connection)
    registry.close(connection)
    assert registry.push_count("key_a") == 0
    await asyncio.wait_for(registry.sweep(), 5)  # nothing left to look up


async def test_the_sweep_counts_live_peers_only(deployment, tenant):
    """Connections whose peers hung up stay registered while their members leave; the sweep's cap must not
    count them, or it ends the live connections opened since as if the key were past its cap (the abuse
    test saw two fresh WebSockets ended RATE_LIMIT_EXCEEDED just after two earlier ones had closed)."""
    registry = ConnectionRegistry(deployment.store, ceiling=2)
    key_id = tenant.key_ids["production"]
    ended: list[object] = []
    gone = [registry.open(key_id, "websocket", ended.append) for _ in range(2)]
    for connection in gone:
        registry.release(connection)  # closed by the peer; their members still leaving
    live = [registry.open(key_id, "websocket", ended.append) for _ in range(2)]
    assert registry.push_count(key_id) == 2
    await asyncio.wait_for(registry.sweep(), 5)
    assert ended == [] and all(c.ended is None for c in live)
    registry.open(key_id, "websocket", ended.append)  # past the cap (the edge refuses it before this)
    await asyncio.wait_for(registry.sweep(), 5)
    assert [type(e).__name__ for e in ended] == ["RateLimitExceeded"]
