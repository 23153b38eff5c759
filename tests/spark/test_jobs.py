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

from app.stores.metadata.database import MetadataStore
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
        store = MetadataStore(f"sqlite+aiosqlite:///{server.data_dir / 'metadata.db'}", pool_size=1)
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


class TestUsageRollups:
    def test_rollups_match_the_requests_made_and_a_rerun_adds_nothing(self, spark, qc_server: Server) -> None:  # type: ignore[no-untyped-def]
        """Only this test uses project spark-usage (developer tier), so its events are the requests made here."""
        project_id = qc_server.projects["spark-usage"]
        key = qc_server.usage_keys["development"]
        http = httpx.Client(base_url=qc_server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
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

        # Wait until the meter (it writes every 0.25 s) has written an event for every request.
        partition_dir = qc_server.data_dir / "log" / "__usage-0"
        mine: list[tuple[object, ...]] = []
        deadline = time.monotonic() + 30
        while len(mine) < len(statuses) and time.monotonic() < deadline:
            time.sleep(0.2)
            events = [e for f in usage.segments(partition_dir, 0) for e in usage.read_segment(f, 0)]
            mine = [e for e in events if e[2] == project_id and e[3] == "development"]
        assert len(mine) == len(statuses)
        key_id = str(mine[0][4])

        first = usage.run(spark, qc_server.data_dir)
        assert first.events >= len(statuses)
        for granularity in ("minute", "hour", "day"):
            rows = _rollups(qc_server, project_id, key_id, granularity)
            assert sum(r.requests for r in rows) == len(statuses)
            assert sum(r.rate_limited for r in rows) == statuses.count(429)
            assert sum(r.requests for r in rows if r.category == "publish") == 4
            assert sum(r.messages for r in rows if r.category == "publish") == 10
            # The busiest second: the admin burst (26 requests within a few seconds) peaks above 1/s.
            admin = [r for r in rows if r.category == "admin"]
            assert 2 <= max(r.peak_requests_per_second for r in admin) <= sum(r.requests for r in admin)
        before = _rollups(qc_server, project_id, key_id, "minute")

        # Run again: it starts where the first stopped, and this key's buckets do not change.
        again = usage.run(spark, qc_server.data_dir)
        assert again.from_offset == first.next_offset
        assert _rollups(qc_server, project_id, key_id, "minute") == before


class TestCommandLine:
    """The jobs as operators start them: the console script, and spark-submit (each its own JVM)."""

    def test_console_script_archive(
        self, api: Api, qc_server: Server, key: str, tmp_path: Path, spark
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=1)
        api.publish(topic, [{"data": {"n": i}} for i in range(20)])
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
        env.update(
            {"QUEUECORE_API_KEY": key, "QUEUECORE_BASE_URL": qc_server.url, "PYSPARK_PYTHON": sys.executable}
        )
        out = tmp_path / "archive"
        result = subprocess.run(
            [str(BIN / "queuecore-spark"), "--master", "local[1]", "archive", "--out", str(out), "--project", "p1", "--topics", topic],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads(result.stdout.strip().splitlines()[-1]) == {
            "archived": {f"project=p1/environment=development/topic={topic}": 20}
        }
        assert spark.read.parquet(str(out)).count() == 20

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
        env.update({"QUEUECORE_DATA_DIR": str(qc_server.data_dir), "PYSPARK_PYTHON": sys.executable})
        script = Path(usage.__file__).with_name("cli.py")
        result = subprocess.run(
            [str(BIN / "spark-submit"), "--master", "local[1]", "--driver-memory", "1g", str(script), "usage"],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        answer = json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])
        assert answer["next_offset"] >= answer["from_offset"] > 0
