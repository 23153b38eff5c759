"""REST pull consumers through the real app, on SQLite and Postgres: membership, leases, acks."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest

from tests.api.test_errors import assert_envelope


@dataclass
class Member:
    """One pull consumer: what join answered, and helpers for its calls."""

    client: object
    headers: dict[str, str]
    base: str
    member_id: str
    generation: int
    assignments: list[int]

    def ident(self) -> dict[str, object]:
        return {"memberId": self.member_id, "generationId": self.generation}

    async def poll(self, max_messages: int = 100, wait: float = 0, expect: int = 200):
        r = await self.client.post(
            f"{self.base}/poll",
            json={**self.ident(), "maxMessages": max_messages, "waitSeconds": wait},
            headers=self.headers,
        )
        assert r.status_code == expect, r.text
        return r.json()["messages"] if expect == 200 else r

    async def ack(self, ids, expect: int = 200):
        r = await self.client.post(
            f"{self.base}/ack", json={**self.ident(), "ids": ids}, headers=self.headers
        )
        assert r.status_code == expect, r.text
        return r.json()

    async def heartbeat(self):
        r = await self.client.post(
            f"{self.base}/members/{self.member_id}/heartbeat",
            json={"generationId": self.generation},
            headers=self.headers,
        )
        return r

    async def rejoin(self) -> Member:
        r = await self.client.post(
            f"{self.base}/members", json={"memberId": self.member_id}, headers=self.headers
        )
        assert r.status_code == 200, r.text
        self.generation, self.assignments = r.json()["generationId"], r.json()["assignments"]
        return self


async def make_topic(client, headers, name="orders", partitions=3, delivery="exactly-once"):
    r = await client.post(
        "/v1/topics", json={"name": name, "partitions": partitions, "delivery": delivery}, headers=headers
    )
    assert r.status_code == 201, r.text


async def configure(client, headers, topic, group, **config):
    r = await client.put(f"/v1/topics/{topic}/groups/{group}", json=config, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def join(client, headers, topic="orders", group="workers", **body) -> Member:
    base = f"/v1/topics/{topic}/groups/{group}"
    r = await client.post(f"{base}/members", json=body, headers=headers)
    assert r.status_code == 200, r.text
    j = r.json()
    assert set(j) == {"memberId", "generationId", "assignments", "sessionTimeout"}
    return Member(client, headers, base, j["memberId"], j["generationId"], j["assignments"])


async def publish(client, headers, topic="orders", count=1, partition=None, start=0):
    ids = []
    for i in range(start, start + count):
        body = {"data": {"n": i}}
        if partition is not None:
            body["partition"] = partition
        r = await client.post(f"/v1/topics/{topic}/messages", json=body, headers=headers)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


async def settle_members(members: list[Member]) -> None:
    """Heartbeat and rejoin until every member has the group's current generation."""
    for _ in range(5):
        stale = False
        for m in members:
            beat = (await m.heartbeat()).json()
            if beat["shouldRejoin"]:
                stale = True
                await m.rejoin()
        if not stale:
            return


@pytest.fixture
async def topic(client, prod):
    await make_topic(client, prod)
    return "orders"


