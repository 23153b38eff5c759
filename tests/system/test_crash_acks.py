"""SIGKILL a real ``queuecore-server`` while pull consumers ack and a publisher writes batches: not at a
quiet moment, but with ack and publish requests on the wire.

On an exactly-once topic an ack the server confirmed is never undone by the kill (the message is not
delivered to the group again), an ack the kill cut may or may not have been committed (the message may
come again, or not), and at the end, consuming without kills, every message is delivered and the
group's lag is 0. The kills must have caught acks and batch publishes in flight (their answers cut),
else the test would prove nothing about them.
"""

from __future__ import annotations

import asyncio
import random
import signal
from dataclasses import dataclass, field

import httpx
import pytest

from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env, set_tier

KILLS = 3
MAX_KILLS = 8
TOPIC = "/v1/topics/acks"
GROUP = TOPIC + "/groups/workers"
MEMBERS = 3
PUBLISHERS = 3  # back to back, so that one has a batch on the wire whenever the kill comes


@dataclass
class Ledger:
    """What the client knows: what was published, which acks the server confirmed, what went wrong."""

    published: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)  # acks the server answered with the id
    delivered: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    acks_cut: int = 0  # ack requests sent whose answer the kill cut
    publishes_cut: int = 0


def _cut_in_flight(exc: httpx.TransportError) -> bool:
    """A request the kill cut on the wire (sent, no answer), not one refused at connect after it."""
    return not isinstance(exc, httpx.ConnectError)


async def _join(http: httpx.AsyncClient, ident: dict | None = None) -> dict:
    """Join the group, or join again as ``ident``'s member (a new member if that one expired)."""
    # The shortest session: members the kills left behind make way soon after the restart.
    body = {"startFrom": "earliest", "sessionTimeout": "2s"}
    if ident is not None:
        r = await http.post(GROUP + "/members", json=body | {"memberId": ident["memberId"]})
        if r.status_code == 200:
            return {"memberId": r.json()["memberId"], "generationId": r.json()["generationId"]}
    r = await http.post(GROUP + "/members", json=body)
    assert r.status_code == 200, r.text
    return {"memberId": r.json()["memberId"], "generationId": r.json()["generationId"]}


async def _ack(http: httpx.AsyncClient, ident: dict, mid: str, ledger: Ledger) -> None:
    try:
        r = await http.post(GROUP + "/ack", json={**ident, "ids": [mid]})
    except httpx.TransportError as exc:
        ledger.acks_cut += _cut_in_flight(exc)
        raise
    if r.status_code == 200:
        ledger.confirmed.update(r.json()["ids"])


async def _poll(
    http: httpx.AsyncClient, ident: dict, ledger: Ledger, wait: float = 0, most: int = 20
) -> list[dict] | None:
    """One poll; None when the member must join again (expired, or the group rebalanced)."""
    r = await http.post(GROUP + "/poll", json={**ident, "maxMessages": most, "waitSeconds": wait})
    if r.status_code in (404, 409):
        return None
    assert r.status_code == 200, r.text
    batch = r.json()["messages"]
    for m in batch:
        if m["id"] in ledger.confirmed:
            ledger.violations.append(f"acked {m['id']} delivered again (attempt {m['attempt']})")
        ledger.delivered.add(m["id"])
    return batch


async def consume(http: httpx.AsyncClient, ledger: Ledger) -> None:
    """One member: poll, and ack every message by a request of its own, all at once (so that acks are on
    the wire whenever the kill comes), until the kill cuts its connection."""
    ident = await _join(http)
    while True:
        batch = await _poll(http, ident, ledger)
        if batch is None:
            ident = await _join(http, ident)
            continue
        await asyncio.gather(*(_ack(http, ident, m["id"], ledger) for m in batch))


