"""Group offsets: get, seek by offset and by time, live reset; seek works while consuming."""

from __future__ import annotations

import asyncio

import pytest

from tests.api.test_errors import assert_envelope
from tests.api.test_pull import configure, join, make_topic, publish

BASE = "/v1/topics/orders/groups/workers/offsets"


@pytest.fixture
async def topic(client, prod):
    await make_topic(client, prod, partitions=2)
    return "orders"


class TestGet:
    async def test_one_partition_and_all(self, client, prod, topic):
        await publish(client, prod, count=3, partition=0)
        member = await join(client, prod, startFrom="earliest")
        (first, *_rest) = await member.poll()
        await member.ack([first["id"]])
        assert (await client.get(BASE, params={"partition": 0}, headers=prod)).json() == {
            "current": 1,
            "latest": 3,
            "lag": 2,
        }
        assert (await client.get(BASE, headers=prod)).json() == {
            "data": [
                {"partition": 0, "current": 1, "latest": 3, "lag": 2},
                {"partition": 1, "current": 0, "latest": 0, "lag": 0},
            ]
        }

    async def test_errors(self, client, prod, topic):
        assert_envelope(await client.get(BASE, headers=prod), 404, "GROUP_NOT_FOUND")
        await configure(client, prod, topic, "workers")
        assert_envelope(await client.get(BASE, params={"partition": 2}, headers=prod), 400, "INVALID_REQUEST")
        assert_envelope(
            await client.get(BASE, params={"partition": "x"}, headers=prod), 400, "INVALID_REQUEST"
        )


class TestSeek:
    async def test_live_seek_drops_in_flight_and_resumes_there(self, client, prod, topic):
        ids = await publish(client, prod, count=5, partition=0)
        member = await join(client, prod, startFrom="earliest")
        assert [m["offset"] for m in await member.poll()] == [0, 1, 2, 3, 4]
        await member.ack(ids[:2])
        r = await client.post(f"{BASE}/seek", json={"partition": 0, "offset": 1}, headers=prod)
        assert r.status_code == 200 and r.json() == {"partition": 0, "offset": 1}
        again = await member.poll()
        assert [(m["offset"], m["attempt"]) for m in again] == [(1, 1), (2, 1), (3, 1), (4, 1)]
        answer = await member.ack(ids)
        assert sorted(answer["ids"]) == sorted(ids) and answer["failed"] == []
        assert (await client.get(BASE, params={"partition": 0}, headers=prod)).json()["current"] == 5

    async def test_seek_by_timestamp(self, client, prod, topic):
        await publish(client, prod, count=1, partition=1)
        await asyncio.sleep(0.01)
        await publish(client, prod, count=1, partition=1, start=1)
        described = await client.get("/v1/topics/orders/partitions/1/messages", headers=prod)
        last_ts = described.json()["data"][-1]["timestamp"]
        await asyncio.sleep(0.01)
        await publish(client, prod, count=2, partition=1, start=2)
        member = await join(client, prod, startFrom="earliest")
        r = await client.post(f"{BASE}/seek", json={"partition": 1, "timestamp": last_ts}, headers=prod)
        assert r.json() == {"partition": 1, "offset": 1}
        assert [m["data"]["n"] for m in await member.poll()] == [1, 2, 3]
        r = await client.post(f"{BASE}/seek", json={"partition": 1, "timestamp": 0}, headers=prod)
        assert r.json() == {"partition": 1, "offset": 0}

    async def test_seek_is_clamped_and_validated(self, client, prod, topic):
        await publish(client, prod, count=2, partition=0)
        await configure(client, prod, topic, "workers")
        r = await client.post(f"{BASE}/seek", json={"partition": 0, "offset": 99}, headers=prod)
        assert r.json() == {"partition": 0, "offset": 2}
        for body in (
            {"partition": 5, "offset": 0},
            {"partition": 0},
            {"partition": 0, "offset": 1, "timestamp": 1},
            {"partition": 0, "offset": -1},
            {"partition": 0, "timestamp": "yesterday"},
        ):
            assert_envelope(
                await client.post(f"{BASE}/seek", json=body, headers=prod), 400, "INVALID_REQUEST"
            )
        # A time that cannot be read is refused naming the body's own field.
        for timestamp in ("yesterday", "2026-01-01T00:00:00"):
            error = assert_envelope(
                await client.post(
                    f"{BASE}/seek", json={"partition": 0, "timestamp": timestamp}, headers=prod
                ),
                400,
                "INVALID_REQUEST",
            )
            assert "timestamp" in error["message"] and "fromTimestamp" not in error["message"], error


class TestReset:
    async def test_live_reset_to_latest_and_earliest(self, client, prod, topic):
        await publish(client, prod, count=3, partition=0)
        member = await join(client, prod, startFrom="earliest")
        assert len(await member.poll()) == 3
        r = await client.post(f"{BASE}/reset", json={"to": "latest"}, headers=prod)
        assert r.json() == {"data": [{"partition": 0, "current": 3}, {"partition": 1, "current": 0}]}
        assert await member.poll() == []
        r = await client.post(f"{BASE}/reset", json={"to": "earliest", "partition": 0}, headers=prod)
        assert r.json() == {"data": [{"partition": 0, "current": 0}]}
        assert [m["offset"] for m in await member.poll()] == [0, 1, 2]

    async def test_errors(self, client, prod, topic):
        assert_envelope(
            await client.post(f"{BASE}/reset", json={"to": "latest"}, headers=prod), 404, "GROUP_NOT_FOUND"
        )
        await configure(client, prod, topic, "workers")
        for body in ({"to": 3}, {"to": "middle"}, {"to": "latest", "partition": 9}):
            assert_envelope(
                await client.post(f"{BASE}/reset", json=body, headers=prod), 400, "INVALID_REQUEST"
            )