class TestJoin:
    async def test_single_member_owns_every_partition_and_reads_in_order(self, client, prod, topic):
        member = await join(client, prod, startFrom="earliest")
        assert member.member_id.startswith("csr_") and member.assignments == [0, 1, 2]
        await publish(client, prod, count=6, partition=1)
        messages = await member.poll()
        assert [m["offset"] for m in messages] == list(range(6))
        first = messages[0]
        assert set(first) == {
            "id",
            "topic",
            "partition",
            "offset",
            "key",
            "headers",
            "data",
            "timestamp",
            "deliverAt",
            "expiresAt",
            "attempt",
            "ackDeadline",
        }
        assert first["attempt"] == 1 and first["key"] is None and first["headers"] == {}
        assert first["ackDeadline"].endswith("Z") and len(first["ackDeadline"]) == 24
        assert first["data"] == {"n": 0} and first["topic"] == "orders"
        acked = await member.ack([m["id"] for m in messages])
        assert sorted(acked["ids"]) == sorted(m["id"] for m in messages) and acked["failed"] == []
        assert await member.poll() == []

    async def test_start_from_latest_skips_the_past_and_earliest_reads_it(self, client, prod, topic):
        await publish(client, prod, count=3, partition=0)
        late = await join(client, prod, group="late")
        assert await late.poll() == []
        await publish(client, prod, count=1, partition=0, start=3)
        assert [m["data"]["n"] for m in await late.poll()] == [3]
        early = await join(client, prod, group="early", startFrom="earliest")
        assert [m["data"]["n"] for m in await early.poll()] == [0, 1, 2, 3]

    async def test_start_from_applies_only_without_committed_offsets(self, client, prod, topic):
        await publish(client, prod, count=2, partition=0)
        first = await join(client, prod, startFrom="earliest")
        messages = await first.poll()
        await first.ack([m["id"] for m in messages])
        await client.delete(f"{first.base}/members/{first.member_id}", headers=prod)
        await publish(client, prod, count=1, partition=0, start=2)
        again = await join(client, prod, startFrom="latest")
        assert [m["data"]["n"] for m in await again.poll()] == [2]

    async def test_bad_bodies(self, client, prod, topic):
        base = "/v1/topics/orders/groups/g"
        for body in (
            {"startFrom": "middle"},
            {"sessionTimeout": "1s"},
            {"sessionTimeout": "6m"},
            {"memberId": "nope"},
            {"other": 1},
        ):
            assert_envelope(
                await client.post(f"{base}/members", json=body, headers=prod), 400, "INVALID_REQUEST"
            )
        member = await join(client, prod, group="g")
        for body in ({"maxMessages": 0}, {"maxMessages": 1001}, {"waitSeconds": 31}):
            r = await client.post(f"{base}/poll", json={**member.ident(), **body}, headers=prod)
            assert_envelope(r, 400, "INVALID_REQUEST")

    async def test_unknown_topic(self, client, prod):
        r = await client.post("/v1/topics/nope/groups/g/members", json={}, headers=prod)
        assert_envelope(r, 404, "TOPIC_NOT_FOUND")

    async def test_session_timeout_is_echoed(self, client, prod, topic):
        await configure(client, prod, topic, "workers", sessionTimeout="20s")
        assert (await client.post("/v1/topics/orders/groups/workers/members", json={}, headers=prod)).json()[
            "sessionTimeout"
        ] == "20s"
        r = await client.post(
            "/v1/topics/orders/groups/workers/members", json={"sessionTimeout": "3s"}, headers=prod
        )
        assert r.json()["sessionTimeout"] == "3s"


class TestFencing:
    async def test_unknown_member_is_404_and_stale_generation_409(self, client, prod, topic):
        one = await join(client, prod)
        stranger = Member(client, prod, one.base, "csr_unknown00000000", one.generation, [])
        assert_envelope(await stranger.poll(expect=404), 404, "MEMBER_NOT_FOUND")
        assert_envelope(await stranger.heartbeat(), 404, "MEMBER_NOT_FOUND")
        r = await client.post(f"{one.base}/ack", json={**stranger.ident(), "ids": ["x"]}, headers=prod)
        assert_envelope(r, 404, "MEMBER_NOT_FOUND")
        r = await client.delete(f"{one.base}/members/csr_unknown00000000", headers=prod)
        assert_envelope(r, 404, "MEMBER_NOT_FOUND")
        old_generation = one.generation
        two = await join(client, prod)
        assert two.generation == old_generation + 1
        assert_envelope(await one.poll(expect=409), 409, "STALE_GENERATION")
        r = await client.post(f"{one.base}/ack", json={**one.ident(), "ids": ["x"]}, headers=prod)
        assert_envelope(r, 409, "STALE_GENERATION")
        beat = (await one.heartbeat()).json()
        assert beat["shouldRejoin"] is True and beat["generationId"] == two.generation
        await one.rejoin()
        assert one.generation == two.generation
        assert sorted(one.assignments + two.assignments) == [0, 1, 2]
        assert (await one.heartbeat()).json()["shouldRejoin"] is False

    async def test_left_member_is_gone(self, client, prod, topic):
        one = await join(client, prod)
        assert (await client.delete(f"{one.base}/members/{one.member_id}", headers=prod)).status_code == 204
        assert_envelope(await one.poll(expect=404), 404, "MEMBER_NOT_FOUND")
        await one.rejoin()  # an evicted member joins again under its id
        assert one.assignments == [0, 1, 2]


