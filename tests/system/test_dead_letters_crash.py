"""Dead-letter queues across a SIGKILL of a real ``queuecore-server``, on SQLite and on Postgres: the retry
schedule survives (a message waiting an hour is not redelivered, one waiting a second is, with its attempt
count), and a dead-lettered message stays in the DLQ and is never pending again."""

from __future__ import annotations

import signal
import time

import pytest

from tests.system.test_pull_restart import Api, running  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def _ident(member: dict) -> dict:
    return {"memberId": member["memberId"], "generationId": member["generationId"]}


def _poll_until(api: Api, base: str, ident: dict, count: int, seconds: float = 15) -> list[dict]:
    got: list[dict] = []
    deadline = time.monotonic() + seconds
    while len(got) < count and time.monotonic() < deadline:
        got += api.ok("POST", f"{base}/poll", {**ident, "maxMessages": 100, "waitSeconds": 2})["messages"]
    return got


def test_sigkill_mid_retry_keeps_the_schedule_and_the_dlq(running):  # noqa: F811
    api = Api(running)
    api.ok("POST", "/v1/topics", {"name": "jobs", "partitions": 1, "delivery": "exactly-once"})
    waiting, dead = "/v1/topics/jobs/groups/workers", "/v1/topics/jobs/groups/strict"
    api.ok("PUT", waiting, {"deadLetter": {"maxRetries": 3, "retryDelay": "1h"}})
    api.ok("PUT", dead, {"deadLetter": {"maxRetries": 0}})
    published = api.ok(
        "POST", "/v1/topics/jobs/messages/batch", {"messages": [{"data": i} for i in range(3)]}
    )
    a, b, c = (m["id"] for m in published["messages"])

    member = _ident(api.ok("POST", f"{waiting}/members", {"startFrom": "earliest", "sessionTimeout": "1m"}))
    strict = _ident(api.ok("POST", f"{dead}/members", {"startFrom": "earliest", "sessionTimeout": "1m"}))
    assert len(api.ok("POST", f"{waiting}/poll", {**member, "maxMessages": 10})["messages"]) == 3
    assert api.ok("POST", f"{waiting}/nack", {**member, "id": a, "reason": "later"})["ids"] == [a]  # 1 h away
    assert api.ok("POST", f"{waiting}/nack", {**member, "id": b, "delay": "1s"})["ids"] == [b]
    assert api.ok("POST", f"{waiting}/ack", {**member, "ids": [c]})["ids"] == [c]
    assert len(api.ok("POST", f"{dead}/poll", {**strict, "maxMessages": 10})["messages"]) == 3
    assert api.ok("POST", f"{dead}/nack", {**strict, "id": a, "reason": "poison"})["ids"] == [a]
    assert api.ok("POST", f"{dead}/ack", {**strict, "ids": [b, c]})["ids"] == [b, c]

    running.stop(signal.SIGKILL)
    running.start()

    [again] = _poll_until(api, waiting, member, 1)
    assert (again["id"], again["attempt"]) == (b, 2)
    time.sleep(1)
    assert api.ok("POST", f"{waiting}/poll", {**member, "maxMessages": 10})["messages"] == []  # a waits 1 h

    page = api.ok("GET", f"{dead}/dlq")
    assert page["total"] == 1 and page["data"][0]["messageId"] == a and page["data"][0]["reason"] == "poison"
    assert api.ok("POST", f"{dead}/poll", {**strict, "maxMessages": 10, "waitSeconds": 1})["messages"] == []
    assert api.ok("GET", f"{dead}/offsets", None)["data"][0]["lag"] == 0

    # Replayed after the crash: back to the strict group, once, under its id.
    api.ok("POST", f"{dead}/dlq/replay", {"messageId": a})
    running.stop(signal.SIGKILL)
    running.start()
    [replayed] = _poll_until(api, dead, strict, 1)
    assert (replayed["id"], replayed["attempt"]) == (a, 1)
    assert api.ok("GET", f"{dead}/dlq")["total"] == 0
