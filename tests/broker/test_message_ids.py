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