class TestAssignment:
    async def test_three_members_split_three_partitions_and_never_share_a_message(self, client, prod, topic):
        members = [await join(client, prod, startFrom="earliest") for _ in range(3)]
        await settle_members(members)
        owned = [m.assignments for m in members]
        assert sorted(p for a in owned for p in a) == [0, 1, 2] and all(len(a) == 1 for a in owned)
        await publish(client, prod, count=30)
        polled = await asyncio.gather(*(m.poll(max_messages=1000) for m in members))
        seen = [(m["partition"], m["offset"]) for batch in polled for m in batch]
        assert len(seen) == len(set(seen)) == 30
        for member, batch in zip(members, polled, strict=True):
            assert {m["partition"] for m in batch} <= set(member.assignments)
        # Nothing more while the leases hold, for anyone.
        assert [await m.poll() for m in members] == [[], [], []]

    async def test_concurrent_polls_of_two_members_hand_out_each_message_once(self, client, prod, topic):
        a, b = await join(client, prod, startFrom="earliest"), await join(client, prod, startFrom="earliest")
        await settle_members([a, b])
        await publish(client, prod, count=40)
        seen: list[tuple[int, int]] = []
        for _ in range(5):
            batches = await asyncio.gather(
                a.poll(max_messages=3), b.poll(max_messages=3), a.poll(max_messages=3)
            )
            seen += [(m["partition"], m["offset"]) for batch in batches for m in batch]
        assert len(seen) == len(set(seen))

    async def test_leave_hands_partitions_and_unacked_messages_over_at_once(self, client, prod, topic):
        a = await join(client, prod, startFrom="earliest")
        b = await join(client, prod, startFrom="earliest")
        await settle_members([a, b])
        await publish(client, prod, count=12)
        a_batch = await a.poll()
        assert a_batch
        assert (await client.delete(f"{a.base}/members/{a.member_id}", headers=prod)).status_code == 204
        await b.rejoin()
        assert b.assignments == [0, 1, 2]
        got = await b.poll(max_messages=1000)
        redelivered = {m["id"]: m["attempt"] for m in got}
        # A clean leave is no failed attempt: delivered again with the same attempt (PRODUCT.md).
        assert all(redelivered[m["id"]] == m["attempt"] == 1 for m in a_batch)
        assert len(got) == 12

    async def test_expired_member_loses_its_partitions_after_the_session_timeout(
        self, client, prod, topic, clock
    ):
        await configure(client, prod, topic, "workers", sessionTimeout="2s")
        a = await join(client, prod)
        b = await join(client, prod, sessionTimeout="30s")
        await settle_members([a, b])
        # Only b heartbeats; a's silence ends its membership once its 2 s session has run out.
        clock.advance(1)
        assert (await b.heartbeat()).json()["shouldRejoin"] is False  # not before
        clock.advance(1.5)
        assert (await b.heartbeat()).json()["shouldRejoin"] is True
        await b.rejoin()
        assert b.assignments == [0, 1, 2]
        assert_envelope(await a.poll(expect=404), 404, "MEMBER_NOT_FOUND")

    async def test_partitions_added_to_the_topic_are_assigned(self, client, prod, topic):
        a = await join(client, prod, startFrom="latest")
        r = await client.patch("/v1/topics/orders", json={"partitions": 4}, headers=prod)
        assert r.status_code == 200
        await publish(client, prod, count=1, partition=3)
        for _ in range(50):  # the topic cache holds up to 1 s: beats 0.1 s apart, five times over
            if (await a.heartbeat()).json()["shouldRejoin"]:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the added partition never reached the group")
        await a.rejoin()
        assert a.assignments == [0, 1, 2, 3]
        # A partition added later is read from its start, not from "latest".
        assert [(m["partition"], m["offset"]) for m in await a.poll()] == [(3, 0)]


