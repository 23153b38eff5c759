"""``/v1/schedules`` through the real app, on SQLite, Postgres and Postgres + JetStream: the answers'
shapes, validation naming the field, pagination, pause/resume, runs published by the app's own runner
(with their headers), the schedules quota, and a deleted topic taking its schedules with it."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime

import pytest

from tests.api.test_errors import assert_envelope
from tests.api.test_quotas import assert_quota
from tests.api.test_rate_limits import wait_out
from tests.fixtures.factories import GENEROUS_LIMITS

FIELDS = {
    "id",
    "topic",
    "cron",
    "every",
    "timezone",
    "status",
    "nextRunAt",
    "createdAt",
    "data",
    "key",
    "headers",
}


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


async def make_topic(client, headers, name: str = "jobs", partitions: int = 1) -> None:
    r = await client.post("/v1/topics", json={"name": name, "partitions": partitions}, headers=headers)
    assert r.status_code == 201, r.text


async def create(client, auth, **body) -> dict:
    r = await client.post("/v1/schedules", json={"topic": "jobs", "data": {"n": 1}, **body}, headers=auth)
    assert r.status_code == 201, r.text
    return r.json()


async def wait_runs(client, headers, schedule_id: str, count: int, timeout: float = 20.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        r = await client.get(f"/v1/schedules/{schedule_id}/runs", headers=headers)
        assert r.status_code == 200, r.text
        runs = r.json()["data"]
        if len(runs) >= count or time.monotonic() > deadline:
            return runs
        await asyncio.sleep(0.2)


class TestCreate:
    async def test_every_answers_the_contract_shape(self, client, prod):
        await make_topic(client, prod)
        before = time.time()
        body = await create(client, prod, every="1h")
        assert set(body) == FIELDS
        assert body["id"].startswith("sch_")
        assert (body["topic"], body["cron"], body["every"], body["timezone"], body["status"]) == (
            "jobs",
            None,
            "1h",
            "UTC",
            "active",
        )
        next_run = parse(body["nextRunAt"]).timestamp()
        assert before + 3600 - 1 <= next_run <= time.time() + 3600
        assert body["createdAt"].endswith("Z") and len(body["createdAt"]) == len("2026-03-28T10:42:18.003Z")

    async def test_cron_in_a_time_zone(self, client, prod):
        await make_topic(client, prod)
        body = await create(client, prod, cron="30 9 * * *", timezone="Asia/Kolkata")
        assert (body["cron"], body["every"], body["timezone"]) == ("30 9 * * *", None, "Asia/Kolkata")
        # 09:30 in Kolkata (UTC+05:30, no DST) is 04:00 UTC.
        assert body["nextRunAt"].endswith("T04:00:00.000Z")

    async def test_get_answers_what_create_did(self, client, prod):
        await make_topic(client, prod)
        body = await create(client, prod, every="10m", key="k", headers={"team": "ops"}, data=[1, None])
        r = await client.get(f"/v1/schedules/{body['id']}", headers=prod)
        assert r.status_code == 200 and r.json() == body
        assert (body["data"], body["key"], body["headers"]) == ([1, None], "k", {"team": "ops"})

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"cron": "* * * *"}, "cron"),
            ({"cron": "* * * * * *"}, "cron"),
            ({"cron": "61 * * * *"}, "cron"),
            ({"cron": "0 0 30 2 *"}, "cron"),
            ({"cron": "@daily"}, "cron"),
            ({}, "cron"),
            ({"cron": "* * * * *", "every": "1m"}, "every"),
            ({"every": "500ms"}, "every"),
            ({"every": "0s"}, "every"),
            ({"every": "soon"}, "every"),
            ({"every": "1m", "timezone": "Mars/Olympus"}, "timezone"),
            ({"every": "1m", "timezone": "../../etc/passwd"}, "timezone"),
            ({"every": "1m", "headers": {"queuecore-schedule": "x"}}, "headers"),
            ({"every": 60}, "every"),
        ],
    )
    async def test_bad_input_names_the_field(self, client, prod, body, field):
        await make_topic(client, prod)
        r = await client.post("/v1/schedules", json={"topic": "jobs", "data": 1, **body}, headers=prod)
        error = assert_envelope(r, 400, "INVALID_REQUEST")
        assert field in [d["field"] for d in error["details"]], error

    async def test_data_is_required_and_null_is_data(self, client, prod):
        await make_topic(client, prod)
        r = await client.post("/v1/schedules", json={"topic": "jobs", "every": "1m"}, headers=prod)
        assert "data" in [d["field"] for d in assert_envelope(r, 400, "INVALID_REQUEST")["details"]]
        body = await create(client, prod, every="1m", data=None)
        assert body["data"] is None

    async def test_an_unknown_topic_is_404_naming_the_topic(self, client, prod):
        r = await client.post("/v1/schedules", json={"topic": "nope", "every": "1m", "data": 1}, headers=prod)
        error = assert_envelope(r, 404, "TOPIC_NOT_FOUND")
        assert error["details"][0]["field"] == "topic"

    async def test_too_large_data_is_413(self, client, prod):
        await make_topic(client, prod)
        r = await client.post(
            "/v1/schedules", json={"topic": "jobs", "every": "1m", "data": "x" * (257 * 1024)}, headers=prod
        )
        assert_envelope(r, 413, "PAYLOAD_TOO_LARGE")


class TestReadAndDelete:
    async def test_unknown_ids_are_404_not_found(self, client, prod):
        for path in ("sch_0000000000000000", "sch_0000000000000000/runs", "nonsense"):
            assert_envelope(await client.get(f"/v1/schedules/{path}", headers=prod), 404, "NOT_FOUND")
        for action in ("pause", "resume"):
            r = await client.post(f"/v1/schedules/sch_0000000000000000/{action}", headers=prod)
            assert_envelope(r, 404, "NOT_FOUND")
        assert_envelope(
            await client.delete("/v1/schedules/sch_0000000000000000", headers=prod), 404, "NOT_FOUND"
        )

    async def test_schedules_stay_in_their_environment(self, client, tenant, prod):
        await make_topic(client, prod)
        body = await create(client, prod, every="1h")
        staging = tenant.headers("staging")
        assert_envelope(await client.get(f"/v1/schedules/{body['id']}", headers=staging), 404, "NOT_FOUND")
        assert (await client.get("/v1/schedules", headers=staging)).json() == {"data": [], "nextCursor": None}
        assert_envelope(await client.delete(f"/v1/schedules/{body['id']}", headers=staging), 404, "NOT_FOUND")

    async def test_delete_is_204_then_404(self, client, prod):
        await make_topic(client, prod)
        body = await create(client, prod, every="1h")
        r = await client.delete(f"/v1/schedules/{body['id']}", headers=prod)
        assert r.status_code == 204 and r.content == b""
        assert_envelope(await client.get(f"/v1/schedules/{body['id']}", headers=prod), 404, "NOT_FOUND")

    async def test_pages_follow_next_cursor(self, client, prod):
        await make_topic(client, prod)
        made = {(await create(client, prod, every="1h"))["id"] for _ in range(5)}
        seen: list[str] = []
        cursor = None
        while True:
            url = "/v1/schedules?limit=2" + (f"&cursor={cursor}" if cursor else "")
            page = (await client.get(url, headers=prod)).json()
            assert len(page["data"]) <= 2
            seen += [s["id"] for s in page["data"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert sorted(seen) == sorted(made) and len(seen) == 5

    async def test_a_bad_cursor_or_limit_is_400(self, client, prod):
        r = await client.get("/v1/schedules?cursor=%%%", headers=prod)
        assert assert_envelope(r, 400, "INVALID_REQUEST")["details"][0]["field"] == "cursor"
        assert_envelope(await client.get("/v1/schedules?limit=0", headers=prod), 400, "INVALID_REQUEST")


class TestPauseResume:
    async def test_pause_and_resume_answer_the_schedule(self, client, prod):
        await make_topic(client, prod)
        body = await create(client, prod, every="1h")
        paused = (await client.post(f"/v1/schedules/{body['id']}/pause", headers=prod)).json()
        assert (paused["status"], paused["nextRunAt"]) == ("paused", None)
        assert (await client.get(f"/v1/schedules/{body['id']}", headers=prod)).json()["status"] == "paused"
        resumed = (await client.post(f"/v1/schedules/{body['id']}/resume", headers=prod)).json()
        assert resumed["status"] == "active" and resumed["nextRunAt"] is not None

    async def test_a_paused_schedule_publishes_nothing(self, client, prod):
        await make_topic(client, prod)
        body = await create(client, prod, every="1s")
        await client.post(f"/v1/schedules/{body['id']}/pause", headers=prod)
        await asyncio.sleep(1)  # a run already under way when paused (a loaded machine) is still recorded
        settled = len(await wait_runs(client, prod, body["id"], 0))
        assert settled <= 1
        await asyncio.sleep(2.5)  # two and more due times pass while paused
        assert len(await wait_runs(client, prod, body["id"], 0)) == settled


class TestRuns:
    async def test_every_second_publishes_one_message_per_due_time(self, client, prod):
        await make_topic(client, prod, partitions=2)
        body = await create(client, prod, every="1s", key="k1", headers={"team": "ops"}, data={"x": 1})
        runs = await wait_runs(client, prod, body["id"], 3)
        assert len(runs) >= 3
        ats = [parse(r["at"]) for r in runs]
        assert ats == sorted(ats, reverse=True)  # newest first
        assert len(set(ats)) == len(ats)
        for run in runs:
            r = await client.get(f"/v1/topics/jobs/messages/{run['messageId']}", headers=prod)
            assert r.status_code == 200, r.text
            message = r.json()
            assert (message["partition"], message["offset"]) == (run["partition"], run["offset"])
            assert message["data"] == {"x": 1} and message["key"] == "k1"
            assert message["headers"] == {
                "team": "ops",
                "queuecore-schedule": body["id"],
                "queuecore-scheduled-at": run["at"],
            }
        # Consecutive due times, one second apart, counted from creation.
        stamps = sorted(a.timestamp() for a in ats)
        assert all(abs(b - a - 1.0) < 1e-6 for a, b in itertools.pairwise(stamps))

    async def test_a_deleted_topic_deletes_its_schedules(self, client, prod):
        await make_topic(client, prod)
        await make_topic(client, prod, "other")
        gone = await create(client, prod, every="1s")
        kept = await create(client, prod, topic="other", every="1h")
        await wait_runs(client, prod, gone["id"], 1)
        assert (await client.delete("/v1/topics/jobs", headers=prod)).status_code == 204
        assert_envelope(await client.get(f"/v1/schedules/{gone['id']}", headers=prod), 404, "NOT_FOUND")
        listed = (await client.get("/v1/schedules", headers=prod)).json()["data"]
        assert [s["id"] for s in listed] == [kept["id"]]
        # A topic made again under the name has no schedule, and gets no message from the old one.
        await make_topic(client, prod)
        await asyncio.sleep(1.5)
        detail = (await client.get("/v1/topics/jobs", headers=prod)).json()
        assert sum(p["messages"] for p in detail["partitionDetails"]) == 0


class TestQuota:
    async def test_past_the_quota_is_403_and_nothing_is_made(self, client, deployment):
        project = await deployment.project(limits={**GENEROUS_LIMITS, "schedules": 2})
        prod = project.headers("production")
        await make_topic(client, prod)
        first = await create(client, prod, every="1h")
        await create(client, prod, every="1h")
        r = await client.post("/v1/schedules", json={"topic": "jobs", "every": "1h", "data": 1}, headers=prod)
        error = assert_quota(r, "schedules", 2, 2)
        assert "schedules per environment" in error["message"]
        assert len((await client.get("/v1/schedules", headers=prod)).json()["data"]) == 2
        # Per environment: staging has its own; a deleted schedule frees its place.
        staging = project.headers("staging")
        await make_topic(client, staging)
        await create(client, staging, every="1h")
        assert (await client.delete(f"/v1/schedules/{first['id']}", headers=prod)).status_code == 204
        await create(client, prod, every="1h")

    async def test_developer_tier_allows_25(self, client, deployment, clock):
        from app.broker.rate_limits import Tier

        project = await deployment.project(tier=Tier.developer)
        prod = project.headers("production")
        await make_topic(client, prod)
        statuses = [(await admin_post(client, prod, "1d", deployment, clock)).status_code for _ in range(26)]
        assert statuses == [201] * 25 + [403]
        assert_quota(await admin_post(client, prod, "1d", deployment, clock), "schedules", 25, 25)


async def admin_post(client, auth, every: str, deployment, clock):
    """A create on a tier of 10 admin requests per second: waits out the rate limit (advancing the
    clock where the limiter decides on it), never the quota."""
    while True:
        r = await client.post(
            "/v1/schedules", json={"topic": "jobs", "every": every, "data": 1}, headers=auth
        )
        if r.status_code != 429:
            return r
        await wait_out(deployment, clock, float(r.headers["retry-after"]))
