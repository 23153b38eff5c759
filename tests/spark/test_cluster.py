"""The connector and the archive job on a standalone Spark cluster (a master and two workers on loopback,
``tests/spark/cluster.py``): drivers started with ``spark-submit --master spark://…``, as docs/spark.md says,
and readers and writers running in executors, not in the driver.

In ``make test-long`` (``-m long``), not ``make test``: four JVMs for two tests, about 90 s of CPU-bound
time on two cores. ``make test`` runs the same connector and jobs on a local master, where the readers and
writers also run in Python workers of their own (``tests/spark/test_source.py``, ``test_write.py``,
``test_jobs.py``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.spark.cluster import StandaloneCluster
from tests.spark.support import BIN, Api, Server

APP = Path(__file__).with_name("cluster_app.py")

pytestmark = pytest.mark.long


def submit(cluster: StandaloneCluster, *args: str) -> str:
    result = subprocess.run(
        [str(BIN / "spark-submit"), "--master", cluster.master_url, *args],
        env=cluster.env(), capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:] + cluster.log_tail()
    return result.stdout


class TestOnAStandaloneCluster:
    def test_read_write_and_stream_run_in_executors(
        self, spark_cluster: StandaloneCluster, api: Api, qc_server: Server, key: str, tmp_path: Path
    ) -> None:
        topic, copy = api.create_topic(partitions=3), api.create_topic(partitions=2)
        published = api.publish(topic, [{"data": {"n": i}, "key": f"k{i % 5}"} for i in range(3000)])
        out = submit(spark_cluster, str(APP), qc_server.url, key, topic, copy, str(tmp_path))
        summary = json.loads(out.strip().splitlines()[-1])

        assert summary["master"] == spark_cluster.master_url
        assert summary["read"] == sorted(str(m["id"]) for m in published)
        # Every reader task ran in an executor: a Python worker in an executor's directory
        # (<worker dir>/<app id>/<executor id>), not the driver; the work was spread over both workers.
        places = [json.loads(p.read_text()) for p in (tmp_path / "reads").iterdir()]
        assert len(places) >= 6  # 3,000 messages, 500 per task
        assert all(p["pid"] != summary["driver_pid"] for p in places)
        workers = {Path(p["cwd"]).parent.parent for p in places}
        assert workers == set(spark_cluster.work_dirs)

        copied = api.read_all(copy)
        assert sorted(m["data"]["n"] for m in copied) == list(range(3000))  # type: ignore[index]
        assert {m["key"] for m in copied} == {f"k{i}" for i in range(5)}
        assert sum(summary["stream_batches"]) == 3000 and max(summary["stream_batches"]) <= 1000

    def test_archive_job_from_the_console_script(
        self, spark_cluster: StandaloneCluster, api: Api, qc_server: Server, key: str, tmp_path: Path
    ) -> None:
        # The archive job as an operator starts it (docs/spark.md): the console script, its key and URL
        # from the environment, its driver on this cluster. (spark-submit is the test above's launcher.)
        topic = api.create_topic(partitions=2)
        published = api.publish(topic, [{"data": {"n": i}} for i in range(400)])
        out = tmp_path / "archive"
        env = {**spark_cluster.env(), "QUEUECORE_API_KEY": key, "QUEUECORE_BASE_URL": qc_server.url}
        result = subprocess.run(
            [str(BIN / "queuecore-spark"), "--master", spark_cluster.master_url, "archive", "--out", str(out),
             "--project", "shop", "--topics", topic],
            env=env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-4000:] + spark_cluster.log_tail()
        label = f"project=shop/environment=development/topic={topic}"
        assert json.loads(result.stdout.strip().splitlines()[-1]) == {"archived": {label: 400}}
        table = ds.dataset(out / label, format="parquet", partitioning="hive").to_table()
        assert sorted(table.column("id").to_pylist()) == sorted(str(m["id"]) for m in published)
