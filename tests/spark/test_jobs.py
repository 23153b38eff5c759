"""The operator jobs: archive to Parquet and usage rollups, against the real server and real Spark."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from queuecore_spark.jobs import archive, usage

from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.protocol import Rollup
from app.stores.metadata.usage_repositories import UsageRollupRepository
from tests.spark.support import BIN, Api, Server


def archived(spark, out: Path) -> list[tuple[object, ...]]:  # type: ignore[no-untyped-def]
    rows = spark.read.parquet(str(out)).collect()
    return sorted(
        (
            r["project"],
            r["environment"],
            r["topic"],
            str(r["date"]),
            r["id"],
            r["partition"],
            r["offset"],
            r["data"],
        )
        for r in rows
    )


class TestArchive:
    def test_runs_are_incremental_and_a_rerun_writes_nothing_twice(
        self, api: Api, spark, qc_server: Server, key: str, tmp_path: Path
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=2)
        first = api.publish(topic, [{"data": {"n": i}} for i in range(300)])
        out = tmp_path / "archive"
        source = archive.Source("spark-test", "development", key)

        assert archive.run(spark, out, [source], qc_server.url, [topic]) == {
            f"project=spark-test/environment=development/topic={topic}": 300
        }
        once = archived(spark, out)
        today = datetime.now(UTC).date().isoformat()
        assert [r[4] for r in once] == sorted(str(m["id"]) for m in first)
        assert {r[:4] for r in once} <= {
            ("spark-test", "development", topic, today),
            ("spark-test", "development", topic, (datetime.now(UTC) - timedelta(days=1)).date().isoformat()),
        }

        # Nothing new: the same rows, nothing added.
        assert (
            archive.run(spark, out, [source], qc_server.url, [topic])[
                f"project=spark-test/environment=development/topic={topic}"
            ]
            == 0
        )
        assert archived(spark, out) == once

        # A crashed run leaves a data file no committed batch lists: the next run removes it.
        target = archive.topic_dir(out, source, topic)
        committed = next(target.rglob("*.parquet"))
        shutil.copy(committed, committed.with_name("part-99999-crashed-run.c000.snappy.parquet"))
        second = api.publish(topic, [{"data": {"n": 1000 + i}} for i in range(50)])
        assert (
            archive.run(spark, out, [source], qc_server.url, [topic])[
                f"project=spark-test/environment=development/topic={topic}"
            ]
            == 50
        )
        ids = [r[4] for r in archived(spark, out)]
        assert len(ids) == len(set(ids)) == 350
        assert set(ids) == {str(m["id"]) for m in first + second}


def _rollups(server: Server, project_id: str, key_id: str, granularity: str) -> list[Rollup]:
    async def read() -> list[Rollup]:
        store = SqlMetadataStore(server.database_url, pool_size=1)
        try:
            async with store.sessions() as session:
                now = datetime.now(UTC)
                return list(
                    await UsageRollupRepository.from_session(session).series(
                        project_id,
                        "development",
                        granularity,
                        now - timedelta(days=2),
                        now + timedelta(days=2),
                        key_id=key_id,
                    )
                )
        finally:
            await store.engine.dispose()

    return asyncio.run(read())


def _events_of(server: Server, project_id: str, at_least: int) -> list[dict[str, object]]:
    """The usage events of ``project_id`` (development), once the meter (every 0.25 s) wrote ``at_least``."""
    admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"})
    mine: list[dict[str, object]] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            offset, mine = 0, []
            while True:
                page = admin.get(
                    "/v1/admin/usage/events", params={"fromOffset": offset, "limit": 10_000}
                ).json()
                mine += [
                    e["event"]
                    for e in page["data"]
                    if e["event"]["projectId"] == project_id and e["event"]["environment"] == "development"
                ]
                if not page["data"]:
                    break
                offset = page["nextOffset"]
            if len(mine) >= at_least:
                return mine
            time.sleep(0.2)
    finally:
        admin.close()
    return mine


class TestUsageRollups:
    def test_rollups_match_the_requests_made_and_a_rerun_adds_nothing(
        self, spark, any_server: Server
    ) -> None:  # type: ignore[no-untyped-def]
        """Only this test uses project spark-usage (developer tier), so its events are the requests made here;
        on the embedded default and on JetStream (the job talks to the API only)."""
        server = any_server
        project_id = server.projects["spark-usage"]
        key = server.usage_keys["development"]
        http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        name = f"usage.{time.time_ns()}"
        statuses = [http.post("/v1/topics", json={"name": name, "partitions": 1}).status_code]
        batch = {"messages": [{"data": i} for i in range(7)]}
        statuses.append(http.post(f"/v1/topics/{name}/messages/batch", json=batch).status_code)
        statuses += [
            http.post(f"/v1/topics/{name}/messages", json={"data": "one"}).status_code for _ in range(3)
        ]
        # Admin on the developer tier is 10 req/s: 25 describes in a burst meet some 429s.
        statuses += [http.get(f"/v1/topics/{name}").status_code for _ in range(25)]
        http.close()
        assert statuses[:5] == [201] * 5 and 429 in statuses

        mine = _events_of(server, project_id, len(statuses))
        assert len(mine) == len(statuses)
        key_id = str(mine[0]["keyId"])

        # Three windows: three compare-and-set calls in one run (each window is a few Spark jobs).
        admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"})
        progress = admin.get("/v1/admin/usage/rollups/progress").json()["nextOffset"]
        latest = admin.get("/v1/admin/usage/events", params={"limit": 1}).json()["latestOffset"]
        admin.close()
        first = usage.run(spark, server.url, server.admin_token, window=(latest - progress) // 3 + 1)
        assert first.events >= len(statuses)
        for granularity in ("minute", "hour", "day"):
            rows = _rollups(server, project_id, key_id, granularity)
            assert sum(r.requests for r in rows) == len(statuses)
            assert sum(r.rate_limited for r in rows) == statuses.count(429)
            assert sum(r.requests for r in rows if r.category == "publish") == 4
            assert sum(r.messages for r in rows if r.category == "publish") == 10
            # The busiest second: the admin burst (26 requests within a few seconds) peaks above 1/s.
            admin = [r for r in rows if r.category == "admin"]
            assert 2 <= max(r.peak_requests_per_second for r in admin) <= sum(r.requests for r in admin)
        before = _rollups(server, project_id, key_id, "minute")

        # Run again: it starts where the first stopped, and this key's buckets do not change.
        again = usage.run(spark, server.url, server.admin_token)
        assert again.from_offset == first.next_offset
        assert _rollups(server, project_id, key_id, "minute") == before

    def test_without_the_operators_token_the_job_fails_clearly(self, spark, qc_server: Server) -> None:  # type: ignore[no-untyped-def]
        from queuecore_spark import QueueCoreError

        try:
            usage.run(spark, qc_server.url, "not-the-token")
        except QueueCoreError as exc:
            assert exc.code == "INVALID_API_KEY"
        else:
            raise AssertionError("the job ran without the operators' token")


class TestArchiveOnJetStream:
    def test_an_archive_run_copies_every_message_once(
        self, spark, qc_server_jetstream: Server, tmp_path: Path
    ) -> None:  # type: ignore[no-untyped-def]
        key = qc_server_jetstream.keys["development"]
        api = Api(qc_server_jetstream.url, key)
        try:
            topic = api.create_topic(partitions=3)
            published = api.publish(topic, [{"data": {"n": i}} for i in range(120)])
        finally:
            api.http.close()
        out = tmp_path / "archive"
        source = archive.Source("spark-test", "development", key)
        label = f"project=spark-test/environment=development/topic={topic}"
        assert archive.run(spark, out, [source], qc_server_jetstream.url, [topic]) == {label: 120}
        assert [r[4] for r in archived(spark, out)] == sorted(str(m["id"]) for m in published)
        assert archive.run(spark, out, [source], qc_server_jetstream.url, [topic]) == {label: 0}


class TestCommandLine:
    """The jobs as operators start them: the console script, and spark-submit (each its own JVM). The
    console script's archive run is on a standalone cluster (``test_cluster.py``)."""

    def test_console_script_reports_service_errors(self, qc_server: Server, tmp_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
        env.update({"QUEUECORE_API_KEY": "pq_test_sk_" + "x" * 32, "QUEUECORE_BASE_URL": qc_server.url})
        result = subprocess.run(
            [str(BIN / "queuecore-spark"), "--master", "local[1]", "archive", "--out", str(tmp_path / "a")],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 1
        assert "queuecore-spark: INVALID_API_KEY:" in result.stderr

    def test_spark_submit_usage(self, qc_server: Server) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
        env.update(
            {
                "QUEUECORE_ADMIN_TOKEN": qc_server.admin_token,
                "QUEUECORE_BASE_URL": qc_server.url,
                "PYSPARK_PYTHON": sys.executable,
            }
        )
        # One request that no run has added up yet.
        key = qc_server.keys["development"]
        assert (
            httpx.get(f"{qc_server.url}/v1/topics", headers={"Authorization": f"Bearer {key}"}).status_code
            == 200
        )
        _events_of(qc_server, qc_server.projects["spark-test"], 1)
        script = Path(usage.__file__).with_name("cli.py")
        result = subprocess.run(
            [str(BIN / "spark-submit"), "--master", "local[1]", "--driver-memory", "1g", str(script), "usage"],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        answer = json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])
        assert answer["next_offset"] > answer["from_offset"] >= 0 and answer["events"] >= 1
