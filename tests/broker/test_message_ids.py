"""Message ids round-trip to (topic, partition, offset); anything else is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.broker import message_ids
from app.broker.errors import InvalidRequest
from app.kit.ids import new_id


class TestMessageIds:
    @given(partition=st.integers(0, 255), offset=st.integers(0, 2**63 - 1))
    def test_round_trip(self, partition, offset):
        topic = new_id("top")
        decoded = message_ids.decode(message_ids.encode(topic, partition, offset))
        assert decoded == message_ids.MessageLocation(topic, partition, offset)

    def test_leading_zero_topic_ids_survive(self):
        topic = "top_00000000000000ab"
        assert message_ids.decode(message_ids.encode(topic, 1, 2)).topic_id == topic

    @pytest.mark.parametrize(
        "bad", ["", "msg_", "top_abc", "msg_!!!!", "msg_" + "a" * 70, "msg_aaaa", "batch"]
    )
    def test_malformed_is_invalid_request(self, bad):
        with pytest.raises(InvalidRequest):
            message_ids.decode(bad)


class TestRuns:
    @pytest.mark.parametrize(
        "topic_id", ["top_1a2b3c4d5e6f7g8h", "top_0000000000000001", "top_zzzzzzzzzzzzzzzz"]
    )
    def test_a_run_is_each_offsets_own_id(self, topic_id):
        # Across the varint's 7-bit boundaries, partitions of every varint length, and runs cut anywhere:
        # the run's one base64 call over zero-padded ids must give what ``encode`` gives each offset.
        for partition in (0, 1, 127, 128, 70_000):
            for first in (0, 1, 100, 127, 128, 255, 256, 16_383, 16_384, 2**21 - 5, 2**28 + 3, 10**12):
                for count in (1, 2, 128, 130, 300):
                    each = [
                        message_ids.encode(topic_id, partition, o).encode()
                        for o in range(first, first + count)
                    ]
                    assert message_ids.encode_run(topic_id, partition, first, count) == each, (
                        partition,
                        first,
                        count,
                    )
                    laid, lengths = message_ids.encode_run_column(topic_id, partition, first, count)
                    assert (laid, list(lengths)) == (b"".join(each), [len(i) for i in each])
