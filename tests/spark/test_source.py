"""The ``queuecore`` data source against a real server and real Spark (local[2])."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import orjson
import pytest
from pyspark.errors import PySparkException

from tests.spark.support import Api, Server


def payloads(n: int, tag: str = "m") -> list[dict[str, object]]:
    """n messages with varied JSON data (nested, unicode, null), some keyed, some with headers."""
    out: list[dict[str, object]] = []
    for i in range(n):
        data: object = {"i": i, "tag": tag, "nested": {"list": [1, 2.5, "x"], "ok": True}, "text": "é✓"}
        if i % 17 == 0:
            data = None
        item: dict[str, object] = {"data": data}
        if i % 3 == 0:
            item["key"] = f"k{i % 5}"
        if i % 4 == 0:
            item["headers"] = {"source": "test", "n": str(i)}
        out.append(item)
    return out


def rows_by_id(df) -> dict[str, dict[str, object]]:  # type: ignore[no-untyped-def]
    return {r["id"]: r.asDict() for r in df.collect()}


class TestBatchRead:
    def test_reads_exactly_what_was_published(self, api: Api, reader) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=3)
        api.publish(topic, payloads(2500))
        expected = api.read_all(topic)
        # Small splits: many Spark partitions per topic partition, which must still join up exactly.
        df = reader(topic).option("maxRecordsPerPartition", "400").load()
        assert df.rdd.getNumPartitions() >= 7
        rows = df.collect()
        assert len(rows) == len(expected) == 2500
        got = {r["id"]: r for r in rows}
        for m in expected:
            r = got[m["id"]]
            assert (r["topic"], r["partition"], r["offset"], r["key"]) == (
                topic,
                m["partition"],
                m["offset"],
                m["key"],
            )
            assert r["data"] == orjson.dumps(m["data"]).decode()  # byte-identical JSON text
            assert json.loads(r["data"]) == m["data"]
            assert dict(r["headers"] or {}) == m["headers"]
            assert r["timestamp"] == datetime.fromisoformat(str(m["timestamp"])).replace(tzinfo=None)
        # Order per partition: Spark's partitions come in offset order.
        for p in range(3):
            offsets = [r["offset"] for r in rows if r["partition"] == p]
            assert offsets == sorted(offsets) and offsets == list(range(len(offsets)))

    def test_schema(self, api: Api, reader) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=1)
        assert reader(topic).load().schema.simpleString() == (
            "struct<id:string,topic:string,partition:int,offset:bigint,key:string,data:string,"
            "headers:map<string,string>,timestamp:timestamp>"
        )
        assert reader(topic).load().count() == 0

    def test_starting_and_ending_offsets_and_partitions(self, api: Api, reader) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=2)
        api.publish(topic, [{"data": i, "partition": i % 2} for i in range(40)])  # 20 per partition
        df = (
            reader(topic)
            .option("STARTINGOFFSETS", '{"0": 5, "1": -2}')  # option names are case-insensitive
            .option("endingOffsets", '{"0": 8, "1": -1}')
            .load()
        )
        got = sorted((r["partition"], r["offset"]) for r in df.collect())
        assert got == [(0, 5), (0, 6), (0, 7)] + [(1, o) for o in range(20)]
        only = reader(topic).option("partitions", "1").option("startingOffsets", "earliest").load()
        assert {r["partition"] for r in only.collect()} == {1}
        assert only.count() == 20

    def test_starting_timestamp(self, api: Api, reader) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=2)
        api.publish(topic, [{"data": {"phase": "before"}} for _ in range(10)])
        time.sleep(0.05)
        after = api.publish(topic, [{"data": {"phase": "after"}} for _ in range(10)])
        first = min(str(m["timestamp"]) for m in after)
        epoch_ms = int(datetime.fromisoformat(first).timestamp() * 1000)
        for value in (first, str(epoch_ms)):
            rows = reader(topic).option("startingTimestamp", value).load().collect()
            assert sorted(r["id"] for r in rows) == sorted(str(m["id"]) for m in after)

    def test_service_errors_fail_the_job_with_code_and_message(
        self, api: Api, reader, spark, qc_server: Server
    ) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(
            PySparkException, match=r"QueueCoreError: TOPIC_NOT_FOUND: The topic 'no\.such\.topic'"
        ):
            reader("no.such.topic").load().collect()
        topic = api.create_topic(partitions=1)
        bad_key = "pq_test_sk_" + "x" * 32
        with pytest.raises(PySparkException, match=r"QueueCoreError: INVALID_API_KEY"):
            spark.read.format("queuecore").option("topic", topic).option("apiKey", bad_key).option(
                "baseUrl", qc_server.url
            ).load().collect()
        with pytest.raises(PySparkException, match=r"QueueCoreError: INVALID_OPTION: 'startingOffsets'"):
            reader(topic).option("startingOffsets", "yesterday").load().collect()
        with pytest.raises(PySparkException, match=r"INVALID_OPTION: The option 'topic' is required"):
            spark.read.format("queuecore").option("apiKey", bad_key).load().collect()


class TestStreamingRead:
    def test_restart_resumes_from_the_checkpoint_exactly_once(
        self, api: Api, spark, qc_server: Server, key: str, tmp_path: Path
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=3)
        first = api.publish(topic, [{"data": {"n": i}} for i in range(300)])
        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

        def run():  # type: ignore[no-untyped-def]
            stream = (
                spark.readStream.format("queuecore")
                .option("topic", topic)
                .option("apiKey", key)
                .option("baseUrl", qc_server.url)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "120")
                .load()
            )
            query = (
                stream.writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
                .start()
            )
            try:
                query.processAllAvailable()
            finally:
                query.stop()
            assert query.exception() is None
            return query

        q1 = run()
        batches_first = len([p for p in q1.recentProgress if p["numInputRows"] > 0])
        assert batches_first >= 3  # admission control: 300 messages, 120 per trigger
        assert sorted(r["id"] for r in spark.read.parquet(str(out)).collect()) == sorted(
            str(m["id"]) for m in first
        )
        # The topic grows (and gains a partition) while the query is down; the restart reads only what is new.
        assert api.http.patch(f"/v1/topics/{topic}", json={"partitions": 4}).status_code == 200
        second = api.publish(topic, [{"data": {"n": 1000 + i}} for i in range(200)])
        assert {m["partition"] for m in second} >= {3}
        run()
        ids = [r["id"] for r in spark.read.parquet(str(out)).collect()]
        assert len(ids) == len(set(ids)) == 500
        assert set(ids) == {str(m["id"]) for m in first + second}

    def test_default_start_is_latest(
        self, api: Api, spark, qc_server: Server, key: str, tmp_path: Path
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=1)
        api.publish(topic, [{"data": "old"} for _ in range(5)])
        stream = (
            spark.readStream.format("queuecore")
            .option("topic", topic)
            .option("apiKey", key)
            .option("baseUrl", qc_server.url)
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
        assert spark.read.schema(stream.schema).parquet(str(tmp_path / "out")).count() == 0
