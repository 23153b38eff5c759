"""``spark.readStream.format("queuecore")``: ``Trigger.AvailableNow`` with ``maxOffsetsPerTrigger``."""

from __future__ import annotations

from pathlib import Path

from tests.spark.support import Api, Server


def stream_of(spark, topic: str, server: Server, key: str, **options: str):  # type: ignore[no-untyped-def]
    reader = (
        spark.readStream.format("queuecore")
        .option("topic", topic)
        .option("apiKey", key)
        .option("baseUrl", server.url)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


class TestAvailableNow:
    def test_reads_what_was_there_in_micro_batches_of_the_limit_and_stops(
        self, api: Api, spark, qc_server: Server, key: str, tmp_path: Path
    ) -> None:  # type: ignore[no-untyped-def]
        topic = api.create_topic(partitions=3)
        published = api.publish(topic, [{"data": {"n": i}} for i in range(300)])
        stream = stream_of(
            spark, topic, qc_server, key, startingOffsets="earliest", maxOffsetsPerTrigger="120"
        )
        seen: list[tuple[int, list[str]]] = []

        def collect(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
            seen.append((batch_id, [r["id"] for r in batch.select("id").collect()]))

        query = (
            stream.writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(600)
        assert query.exception() is None and not query.isActive
        sizes = [len(ids) for _, ids in seen if ids]
        assert len(sizes) >= 3 and max(sizes) <= 120  # the limit holds under AvailableNow too
        ids = [i for _, batch in seen for i in batch]
        assert sorted(ids) == sorted(str(m["id"]) for m in published)

    def test_the_run_ends_at_the_offsets_of_its_start(self, api: Api, qc_server: Server, key: str) -> None:
        """The reader as Spark drives it (on the driver): after ``prepareForTriggerAvailableNow`` it offers
        nothing published later, nor anything of a partition added later, and reaches its target."""
        from pyspark.sql.streaming.datasource import ReadMaxRows
        from queuecore_spark import _options
        from queuecore_spark._source import StreamReader

        topic = api.create_topic(partitions=2)
        api.publish(topic, [{"data": i, "partition": i % 2} for i in range(100)])  # 50 per partition
        opts = _options.parse(
            {"topic": topic, "apiKey": key, "baseUrl": qc_server.url, "startingOffsets": "earliest"}
        )
        reader = StreamReader(opts, None)  # type: ignore[arg-type]
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        api.publish(topic, [{"data": i, "partition": i % 2} for i in range(40)])
        assert api.http.patch(f"/v1/topics/{topic}", json={"partitions": 3}).status_code == 200
        api.publish(topic, [{"data": i, "partition": 2} for i in range(5)])
        offsets = [start]
        while True:
            end = reader.latestOffset(offsets[-1], ReadMaxRows(30))
            if end == offsets[-1]:
                break
            offsets.append(end)
        assert offsets[-1] == {"0": 50, "1": 50, "2": 0}
        assert [sum(o.values()) for o in offsets] == [0, 30, 60, 90, 100]