class TestLeases:
    async def test_unacked_message_is_redelivered_after_ack_timeout_and_late_ack_expires(
        self, client, prod, topic, clock
    ):
        await configure(client, prod, topic, "workers", ackTimeout="1s")
        member = await join(client, prod, startFrom="earliest")
        (msg_id,) = await publish(client, prod, partition=0)
        (first,) = await member.poll()
        assert first["attempt"] == 1
        assert await member.poll() == []  # its deadline holds
        clock.advance(1.1)
        (again,) = await member.poll()
        assert again["id"] == msg_id and again["attempt"] == 2 and again["ackDeadline"] > first["ackDeadline"]
        clock.advance(1.1)
        answer = await member.ack([msg_id])
        assert answer == {"ids": [], "failed": [{"id": msg_id, "code": "ACK_EXPIRED"}]}
        (third,) = await member.poll()
        assert third["attempt"] == 3
        assert (await member.ack([msg_id]))["ids"] == [msg_id]

    async def test_extend_moves_the_deadline(self, client, prod, topic, clock):
        await configure(client, prod, topic, "workers", ackTimeout="1s")
        member = await join(client, prod, startFrom="earliest")
        (msg_id,) = await publish(client, prod, partition=0)
        await member.poll()
        r = await client.post(
            f"{member.base}/extend", json={**member.ident(), "ids": [msg_id], "seconds": 5}, headers=prod
        )
        assert r.status_code == 200 and r.json() == {"ids": [msg_id], "failed": []}
        clock.advance(1.2)
        assert await member.poll() == []
        assert (await member.ack([msg_id]))["ids"] == [msg_id]

    async def test_nack_with_delay_does_not_block_later_offsets(self, client, prod, topic):
        member = await join(client, prod, startFrom="earliest")
        ids = await publish(client, prod, count=3, partition=0)
        batch = await member.poll(max_messages=1)
        assert batch[0]["id"] == ids[0]
        r = await client.post(
            f"{member.base}/nack",
            json={**member.ident(), "id": ids[0], "reason": "db down", "delay": "1s"},
            headers=prod,
        )
        assert r.status_code == 200 and r.json() == {"ids": [ids[0]], "failed": []}
        later = await member.poll()
        assert [m["id"] for m in later] == ids[1:]  # not the nacked one: its delay holds it back
        await member.ack(ids[1:])
        current = (
            await client.get("/v1/topics/orders/groups/workers/offsets?partition=0", headers=prod)
        ).json()
        assert current["current"] == 0  # the nacked message still holds the committed offset
        (retry,) = await member.poll(wait=5)  # redelivered once its delay is out: the long poll ends with it
        assert retry["id"] == ids[0] and retry["attempt"] == 2
        await member.ack([ids[0]])
        current = (
            await client.get("/v1/topics/orders/groups/workers/offsets?partition=0", headers=prod)
        ).json()
        assert current == {"current": 3, "latest": 3, "lag": 0}

    async def test_nack_without_delay_redelivers_at_once_and_delay_in_seconds(self, client, prod, topic):
        member = await join(client, prod, startFrom="earliest")
        (msg_id,) = await publish(client, prod, partition=0)
        await member.poll()
        r = await client.post(
            f"{member.base}/nack", json={**member.ident(), "id": msg_id, "reason": "x"}, headers=prod
        )
        assert r.json()["ids"] == [msg_id]
        (again,) = await member.poll()
        assert again["attempt"] == 2
        r = await client.post(
            f"{member.base}/nack", json={**member.ident(), "id": msg_id, "delay": 0.2}, headers=prod
        )
        assert r.json()["ids"] == [msg_id]
        assert (await member.poll(wait=2))[0]["attempt"] == 3
        r = await client.post(
            f"{member.base}/nack", json={**member.ident(), "id": msg_id, "delay": "2x"}, headers=prod
        )
        assert_envelope(r, 400, "INVALID_REQUEST")

    async def test_ack_failures_are_per_id(self, client, prod, topic):
        member = await join(client, prod, startFrom="earliest")
        ids = await publish(client, prod, count=2, partition=0)
        await member.poll(max_messages=1)
        await make_topic(client, prod, name="other", partitions=1)
        (foreign,) = await publish(client, prod, topic="other")
        answer = await member.ack([ids[0], ids[1], "msg_garbage!", foreign])
        assert answer["ids"] == [ids[0]]
        assert {(f["id"], f["code"]) for f in answer["failed"]} == {
            (ids[1], "MESSAGE_NOT_FOUND"),
            ("msg_garbage!", "INVALID_REQUEST"),
            (foreign, "MESSAGE_NOT_FOUND"),
        }
        assert (await member.ack([ids[0]]))["ids"] == [ids[0]]  # acks are idempotent
        r = await client.post(f"{member.base}/ack", json={**member.ident(), "ids": []}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")

    async def test_acked_message_is_never_delivered_again_after_rebalance(self, client, prod, topic):
        a = await join(client, prod, startFrom="earliest")
        await publish(client, prod, count=9)
        batch = await a.poll()
        await a.ack([m["id"] for m in batch[:4]])
        assert (await client.delete(f"{a.base}/members/{a.member_id}", headers=prod)).status_code == 204
        b = await join(client, prod)
        got = await b.poll(max_messages=1000)
        assert {m["id"] for m in got} == {m["id"] for m in batch[4:]}

    async def test_moved_partition_keeps_the_old_holders_lease_until_its_deadline(
        self, client, prod, topic, clock
    ):
        await configure(client, prod, topic, "workers", ackTimeout="1s")
        a = await join(client, prod, startFrom="earliest")
        await publish(client, prod, count=6)
        held = await a.poll()
        b = await join(client, prod)
        await settle_members([a, b])
        assert await b.poll() == []  # a's leases still hold
        clock.advance(1.1)
        moved = [m for m in held if m["partition"] in b.assignments]
        got = await b.poll()
        assert sorted(m["id"] for m in got) == sorted(m["id"] for m in moved)
        assert all(m["attempt"] == 2 for m in got)


class TestLongPoll:
    async def test_woken_by_a_publish(self, client, prod, topic):
        member = await join(client, prod)
        poll = asyncio.create_task(member.poll(wait=30))
        await asyncio.sleep(0.3)
        assert not poll.done()  # nothing to answer: it waits
        await publish(client, prod, partition=2)
        # Woken, it answers long before its own 30 s wait is out (a poll that missed the publish would
        # answer the same message, but only at the end of its wait): half of it is the bound, not a speed.
        done, _ = await asyncio.wait({poll}, timeout=15)
        if not done:
            poll.cancel()
            pytest.fail("the publish did not wake the long poll")
        assert len(poll.result()) == 1

    async def test_times_out_empty(self, client, prod, topic):
        member = await join(client, prod)
        started = time.monotonic()
        assert await member.poll(wait=0.5) == []
        assert time.monotonic() - started >= 0.45  # it waited its time (how much longer is not a test's)

    async def test_a_poll_keeps_the_member_alive(self, client, prod, topic):
        await configure(client, prod, topic, "workers", sessionTimeout="2s")
        member = await join(client, prod)
        assert await member.poll(wait=2.5) == []
        assert (await member.heartbeat()).json()["shouldRejoin"] is False


class TestRaces:
    async def test_polls_racing_rebalances_never_hand_a_live_lease_to_two_members(self, client, prod, topic):
        stayers = [await join(client, prod, startFrom="earliest") for _ in range(3)]
        ids = set(await publish(client, prod, count=60))
        holders: dict[str, list[str]] = {}
        acked: set[str] = set()
        stop = asyncio.Event()

        async def consume(member: Member) -> None:
            while not stop.is_set():
                r = await client.post(
                    f"{member.base}/poll", json={**member.ident(), "maxMessages": 4}, headers=prod
                )
                if r.status_code == 409:
                    await member.rejoin()
                    continue
                assert r.status_code == 200, r.text
                batch = r.json()["messages"]
                for m in batch:
                    holders.setdefault(m["id"], []).append(member.member_id)
                while batch:
                    r = await client.post(
                        f"{member.base}/ack",
                        json={**member.ident(), "ids": [m["id"] for m in batch]},
                        headers=prod,
                    )
                    if r.status_code == 409:  # the group rebalanced meanwhile: its leases still hold
                        await member.rejoin()
                        continue
                    assert r.status_code == 200 and r.json()["failed"] == [], r.text
                    acked.update(r.json()["ids"])
                    break
                await asyncio.sleep(0)

        async def churn() -> list[str]:
            leavers = []
            for _ in range(3):
                visitor = await join(client, prod)
                leavers.append(visitor.member_id)
                await visitor.poll(max_messages=2)  # may hold leases when it leaves: those are released
                await client.delete(f"{visitor.base}/members/{visitor.member_id}", headers=prod)
            return leavers

        tasks = [asyncio.create_task(consume(m)) for m in stayers]
        leavers = await churn()
        deadline = time.monotonic() + 20
        while acked != ids and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*tasks)
        assert acked == ids
        for message_id, who in holders.items():
            # A second delivery only ever follows a holder that left (its leases were released).
            assert all(h in leavers for h in who[:-1]), (message_id, who)