async def drain(http: httpx.AsyncClient, ledger: Ledger, polls: int = 200) -> list[dict]:
    """No more kills: one member consumes until the group's lag is 0 (the members the kills left expire
    after 2 s, their leases after 1 s), at most ``polls`` polls; returns the last offsets seen."""
    ident = await _join(http)
    lags: list[dict] = []
    for _ in range(polls):
        batch = await _poll(http, ident, ledger, wait=1, most=1000)
        if batch is None:
            ident = await _join(http, ident)
            continue
        if batch:
            await _ack_all(http, ident, [m["id"] for m in batch], ledger)
            continue
        lags = (await http.get(GROUP + "/offsets")).json()["data"]
        if all(p["lag"] == 0 for p in lags):
            break
        # Nothing for it, yet lag: the partitions of expired members are to be taken over.
        beat = await http.post(
            f"{GROUP}/members/{ident['memberId']}/heartbeat", json={"generationId": ident["generationId"]}
        )
        if beat.status_code != 200 or beat.json()["shouldRejoin"]:
            ident = await _join(http, ident)
    return lags


async def _ack_all(http: httpx.AsyncClient, ident: dict, ids: list[str], ledger: Ledger) -> None:
    r = await http.post(GROUP + "/ack", json={**ident, "ids": ids})
    if r.status_code == 200:
        ledger.confirmed.update(r.json()["ids"])


async def publish(http: httpx.AsyncClient, ledger: Ledger) -> None:
    """Batches back to back until the kill cuts one."""
    while True:
        items = [{"data": {"n": i}} for i in range(random.randint(2, 30))]
        try:
            r = await http.post(TOPIC + "/messages/batch", json={"messages": items})
        except httpx.TransportError as exc:
            ledger.publishes_cut += _cut_in_flight(exc)
            raise
        assert r.status_code == 201, r.text
        ledger.published.update(m["id"] for m in r.json()["messages"])


@pytest.mark.slow
async def test_sigkill_with_acks_and_batch_writes_in_flight(tmp_path):
    env = server_env(tmp_path / "data")
    cli(env, "migrate")
    key = bootstrap(env, "crash-acks", "--tier", "enterprise")["keys"]["production"]
    # Limits out of the way: a refused request here would be noise, not a finding.
    limits = "publish=100000,consume=100000,admin=10000"
    set_tier(env, "crash-acks", "enterprise", limits)
    server = ServerProcess(
        env=env, port=free_port(), data_dir=tmp_path / "data", log_path=tmp_path / "srv.log"
    )
    server.start()
    headers = {"Authorization": f"Bearer {key}"}
    ledger = Ledger()
    try:
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=10) as http:
            topic = {"name": "acks", "partitions": 3, "delivery": "exactly-once"}
            assert (await http.post("/v1/topics", json=topic)).status_code == 201
            assert (await http.put(GROUP, json={"ackTimeout": "1s"})).status_code == 200
            for _ in range(10):  # something to consume from the first moment
                answer = await http.post(
                    TOPIC + "/messages/batch", json={"messages": [{"data": i} for i in range(50)]}
                )
                ledger.published.update(m["id"] for m in answer.json()["messages"])
        kills = 0
        # At least KILLS kills, and more (up to MAX_KILLS) until some kill has cut both an ack and a
        # publish on the wire: a kill between requests tests nothing of what this test is for.
        while kills < KILLS or (kills < MAX_KILLS and not (ledger.acks_cut and ledger.publishes_cut)):
            kills += 1
            async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=10) as http:
                tasks = [asyncio.create_task(consume(http, ledger)) for _ in range(MEMBERS)]
                tasks += [asyncio.create_task(publish(http, ledger)) for _ in range(PUBLISHERS)]
                await asyncio.sleep(random.uniform(0.5, 1.5))
                server.stop(signal.SIGKILL)
                results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 15)
            # Every task ends at the kill (its connection cut); anything else is a finding.
            assert all(isinstance(r, httpx.TransportError) for r in results), results
            server.start()
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
            lags = await drain(http, ledger)
        assert lags and all(p["lag"] == 0 for p in lags), lags
    finally:
        server.stop()
    assert ledger.violations == []
    assert ledger.published <= ledger.delivered, f"{len(ledger.published - ledger.delivered)} never delivered"
    assert ledger.acks_cut > 0 and ledger.publishes_cut > 0, (ledger.acks_cut, ledger.publishes_cut)
