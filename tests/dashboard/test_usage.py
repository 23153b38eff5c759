"""The usage charts' sources: the rollups plus the events after them answer what the events alone answer.

A private app (SQLite, the local engine, an admin token): the rollups' offset it moves is its own."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator

import httpx
import pytest

from app.dashboard.usage import MeteringUsageSource, RollupUsageSource, UsageSeries, window_bounds
from app.kit.clock import now_ms
from tests.conftest import private_app
from tests.fixtures.factories import make_project

TOKEN = "operator-token-" + "d" * 24
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
SECONDS = {"minute": 60, "hour": 3600}


@pytest.fixture(scope="module")
async def app(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[object]:
    async with private_app(tmp_path_factory.mktemp("usage-source"), admin_token=TOKEN) as application:
        yield application


def counts(series: UsageSeries) -> tuple:
    """A series without its busiest seconds (a second split between two runs counts as two smaller ones)."""
    return (series.requests, series.messages, series.bytes, series.throttled, series.keys)


def rollups_of(events: list[dict]) -> list[dict[str, object]]:
    """The buckets the Spark usage job adds up (spark/…/jobs/usage.py), by minute and by hour."""
    rows: list[dict[str, object]] = []
    for granularity, seconds in SECONDS.items():
        sums: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
        per_second: dict[tuple, int] = defaultdict(int)
        for item in events:
            e = item["event"]
            group = (e["projectId"], e["environment"], e["keyId"], e["category"])
            bucket = e["at"] // 1000 // seconds * seconds
            s = sums[(*group, bucket)]
            s[0] += 1
            s[1] += e.get("messages") or 0
            s[2] += e.get("bytesIn") or 0
            s[3] += e.get("bytesOut") or 0
            s[4] += e.get("status") == 429
            per_second[(*group, bucket, e["at"] // 1000)] += 1
        for (project, env, key, category, bucket), (requests, messages, b_in, b_out, limited) in sums.items():
            peak = max(n for k, n in per_second.items() if k[:5] == (project, env, key, category, bucket))
            rows.append(
                {
                    "projectId": project,
                    "environment": env,
                    "keyId": key,
                    "category": category,
                    "granularity": granularity,
                    "bucketStart": bucket,
                    "requests": requests,
                    "messages": messages,
                    "bytesIn": b_in,
                    "bytesOut": b_out,
                    "rateLimited": limited,
                    "peakRequestsPerSecond": peak,
                }
            )
    return rows


async def test_rollups_and_the_events_after_them_answer_as_the_events_do(app) -> None:
    services = app.state.services  # type: ignore[attr-defined]
    project = await make_project(services.metadata, services.settings.server_secret())
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://queuecore.test") as http:
        prod, dev = project.headers("production"), project.headers("development")
        await http.post("/v1/topics", json={"name": "charts", "partitions": 2}, headers=prod)
        for i in range(12):
            await http.post("/v1/topics/charts/messages", json={"data": {"i": i}}, headers=prod)
        await http.post(
            "/v1/topics/charts/messages/batch", json={"messages": [{"data": 1}] * 5}, headers=prod
        )
        await http.get("/v1/topics/charts/partitions/0/messages?limit=10", headers=prod)
        await http.get("/v1/topics/charts", headers=dev)  # another environment: never in production's charts
        await http.get("/v1/topics/nope", headers=prod)
        total = 16  # 1 create, 12 single publishes, 1 batch, 1 read, 1 describe answered 404
        for _ in range(200):
            page = (await http.get("/v1/admin/usage/events?limit=10000", headers=ADMIN)).json()
            if sum(e["event"]["environment"] == "production" for e in page["data"]) >= total:
                break
            await asyncio.sleep(0.05)
        events = page["data"]
        assert sum(e["event"]["environment"] == "production" for e in events) == total

        env_args = (project.project_id, "production")
        metering = MeteringUsageSource(services.log)
        rolled = RollupUsageSource(services.metadata, services.log)
        cases = [
            (w, k, c) for w in ("hour", "day") for k, c in ((None, None), (None, "publish"), ("k", None))
        ]

        async def both() -> list[tuple]:
            out = []
            for window, key, category in cases:
                start, end, bucket = window_bounds(window, now_ms())
                key_id = events[0]["event"]["keyId"] if key else None
                kwargs = {"start_ms": start, "end_ms": end, "bucket_ms": bucket, "key_id": key_id}
                a = await metering.series(*env_args, category=category, **kwargs)
                b = await rolled.series(*env_args, category=category, **kwargs)
                out.append((window, key, category, a, b))
            return out

        # Nothing rolled up yet: both read the events.
        for window, key, category, a, b in await both():
            assert a == b, (window, key, category)
        # Roll up the first half (a window of the usage topic), then all of it: the charts do not change.
        half = events[len(events) // 2]["offset"]
        first = {"fromOffset": 0, "toOffset": half, "rollups": rollups_of(events[: len(events) // 2])}
        assert (await http.post("/v1/admin/usage/rollups", json=first, headers=ADMIN)).status_code == 200
        for window, key, category, a, b in await both():
            assert counts(a) == counts(b), (window, key, category)
        end = events[-1]["offset"] + 1
        rest = {"fromOffset": half, "toOffset": end, "rollups": rollups_of(events[len(events) // 2 :])}
        assert (await http.post("/v1/admin/usage/rollups", json=rest, headers=ADMIN)).status_code == 200
        # All rolled up: the same series. A busiest second split between two runs' windows counts as two
        # smaller ones (each run adds up only its own events): never more than the events say.
        for window, key, category, a, b in await both():
            assert counts(a) == counts(b), (window, key, category)
            assert all(0 < y <= x for x, y in zip(a.peak_per_second, b.peak_per_second, strict=True) if x)
            assert sum(b.requests) > 0


def test_a_window_ends_on_a_bucket_boundary_after_now() -> None:
    start, end, bucket = window_bounds("day", 1_700_000_123_456)
    assert bucket == 3_600_000 and end % bucket == 0 and start == end - 86_400_000
    assert end - bucket <= 1_700_000_123_456 < end
