"""``df.write.format("queuecore")`` (spark/src/queuecore_spark/_writer.py) against a real server and Spark."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from pyspark.errors import PySparkException

from app.broker.partitioner import partition_for_key
from tests.spark.support import Api, Server


def save(df, topic: str, server: Server, key: str, **options: str) -> None:  # type: ignore[no-untyped-def]
    writer = df.write.format("queuecore").option("topic", topic).option("apiKey", key)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.option("baseUrl", server.url).mode("append").save()


class TestBatchWrite:
    def test_publishes_rows(self, api: Api, spark, qc_server: Server, key: str) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=3)
        rows = [
            ('{"n": 1}', "a", {"h": "1"}, None),
            ('[1, 2, {"x": null}]', None, None, 2),
            ("null", None, None, None),
        ]
        df = spark.createDataFrame(rows, "data string, key string, headers map<string,string>, partition int")
        save(df, topic, qc_server, key)
        got = api.read_all(topic)
        assert sorted(orjson.dumps(m["data"]) for m in got) == sorted(
            [b'{"n":1}', b'[1,2,{"x":null}]', b"null"]
        )
        by_data = {orjson.dumps(m["data"]): m for m in got}
        assert by_data[b'{"n":1}']["key"] == "a" and by_data[b'{"n":1}']["headers"] == {"h": "1"}
        assert by_data[b'[1,2,{"x":null}]']["partition"] == 2

    def test_pipelined_requests_keep_each_keys_order_and_the_services_placement(
        self, api: Api, spark, qc_server: Server, key: str
    ) -> None:  # type: ignore[no-untyped-def]
        """Two tasks of 6,000 rows each (every seventh keyless), over 4 partitions: many requests in flight
        per task. Each key's messages land on the partition the service's partitioner names, in the rows'
        order; keyless rows spread evenly."""
        topic = api.create_topic(partitions=4)
        df = spark.range(0, 12_000, 1, 2).selectExpr(
            "to_json(named_struct('n', id)) AS data", "IF(id % 7 = 0, NULL, concat('k', id % 13)) AS key"
        )
        save(df, topic, qc_server, key)
        got = api.read_all(topic)
        assert sorted(m["data"]["n"] for m in got) == list(range(12_000))  # type: ignore[index]
        by_key: dict[str, list[tuple[int, int]]] = {}
        keyless = [0, 0, 0, 0]
        for m in got:
            if m["key"] is None:
                keyless[m["partition"]] += 1  # type: ignore[index]
                continue
            assert m["partition"] == partition_for_key(str(m["key"]).encode(), 4)
            by_key.setdefault(str(m["key"]), []).append((int(m["offset"]), int(m["data"]["n"])))  # type: ignore[index, call-overload]
        assert len(by_key) == 13
        for pairs in by_key.values():
            # Rows of one task keep their order; the two tasks are the halves of the range.
            for half in (range(6000), range(6000, 12_000)):
                ns = [n for _, n in sorted(pairs) if n in half]
                assert ns == sorted(ns)
        assert sum(keyless) == 12_000 // 7 + 1 and max(keyless) - min(keyless) <= 2

    def test_one_request_at_a_time_publishes_the_same(
        self, api: Api, spark, qc_server: Server, key: str
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=3)
        df = spark.range(0, 2500, 1, 1).selectExpr("to_json(named_struct('n', id)) AS data")
        save(df, topic, qc_server, key, maxInFlight="1")
        assert sorted(m["data"]["n"] for m in api.read_all(topic)) == list(range(2500))  # type: ignore[index]

    def test_a_retried_task_publishes_each_row_once(
        self, api: Api, spark, qc_server: Server, key: str, tmp_path: Path
    ) -> None:  # type: ignore[no-untyped-def]
        """The real writer, in a task that fails on its first attempt after 8,500 of its 12,000 rows (the
        failure is injected into the batches it reads). By then it had handed six requests of 1,000 rows to
        its lanes, up to three in flight at once; Spark retries the task, which sends every row again with
        the same idempotency keys: the 6,000 that landed are answered as replays, none is appended twice."""
        from pyspark import TaskContext
        from queuecore_spark import QueueCoreDataSource
        from queuecore_spark._writer import BatchWriter

        marker, replays = tmp_path / "failed-once", tmp_path / "replayed"

        class FailingOnceWriter(BatchWriter):  # type: ignore[misc]
            def write(self, iterator):  # type: ignore[no-untyped-def]
                context = TaskContext.get()

                def batches():  # type: ignore[no-untyped-def]
                    position = 0
                    for batch in iterator:
                        for at in range(0, batch.num_rows, 100):
                            if position == 8500 and context is not None and context.attemptNumber() == 0:
                                marker.write_text("failed after 8500 rows")
                                raise RuntimeError("injected task failure")
                            piece = batch.slice(at, 100)
                            position += piece.num_rows
                            yield piece

                return super().write(batches())

            def commit(self, messages):  # type: ignore[no-untyped-def]
                replays.write_text(str(sum(m.replayed for m in messages)))

        class FailingOnce(QueueCoreDataSource):  # type: ignore[misc]
            @classmethod
            def name(cls) -> str:
                return "queuecore_failing_once"

            def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
                from queuecore_spark import _options

                return FailingOnceWriter(_options.parse_write(self.options), schema)

        spark.dataSource.register(FailingOnce)
        topic = api.create_topic(partitions=3)
        df = spark.range(0, 12_000, 1, 1).selectExpr("to_json(named_struct('n', id)) AS data")
        df.write.format("queuecore_failing_once").option("topic", topic).option("apiKey", key).option(
            "baseUrl", qc_server.url
        ).mode("append").save()
        assert marker.exists()  # the first attempt failed
        assert replays.read_text() == "6000"  # what it had published, sent again by the retry
        got = [m["data"]["n"] for m in api.read_all(topic)]  # type: ignore[index]
        assert sorted(got) == list(range(12_000))

    def test_write_without_data_column_fails_clearly(
        self, api: Api, spark, qc_server: Server, key: str
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=1)
        df = spark.createDataFrame([("x",)], "payload string")
        with pytest.raises(
            PySparkException, match=r"INVALID_OPTION: Writing to QueueCore needs a 'data' column"
        ):
            save(df, topic, qc_server, key)
        assert api.read_all(topic) == []

    def test_a_row_that_is_not_json_fails_the_write_and_cannot_add_items(
        self, api: Api, spark, qc_server: Server, key: str
    ) -> None:  # type: ignore[no-untyped-def]
        """A row's data is checked before it is sent: text that would close the item and open another in
        the request body is refused, not published."""
        topic = api.create_topic(partitions=1)
        df = spark.createDataFrame([('{"n": 1}',), ('1},{"data":2',)], "data string").coalesce(1)
        with pytest.raises(PySparkException, match=r"INVALID_OPTION: Row 1: 'data' is not valid JSON"):
            save(df, topic, qc_server, key)
        assert api.read_all(topic) == []
        numbers = spark.createDataFrame([(5,)], "data int")
        with pytest.raises(PySparkException, match=r"INVALID_OPTION: Row 0: 'data' must be a JSON string"):
            save(numbers, topic, qc_server, key)
        with pytest.raises(PySparkException, match=r"INVALID_OPTION: 'maxInFlight' must be a positive"):
            save(df, topic, qc_server, key, maxInFlight="0")