class TestAbandonedPoll:
    def test_a_poll_whose_client_hung_up_leases_nothing(self, server):
        """The client gives up on a long poll (closes the connection); a message published afterwards is
        not leased to the poll nobody reads, so the member's next poll gets it at once (not after the
        ack timeout)."""
        import json
        import socket

        import httpx

        headers = {"Authorization": f"Bearer {server.keys['production']}"}
        base = f"/v1/topics/pull.abandoned.{time.monotonic_ns()}"
        with httpx.Client(base_url=server.url, headers=headers, timeout=10) as http:
            assert http.post("/v1/topics", json={"name": base.rsplit("/", 1)[1], "partitions": 1}).is_success
            joined = http.post(f"{base}/groups/g/members", json={"startFrom": "earliest"}).json()
            member = {"memberId": joined["memberId"], "generationId": joined["generationId"]}
            body = json.dumps({**member, "maxMessages": 10, "waitSeconds": 5}).encode()
            request = (
                f"POST {base}/groups/g/poll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Authorization: {headers['Authorization']}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(request)
                time.sleep(0.5)  # the poll is waiting
            time.sleep(0.5)  # hung up: the server sees the close
            assert http.post(f"{base}/messages", json={"data": "after"}).status_code == 201
            polled = http.post(f"{base}/groups/g/poll", json={**member, "maxMessages": 10, "waitSeconds": 1})
            assert [m["data"] for m in polled.json()["messages"]] == ["after"]
