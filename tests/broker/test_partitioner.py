"""The partitioner agrees with Kafka's default partitioner on Kafka's own vectors."""

from __future__ import annotations

import pytest

from app.broker.partitioner import Partitioner, murmur2, partition_for_key

# org.apache.kafka.common.utils.UtilsTest#testMurmur2, plus the empty array.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"": 275646681,
}


class TestMurmur2:
    @pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items())
    def test_kafka_vectors(self, data, expected):
        assert murmur2(data) == expected

    def test_partition_uses_positive_hash(self):
        assert partition_for_key(b"foobar", 50) == 16


class TestPartitioner:
    def test_explicit_wins(self):
        assert Partitioner().choose(6, "user-1", 4) == 4

    def test_key_is_stable(self):
        p = Partitioner()
        assert {p.choose(6, "user-42", None) for _ in range(10)} == {partition_for_key(b"user-42", 6)}

    def test_keyless_spreads_evenly(self):
        p = Partitioner()
        counts = [0] * 4
        for _ in range(400):
            counts[p.choose(4, None, None)] += 1
        assert counts == [100, 100, 100, 100]
