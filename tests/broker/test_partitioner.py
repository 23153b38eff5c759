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


class TestAssign:
    def test_batch_assignment_matches_one_by_one(self):
        from app.broker.publishing import OutgoingMessage

        batch = [
            OutgoingMessage(b"1", None, None, None, None),
            OutgoingMessage(b"2", "user-42", None, None, None),
            OutgoingMessage(b"3", None, None, 5, None),
            OutgoingMessage(b"4", None, None, None, None),
            OutgoingMessage(b"5", None, None, None, None),
        ]
        one_by_one, batched = Partitioner(), Partitioner()
        for _ in range(3):  # across calls too: the round robin carries on where the last one stopped
            expected = [one_by_one.choose(6, m.key, m.partition) for m in batch]
            assert batched.assign(6, batch) == expected
        # Only keyless messages move the round robin: 3 per batch, so the third batch starts at 6 % 6.
        assert expected == [0, partition_for_key(b"user-42", 6), 5, 1, 2]

    def test_keyless_messages_spread_evenly_whatever_keyed_ones_mix_in(self):
        from app.broker.publishing import OutgoingMessage

        keyless = OutgoingMessage(b"k", None, None, None, None)
        keyed = OutgoingMessage(b"x", "user-42", None, None, None)
        counts = [0] * 4
        p = Partitioner()
        batch = [keyless, keyed, keyless]
        for _ in range(100):
            for partition, m in zip(p.assign(4, batch), batch, strict=True):
                if m is keyless:
                    counts[partition] += 1
        assert counts == [50, 50, 50, 50]
