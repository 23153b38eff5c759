"""The data source's bulk read (``queuecore_spark._records``) through real Spark, on both log engines.

What must hold: a read through bulk reads (the default) gives exactly the rows the JSON pages give
(``readFormat=json``), batch and streaming, on the embedded default and on JetStream; an answer damaged on
the way (one byte flipped by a real proxy between Spark and the server) fails the job with
``CORRUPT_RESPONSE`` rather than produce a row; ``readFormat`` takes only ``records`` or ``json``. A server
without bulk reads (a real proxy in front of the server answering ``…/records`` as an older server does,
404 ``NOT_FOUND`` for the route, or refusing it with 406 or 415) is read through the JSON pages, decided once
per reader and logged, with no bulk read retried per batch or micro-batch; a task that meets one mid-range
reads the rest as JSON without losing or repeating a row; a 404 ``TOPIC_NOT_FOUND`` (or a 404 that is not
QueueCore's) is an error, not a reason to fall back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from pyspark.errors import PySparkException
from queuecore_spark import _options, _source
from queuecore_spark._http import QueueCoreError
from queuecore_spark._source import OffsetRange, read_range

from tests.spark.support import CONNECTOR_SCHEMA, Api, Server
from tests.spark.test_source import payloads


def source(spark, server: Server, topic: str, **options: str):  # type: ignore[no-untyped-def]
    reader = (
        spark.read.format("queuecore")
        .option("topic", topic)
        .option("apiKey", server.keys["development"])
        .option("baseUrl", server.url)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def rows(df) -> list[tuple[object, ...]]:  # type: ignore[no-untyped-def]
    return sorted(
        (
            r["id"],
            r["topic"],
            r["partition"],
            r["offset"],
            r["key"],
            r["data"],
            dict(r["headers"]),
            r["timestamp"],
        )
        for r in df.collect()
    )


class TestBulkRead:
    def test_bulk_and_json_reads_give_the_same_rows(self, spark, any_server: Server) -> None:  # type: ignore[no-untyped-def]
        api = Api(any_server.url, any_server.keys["development"])
        try:
            topic = api.create_topic(partitions=3)
            published = api.publish(topic, payloads(3000, "bulk"))
        finally:
            api.http.close()
        bulk = rows(source(spark, any_server, topic, maxRecordsPerPartition="700"))
        pages = rows(source(spark, any_server, topic, readFormat="json"))
        assert len(bulk) == 3000 and bulk == pages
        assert {r[0] for r in bulk} == {m["id"] for m in published}
        ranged = rows(
            source(spark, any_server, topic, startingOffsets='{"0": 10}', endingOffsets='{"0": 500}')
        )
        assert sorted(r[3] for r in ranged if r[2] == 0) == list(range(10, 500))

    def test_a_long_range_is_read_in_windows_in_order(self, spark, api: Api, qc_server: Server) -> None:  # type: ignore[no-untyped-def]
        """45,000 offsets in one task: windows of 20,000, read ahead and joined up in order."""
        topic = api.create_topic(partitions=1)
        api.publish(topic, [{"data": {"n": i}} for i in range(45_000)])
        df = source(spark, qc_server, topic)
        assert df.rdd.getNumPartitions() == 1
        got = [(r["offset"], r["data"]) for r in df.select("offset", "data").collect()]
        assert got == [(i, f'{{"n":{i}}}') for i in range(45_000)]
        tail = source(spark, qc_server, topic, startingOffsets='{"0": 19999}', endingOffsets='{"0": 40001}')
        assert [r["offset"] for r in tail.select("offset").collect()] == list(range(19_999, 40_001))

    def test_a_streaming_query_reads_through_bulk_reads(
        self, spark, any_server: Server, tmp_path: Path
    ) -> None:  # type: ignore[no-untyped-def]
        api = Api(any_server.url, any_server.keys["development"])
        try:
            topic = api.create_topic(partitions=2)
            published = api.publish(topic, [{"data": {"n": i}} for i in range(400)])
        finally:
            api.http.close()
        stream = (
            spark.readStream.format("queuecore")
            .option("topic", topic)
            .option("apiKey", any_server.keys["development"])
            .option("baseUrl", any_server.url)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "150")
            .load()
        )
        query = (
            stream.writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None
        ids = [r["id"] for r in spark.read.parquet(str(tmp_path / "out")).collect()]
        assert sorted(ids) == sorted(str(m["id"]) for m in published)

    def test_read_format_is_records_or_json(self, spark, qc_server: Server) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(PySparkException, match=r"INVALID_OPTION: 'readFormat'"):
            source(spark, qc_server, "any.topic", readFormat="avro").collect()


class _Flipping(BaseHTTPRequestHandler):
    """A proxy to the server that flips one byte in the middle of every bulk read's answer."""

    upstream = ""

    def do_GET(self) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "accept")}
        answer = httpx.get(self.upstream + self.path, headers=headers, timeout=60)
        body = bytearray(answer.content)
        if "/records" in self.path and answer.status_code == 200:
            body[len(body) // 2] ^= 0x01
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("content-type", "application/octet-stream"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(bytes(body))

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def flipping_proxy(qc_server: Server) -> Iterator[str]:
    handler = type("Flipping", (_Flipping,), {"upstream": qc_server.url})
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{proxy.server_address[1]}"
    proxy.shutdown()
    proxy.server_close()


class TestDamagedAnswers:
    def test_a_flipped_byte_fails_the_job(
        self, spark, api: Api, qc_server: Server, flipping_proxy: str
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=1)
        api.publish(topic, payloads(200, "flip"))
        damaged = (
            spark.read.format("queuecore")
            .option("topic", topic)
            .option("apiKey", qc_server.keys["development"])
            .option("baseUrl", flipping_proxy)
            .load()
        )
        with pytest.raises(PySparkException, match=r"CORRUPT_RESPONSE: frame 0 failed its CRC"):
            damaged.collect()
        # Through the proxy the JSON pages arrive whole, so the same read with readFormat=json succeeds.
        assert (
            damaged.sparkSession.read.format("queuecore")
            .option("topic", topic)
            .option("apiKey", qc_server.keys["development"])
            .option("baseUrl", flipping_proxy)
            .option("readFormat", "json")
            .load()
            .count()
            == 200
        )


class _Older(BaseHTTPRequestHandler):
    """A proxy to the server standing for one without bulk reads: after ``allowed`` bulk reads went
    through, it answers every ``…/records`` as ``refusal`` says; it forwards everything else as it is.

    ``route``: the server's own answer to a route it does not have (404 ``NOT_FOUND``), as a server older
    than bulk reads answers; ``406``: the server's own 406 (the proxy asks with ``Accept: text/html``);
    ``415``: a bare 415 from the proxy; ``topic``: the server's 404 ``TOPIC_NOT_FOUND`` (another topic
    asked for); ``bare-404``: a 404 page that is not QueueCore's envelope."""

    proxy: OlderServer

    def do_GET(self) -> None:
        proxy = self.proxy
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "accept")}
        path = self.path
        with proxy.lock:
            proxy.paths.append(path)
            bulk = urlsplit(path).path.endswith("/records")
            refused = bulk and sum(urlsplit(p).path.endswith("/records") for p in proxy.paths) > proxy.allowed
        if refused and proxy.refusal in ("415", "bare-404"):
            self._answer(int(proxy.refusal[-3:]), "text/html", b"<html>refused</html>")
            return
        if refused and proxy.refusal == "route":
            path = path.replace("/records", "/records-not-served-here")
        elif refused and proxy.refusal == "406":
            headers = {k: v for k, v in headers.items() if k.lower() != "accept"} | {"Accept": "text/html"}
        elif refused and proxy.refusal == "topic":
            path = path.replace("/v1/topics/", "/v1/topics/no.such.topic.", 1)
        answer = httpx.get(proxy.upstream + path, headers=headers, timeout=60)
        self._answer(
            answer.status_code, answer.headers.get("content-type", "application/octet-stream"), answer.content
        )

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@dataclass
class OlderServer:
    upstream: str
    refusal: str
    allowed: int = 0
    url: str = ""
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def asked(self, suffix: str) -> int:
        """How many requests for a path ending in ``suffix`` came through."""
        return sum(urlsplit(p).path.endswith(suffix) for p in self.paths)


