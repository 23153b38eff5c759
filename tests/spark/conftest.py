"""The Spark tests: one real server and one SparkSession (local[2], task retries on) per test session."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.fixtures.database import fresh_database
from tests.spark.cluster import StandaloneCluster
from tests.spark.support import Api, Server

pyspark = pytest.importorskip("pyspark")


ADMIN_TOKEN = "spark-operator-token-" + "s" * 24


def started(server: Server) -> Server:
    server.cli("migrate")
    server.keys = server.bootstrap("spark-test")
    # Developer tier (admin 10 req/s), for the usage rollups: its requests can be refused with 429.
    server.usage_keys = server.bootstrap("spark-usage", tier="developer")
    server.start()
    return server


@pytest.fixture(scope="session")
def qc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The embedded default: SQLite and the local log engine."""
    server = started(
        Server(
            tmp_path_factory.mktemp("queuecore-spark-data"), settings={"QUEUECORE_ADMIN_TOKEN": ADMIN_TOKEN}
        )
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def qc_server_jetstream(
    tmp_path_factory: pytest.TempPathFactory, nats_cluster, postgres_database_spark: str
) -> Iterator[Server]:  # type: ignore[no-untyped-def]
    """The scale-out shape: Postgres and the JetStream log engine on the session's NATS cluster."""
    settings = {
        "QUEUECORE_ADMIN_TOKEN": ADMIN_TOKEN,
        "QUEUECORE_LOG_ENGINE": "jetstream",
        "QUEUECORE_NATS_URL": nats_cluster.url,
        "QUEUECORE_DATABASE_URL": postgres_database_spark,
    }
    server = started(Server(tmp_path_factory.mktemp("queuecore-spark-js"), settings=settings))
    yield server
    server.stop()


@pytest.fixture(scope="session")
async def postgres_database_spark() -> AsyncIterator[str]:
    async with fresh_database("qc_test_spark") as url:
        yield url


@pytest.fixture(params=["local", "jetstream"])
def any_server(request: pytest.FixtureRequest) -> Server:
    """The server of each deployment (the jobs must run the same on both)."""
    return request.getfixturevalue("qc_server" if request.param == "local" else "qc_server_jetstream")  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def key(qc_server: Server) -> str:
    return qc_server.keys["development"]


@pytest.fixture(scope="session")
def api(qc_server: Server, key: str) -> Iterator[Api]:
    client = Api(qc_server.url, key)
    yield client
    client.http.close()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory, qc_server: Server) -> Iterator[object]:
    from pyspark.sql import SparkSession
    from queuecore_spark import QueueCoreDataSource

    os.environ["PYSPARK_PYTHON"] = sys.executable
    # The defaults of apiKey/baseUrl, used by the docs' examples (tests/spark/test_docs.py): the staging
    # environment of the test project. Set before Spark starts, as its Python workers read them.
    # Only the JVM's environment gets them (it is taken at launch): the rest of the suite keeps its own.
    saved = {k: os.environ.get(k) for k in ("QUEUECORE_API_KEY", "QUEUECORE_BASE_URL")}
    os.environ["QUEUECORE_API_KEY"] = qc_server.keys["staging"]
    os.environ["QUEUECORE_BASE_URL"] = qc_server.url
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,4]")  # 2 threads; a failed task is retried (up to 4 attempts)
        .appName("queuecore-spark-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .getOrCreate()
    )
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(QueueCoreDataSource)
    yield session
    session.stop()


@pytest.fixture
def reader(spark, qc_server: Server, key: str):  # type: ignore[no-untyped-def]
    """``reader(topic)``: ``spark.read.format("queuecore")`` with the topic, key and URL set."""

    def make(topic: str):  # type: ignore[no-untyped-def]
        return (
            spark.read.format("queuecore")
            .option("topic", topic)
            .option("apiKey", key)
            .option("baseUrl", qc_server.url)
        )

    return make


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone Spark cluster on loopback (a master, two 1-core 512 MB workers), once per session."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
