"""Group flow control and filters through the real app, on SQLite, Postgres and Postgres + JetStream (+ Redis
for rates): the config fields and their refusals, filters on pull members (matching only, skipped messages
count as acked, lag counts matching ones, a change mid-stream), ``maxInFlight`` across two pull members and a
live change, and ``rate`` as tokens (a rate so low that no token refills during a test: counts, not speed).

Push members (WebSocket) under the same rules are ``tests/broker/delivery/test_flow.py``; two API processes
``tests/system/test_flow_nodes.py``.
"""

from __future__ import annotations

import pytest

from tests.api.test_errors import assert_envelope
from tests.api.test_pull import configure, join, make_topic

BASE = "/v1/topics/orders/groups/workers"


async def publish(client, headers, items: list[dict], partition: int = 0) -> list[str]:
    """One message per item ({"headers": …, "key": …}), all to ``partition``; their ids."""
    r = await client.post(
        "/v1/topics/orders/messages/batch",
        json={"messages": [{"data": i, "partition": partition, **item} for i, item in enumerate(items)]},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    return [m["id"] for m in r.json()["messages"]]


def typed(*types: str) -> list[dict]:
    return [{"headers": {"type": t}} for t in types]


async def describe(client, headers) -> dict:
    r = await client.get(BASE, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
async def topic(client, prod):
    await make_topic(client, prod, partitions=1)
    return "orders"


class TestConfig:
    async def test_put_sets_each_field_describe_shows_them_and_null_removes_each(self, client, prod, topic):
        group = await configure(
            client, prod, topic, "workers", maxInFlight=50, rate=2.5, filter='headers.type = "a"'
        )
        assert {k: group["config"][k] for k in ("maxInFlight", "rate", "filter")} == {
            "maxInFlight": 50,
            "rate": 2.5,
            "filter": 'headers.type = "a"',
        }
        assert (await describe(client, prod))["config"] == group["config"]
        # Merged: a PUT of another field keeps them; an integer rate is a rate.
        group = await configure(client, prod, topic, "workers", ackTimeout="45s", rate=10)
        assert (group["config"]["maxInFlight"], group["config"]["rate"]) == (50, 10)
        for field in ("maxInFlight", "rate", "filter"):
            group = await configure(client, prod, topic, "workers", **{field: None})
            assert group["config"][field] is None
        assert group["config"]["ackTimeout"] == "45s"

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"maxInFlight": 0}, "maxInFlight"),
            ({"maxInFlight": 100_001}, "maxInFlight"),
            ({"maxInFlight": "5"}, "maxInFlight"),
            ({"maxInFlight": True}, "maxInFlight"),
            ({"maxInFlight": 1.5}, "maxInFlight"),
            ({"rate": 0}, "rate"),
            ({"rate": -1}, "rate"),
            ({"rate": "fast"}, "rate"),
            ({"filter": 7}, "filter"),
            ({"filter": 'key = "' + "k" * 1020 + '"'}, "filter"),
        ],
    )
    async def test_bad_values_are_400_naming_the_field(self, client, prod, topic, body, field):
        r = await client.put(BASE, json=body, headers=prod)
        error = assert_envelope(r, 400, "INVALID_REQUEST")
        assert [d["field"] for d in error["details"]] == [field], error

    async def test_a_bad_filter_says_where_and_what_was_expected_and_changes_nothing(
        self, client, prod, topic
    ):
        await configure(client, prod, topic, "workers", filter='key = "k"')
        r = await client.put(BASE, json={"filter": 'headers.type = "a" AND'}, headers=prod)
        error = assert_envelope(r, 400, "INVALID_REQUEST")
        assert error["details"] == [
            {
                "field": "filter",
                "issue": "at position 23: expected headers.<name>, headers:<name>, key, hasPrefix(…), NOT or "
                '"(", found the end of the filter',
                "position": 23,
                "expected": 'headers.<name>, headers:<name>, key, hasPrefix(…), NOT or "("',
            }
        ]
        assert (await describe(client, prod))["config"]["filter"] == 'key = "k"'

    async def test_filter_applies_from_is_answered_only_by_a_put_that_changed_the_filter(
        self, client, prod, topic
    ):
        group = await configure(client, prod, topic, "workers", ackTimeout="30s")
        assert group["filterAppliesFrom"] is None
        group = await configure(client, prod, topic, "workers", filter='key = "k"')
        assert group["filterAppliesFrom"] == [{"partition": 0, "offset": 0}]
        assert (await configure(client, prod, topic, "workers", filter='key = "k"'))[
            "filterAppliesFrom"
        ] is None
        assert (await describe(client, prod))["filterAppliesFrom"] is None


