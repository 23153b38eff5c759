"""The operators' usage API (``/v1/admin/usage``): the metering events and the rollups' compare-and-set.

A private app (SQLite, the local engine, an admin token): these tests move the rollups' offset, which the
shared deployments' dashboard tests read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from app.kit.clock import now_ms
from app.stores.metadata.usage_repositories import UsageRollupRepository
from tests.api.test_errors import assert_envelope
from tests.conftest import private_app
from tests.fixtures.factories import ProjectKeys, make_project

TOKEN = "operator-token-" + "u" * 24
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Private:
    http: httpx.AsyncClient
    app: object
    project: ProjectKeys


@pytest.fixture(scope="module")
async def private(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Private]:
    async with private_app(tmp_path_factory.mktemp("usage-admin"), admin_token=TOKEN) as app:
        services = app.state.services
        project = await make_project(services.metadata, services.settings.server_secret())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://queuecore.test") as http:
            yield Private(http, app, project)


async def events_of(private: Private, at_least: int) -> list[dict]:
    """Every event of the private project, once the meter (a flush every 0.25 s) wrote ``at_least``."""
    for _ in range(200):
        page = (await private.http.get("/v1/admin/usage/events?limit=10000", headers=ADMIN)).json()
        mine = [e for e in page["data"] if e["event"]["projectId"] == private.project.project_id]
        if len(mine) >= at_least:
            return mine
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {at_least} events were written")


def rollup(project_id: str, **overrides: object) -> dict[str, object]:
    row: dict[str, object] = {
        "projectId": project_id,
        "environment": "production",
        "keyId": "key_x",
        "category": "publish",
        "granularity": "minute",
        "bucketStart": now_ms() // 60_000 * 60,
        "requests": 3,
        "messages": 30,
        "bytesIn": 300,
        "bytesOut": 0,
        "rateLimited": 1,
        "peakRequestsPerSecond": 2,
    }
    row.update(overrides)
    return row


class TestAccess:
    async def test_only_the_operators_token_reads_or_writes(self, private):
        for method, path in (
            ("GET", "/v1/admin/usage/events"),
            ("GET", "/v1/admin/usage/rollups/progress"),
            ("POST", "/v1/admin/usage/rollups"),
        ):
            for headers in ({"Authorization": "Bearer wrong"}, private.project.headers("production"), {}):
                r = await private.http.request(method, path, headers=headers, json={})
                assert_envelope(r, 401, "INVALID_API_KEY")

    async def test_disabled_without_a_token(self, client, deployment):
        assert not deployment.settings.admin_token.get_secret_value()
        assert_envelope(await client.get("/v1/admin/usage/events", headers=ADMIN), 403, "FORBIDDEN")


class TestEvents:
    async def test_each_request_of_a_project_key_is_one_event_in_offset_order(self, private):
        key = private.project.headers("production")
        await private.http.post("/v1/topics", json={"name": "usage.events", "partitions": 1}, headers=key)
        batch = {"messages": [{"data": i} for i in range(4)]}
        await private.http.post("/v1/topics/usage.events/messages/batch", json=batch, headers=key)
        mine = await events_of(private, 2)
        assert [e["event"]["category"] for e in mine[:2]] == ["admin", "publish"]
        assert mine[1]["event"]["messages"] == 4 and mine[1]["event"]["environment"] == "production"
        offsets = [e["offset"] for e in mine]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        # The operators' own calls are not metered: they are no project's.
        first = offsets[0]
        page = (
            await private.http.get(f"/v1/admin/usage/events?fromOffset={first}&limit=1", headers=ADMIN)
        ).json()
        assert [e["offset"] for e in page["data"]] == [first]
        assert page["nextOffset"] == first + 1
        assert page["earliestOffset"] == 0 and page["latestOffset"] > first

    async def test_past_the_end_is_an_empty_page_that_stays_put(self, private):
        latest = (await private.http.get("/v1/admin/usage/events?limit=1", headers=ADMIN)).json()[
            "latestOffset"
        ]
        page = (
            await private.http.get(f"/v1/admin/usage/events?fromOffset={latest + 5}", headers=ADMIN)
        ).json()
        assert page["data"] == [] and page["nextOffset"] == latest + 5

    async def test_bad_bounds(self, private):
        for query in ("limit=0", "limit=10001", "fromOffset=-1", "limit=x"):
            r = await private.http.get(f"/v1/admin/usage/events?{query}", headers=ADMIN)
            assert_envelope(r, 400, "INVALID_REQUEST")


class TestRollups:
    async def test_a_window_is_added_once_from_where_the_rollups_stand(self, private):
        store = private.app.state.services.metadata  # type: ignore[attr-defined]
        project_id = private.project.project_id
        start = (await private.http.get("/v1/admin/usage/rollups/progress", headers=ADMIN)).json()[
            "nextOffset"
        ]
        body = {"fromOffset": start, "toOffset": start + 10, "rollups": [rollup(project_id)]}
        r = await private.http.post("/v1/admin/usage/rollups", json=body, headers=ADMIN)
        assert r.status_code == 200, r.text
        assert r.json() == {"nextOffset": start + 10}
        # The same window again (a repeated or racing run): refused, nothing added twice.
        assert_envelope(
            await private.http.post("/v1/admin/usage/rollups", json=body, headers=ADMIN), 409, "CONFLICT"
        )
        ahead = {**body, "fromOffset": start + 20, "toOffset": start + 30}
        assert_envelope(
            await private.http.post("/v1/admin/usage/rollups", json=ahead, headers=ADMIN), 409, "CONFLICT"
        )
        progress = await private.http.get("/v1/admin/usage/rollups/progress", headers=ADMIN)
        assert progress.json() == {"nextOffset": start + 10}
        # The next window adds to the same bucket.
        more = {
            "fromOffset": start + 10,
            "toOffset": start + 12,
            "rollups": [rollup(project_id, peakRequestsPerSecond=5)],
        }
        assert (
            await private.http.post("/v1/admin/usage/rollups", json=more, headers=ADMIN)
        ).status_code == 200
        async with store.session(readonly=True) as session:
            since = (now_ms() // 60_000 - 2) * 60_000
            from datetime import UTC, datetime

            rows = await UsageRollupRepository.from_session(session).series(
                project_id,
                "production",
                "minute",
                datetime.fromtimestamp(since / 1000, UTC),
                datetime.fromtimestamp(now_ms() / 1000 + 60, UTC),
            )
        assert [(r.requests, r.messages, r.rate_limited, r.peak_requests_per_second) for r in rows] == [
            (6, 60, 2, 5)
        ]

    async def test_bad_rollups_are_refused_and_move_nothing(self, private):
        project_id = private.project.project_id
        start = (await private.http.get("/v1/admin/usage/rollups/progress", headers=ADMIN)).json()[
            "nextOffset"
        ]
        bad = [
            {"fromOffset": start, "toOffset": start, "rollups": []},
            {"fromOffset": start, "toOffset": start + 1, "rollups": [rollup(project_id, granularity="week")]},
            {"fromOffset": start, "toOffset": start + 1, "rollups": [rollup(project_id, requests=-1)]},
            {"fromOffset": start, "toOffset": start + 1, "rollups": [rollup(project_id, extra=1)]},
            {"fromOffset": start, "toOffset": start + 1, "rollups": [rollup(project_id)] * 10_001},
            # Past 9999-12-31: no date holds it (the contract fuzz found it answered 500).
            {
                "fromOffset": start,
                "toOffset": start + 1,
                "rollups": [rollup(project_id, bucketStart=253_402_300_800)],
            },
        ]
        for body in bad:
            r = await private.http.post("/v1/admin/usage/rollups", json=body, headers=ADMIN)
            assert_envelope(r, 400, "INVALID_REQUEST")
        progress = await private.http.get("/v1/admin/usage/rollups/progress", headers=ADMIN)
        assert progress.json() == {"nextOffset": start}