@pytest.fixture
def older_server(qc_server: Server) -> Iterator[Callable[..., OlderServer]]:
    """``older_server(refusal, allowed=0)``: a real HTTP proxy to the session's server (``_Older``)."""
    servers: list[ThreadingHTTPServer] = []

    def start(refusal: str, allowed: int = 0) -> OlderServer:
        proxy = OlderServer(qc_server.url, refusal, allowed)
        http = ThreadingHTTPServer(("127.0.0.1", 0), type("Older", (_Older,), {"proxy": proxy}))
        threading.Thread(target=http.serve_forever, daemon=True).start()
        servers.append(http)
        proxy.url = f"http://127.0.0.1:{http.server_address[1]}"
        return proxy

    yield start
    for http in servers:
        http.shutdown()
        http.server_close()


def read_through(
    proxy: OlderServer, server: Server, topic: str, part: OffsetRange
) -> list[dict[str, object]]:
    """One task's range read in this process (no Spark), through the proxy."""
    opts = _options.parse({"topic": topic, "apiKey": server.keys["development"], "baseUrl": proxy.url})
    return [row for batch in read_range(opts, CONNECTOR_SCHEMA, part) for row in batch.to_pylist()]


class TestServersWithoutBulkReads:
    def test_the_proxy_answers_as_an_older_server_would(self, api: Api, older_server) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=1)
        proxy = older_server("route")
        headers = {**api.http.headers, "Accept": "application/vnd.queuecore.records"}
        answer = httpx.get(f"{proxy.url}/v1/topics/{topic}/partitions/0/records", headers=headers)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "NOT_FOUND"
        assert answer.json()["error"]["message"].startswith("No route matches")
        answer = httpx.get(f"{proxy.url}/v1/topics/{topic}/partitions/0/messages", headers=headers)
        assert answer.status_code == 200

    @pytest.mark.parametrize("refusal", ["route", "406", "415"])
    def test_a_batch_read_falls_back_to_the_json_pages_once(
        self, spark, api: Api, qc_server: Server, older_server, refusal: str
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=2)
        api.publish(topic, payloads(300, "older"))
        proxy = older_server(refusal)
        got = rows(source(spark, qc_server, topic, baseUrl=proxy.url, maxRecordsPerPartition="100"))
        assert len(got) == 300 and got == rows(source(spark, qc_server, topic, readFormat="json"))
        # The driver's one empty bulk read decided it: no task asked for a bulk read (4 tasks).
        assert proxy.asked("/records") == 1 and proxy.asked("/messages") >= 4

    def test_a_streaming_query_decides_once_not_per_micro_batch(
        self, spark, api: Api, qc_server: Server, older_server, tmp_path: Path
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=2)
        published = api.publish(topic, [{"data": {"n": i}} for i in range(400)])
        proxy = older_server("route")
        query = (
            spark.readStream.format("queuecore")
            .option("topic", topic)
            .option("apiKey", qc_server.keys["development"])
            .option("baseUrl", proxy.url)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "150")
            .load()
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None
        assert len(query.recentProgress) >= 3  # 400 offsets in micro-batches of at most 150
        ids = [r["id"] for r in spark.read.parquet(str(tmp_path / "out")).collect()]
        assert sorted(ids) == sorted(str(m["id"]) for m in published)
        assert proxy.asked("/records") == 1

    def test_a_task_that_meets_an_older_process_reads_the_rest_as_json(
        self, api: Api, qc_server: Server, older_server, monkeypatch, caplog
    ) -> None:  # type: ignore[no-untyped-def]
        """Its first window read by bulk read, the second refused: offsets 100 on come from JSON pages,
        each once and in order, and the refusal is logged once."""
        monkeypatch.setattr(_source, "BULK_PAGE", 100)
        topic = api.create_topic(partitions=1)
        published = api.publish(topic, payloads(350, "mixed"))
        proxy = older_server("route", allowed=1)
        with caplog.at_level(logging.WARNING, logger="queuecore_spark"):
            got = read_through(proxy, qc_server, topic, OffsetRange(0, 0, 350))
        assert [r["offset"] for r in got] == list(range(350))
        assert [r["id"] for r in got] == [m["id"] for m in published]
        assert proxy.asked("/records") == 2 and proxy.asked("/messages") >= 1
        warnings = [r for r in caplog.records if r.name == "queuecore_spark"]
        assert len(warnings) == 1 and "offsets 100 to 350" in warnings[0].getMessage()

    @pytest.mark.parametrize(("refusal", "code"), [("topic", "TOPIC_NOT_FOUND"), ("bare-404", "HTTP_ERROR")])
    def test_another_404_is_an_error_not_a_missing_bulk_read(
        self, api: Api, qc_server: Server, older_server, refusal: str, code: str
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=1)
        api.publish(topic, payloads(10, "404"))
        proxy = older_server(refusal)
        with pytest.raises(QueueCoreError) as raised:
            read_through(proxy, qc_server, topic, OffsetRange(0, 0, 10))
        assert (raised.value.code, raised.value.status) == (code, 404)
        assert proxy.asked("/messages") == 0