class TestFilter:
    async def test_only_matching_messages_are_delivered_and_the_others_count_as_acked(
        self, client, prod, topic
    ):
        await configure(client, prod, topic, "workers", filter='headers.type IN ("a", "c")')
        ids = await publish(client, prod, typed("a", "b", "c", "b", "a", "b", "b"))
        # lag counts the matching messages only: 3 of 7.
        described = await describe(client, prod)
        assert described["partitions"][0]["lag"] == 3
        listed = (await client.get("/v1/topics/orders/groups", headers=prod)).json()["data"]
        assert listed == [{"name": "workers", "consumers": 0, "lag": 3}]
        member = await join(client, prod, startFrom="earliest")
        got = await member.poll(max_messages=100)
        assert [m["id"] for m in got] == [ids[0], ids[2], ids[4]]
        assert [m["headers"]["type"] for m in got] == ["a", "c", "a"]
        assert await member.poll(max_messages=100) == []
        await member.ack([m["id"] for m in got])
        # current moves past every message, matching or not (the trailing non-matching ones too).
        partition = (await describe(client, prod))["partitions"][0]
        assert (partition["offset"], partition["lag"]) == (7, 0)
        offsets = (await client.get(f"{BASE}/offsets", headers=prod)).json()["data"]
        assert (offsets[0]["current"], offsets[0]["lag"]) == (7, 0)

    async def test_nothing_matching_moves_current_with_no_ack_at_all(self, client, prod, topic):
        await configure(client, prod, topic, "workers", filter='hasPrefix(key, "eu-")')
        await publish(client, prod, [{"key": "us-1"}, {"key": "us-2"}, {"key": "ap-1"}])
        member = await join(client, prod, startFrom="earliest")
        assert await member.poll() == []
        partition = (await describe(client, prod))["partitions"][0]
        assert (partition["offset"], partition["lag"]) == (3, 0)

    async def test_a_changed_filter_applies_from_the_group_position_and_to_redeliveries(
        self, client, prod, topic
    ):
        await configure(client, prod, topic, "workers", filter='headers.type = "a"', ackTimeout="1s")
        first = await publish(client, prod, typed("a", "b", "a"))
        member = await join(client, prod, startFrom="earliest")
        got = await member.poll()
        assert [m["id"] for m in got] == [first[0], first[2]]
        await member.ack([first[0]])  # first[2] stays unacked: a redelivery to come
        nack = await client.post(f"{BASE}/nack", json={**member.ident(), "id": first[2]}, headers=prod)
        assert nack.status_code == 200, nack.text
        changed = await configure(client, prod, topic, "workers", filter='headers.type = "b"')
        assert changed["filterAppliesFrom"] == [{"partition": 0, "offset": 3}]
        second = await publish(client, prod, typed("a", "b"))
        got = await member.poll()
        # The "b" before the change (offset 1) was passed over under the old filter; the nacked "a" no
        # longer matches: it is settled, not redelivered. The new "b" comes.
        assert [m["id"] for m in got] == [second[1]]
        await member.ack([second[1]])
        partition = (await describe(client, prod))["partitions"][0]
        assert (partition["offset"], partition["lag"]) == (5, 0)
        removed = await configure(client, prod, topic, "workers", filter=None)
        assert removed["config"]["filter"] is None and removed["filterAppliesFrom"] == [
            {"partition": 0, "offset": 5}
        ]
        third = await publish(client, prod, typed("a", "z"))
        assert [m["id"] for m in await member.poll()] == third


class TestMaxInFlight:
    async def test_two_members_share_it_and_acks_make_room(self, client, prod):
        await make_topic(client, prod, partitions=2)
        await configure(client, prod, "orders", "workers", maxInFlight=3)
        for p in (0, 1):
            await publish(client, prod, [{} for _ in range(5)], partition=p)
        one = await join(client, prod, startFrom="earliest")
        two = await join(client, prod, startFrom="earliest")
        await one.rejoin()
        assert sorted(one.assignments + two.assignments) == [0, 1]
        got_one = await one.poll(max_messages=10)
        got_two = await two.poll(max_messages=10)
        # Fair shares of 3 between two members: 2, then the 1 left.
        assert (len(got_one), len(got_two)) == (2, 1)
        assert await one.poll(max_messages=10) == [] and await two.poll(max_messages=10) == []
        await one.ack([m["id"] for m in got_one])
        again = await one.poll(max_messages=10)
        assert len(again) == 2  # its own share again; two still holds 1: 3 in all
        assert await two.poll(max_messages=10) == []

    async def test_a_live_change_takes_effect_at_the_next_poll(self, client, prod, topic):
        await configure(client, prod, topic, "workers", maxInFlight=1)
        await publish(client, prod, [{} for _ in range(6)])
        member = await join(client, prod, startFrom="earliest")
        assert len(await member.poll(max_messages=10)) == 1
        assert await member.poll(max_messages=10) == []
        await configure(client, prod, topic, "workers", maxInFlight=4)
        assert len(await member.poll(max_messages=10)) == 3
        await configure(client, prod, topic, "workers", maxInFlight=None)
        assert len(await member.poll(max_messages=10)) == 2

    async def test_a_member_that_left_gives_its_room_back(self, client, prod, topic):
        await configure(client, prod, topic, "workers", maxInFlight=2)
        await publish(client, prod, [{} for _ in range(6)])
        one = await join(client, prod, startFrom="earliest")
        assert len(await one.poll(max_messages=10)) == 2
        r = await client.delete(f"{BASE}/members/{one.member_id}", headers=prod)
        assert r.status_code == 204, r.text
        two = await join(client, prod, startFrom="earliest")
        got = await two.poll(max_messages=10)
        assert [m["offset"] for m in got] == [0, 1]  # what one held, given back, and no more than 2


class TestRate:
    async def test_the_group_gets_one_token_at_a_time_across_members(self, client, prod):
        await make_topic(client, prod, partitions=2)
        # 0.001 messages/s: a burst of 1, then nothing for 1000 s (counts, whatever the machine's load).
        await configure(client, prod, "orders", "workers", rate=0.001)
        for p in (0, 1):
            await publish(client, prod, [{} for _ in range(3)], partition=p)
        one = await join(client, prod, startFrom="earliest")
        two = await join(client, prod, startFrom="earliest")
        await one.rejoin()
        got = [*await one.poll(max_messages=10), *await two.poll(max_messages=10)]
        assert len(got) == 1  # one bucket for the group, not one per member
        # A long poll with no token waits (it is not refused) and answers nothing at its end.
        assert await one.poll(max_messages=10, wait=0.3) == []
        # Live: the bucket refills at the new rate from now on (a million a second: 5 tokens in 5 µs).
        await configure(client, prod, "orders", "workers", rate=1_000_000)
        rest = [*await one.poll(max_messages=10), *await two.poll(max_messages=10)]
        assert len(rest) == 5
