"""A message's record layout (headers carry the user headers and the idempotency key) and its rendering:
the stored ``data`` bytes are spliced into the answer as they are."""

from __future__ import annotations

import orjson
import pytest

from app.broker import message_ids, timing
from app.broker.messages import decode_headers, encode_headers, render_message
from app.broker.topics import TopicRef
from app.stores.log.protocol import Record

TOPIC = "top_0000000000render0"[:20]
REF = TopicRef(TOPIC, "orders", 3, "exactly-once", message_ids.topic_prefix(TOPIC), 1)


class TestHeaders:
    def test_neither_headers_nor_key_store_nothing(self):
        assert encode_headers(None, None) is None
        assert decode_headers(None) == ({}, None)
        assert decode_headers(b"") == ({}, None)

    @pytest.mark.parametrize(
        ("headers", "key"), [({"a": "b"}, None), (None, "idem-1"), ({"trace": "x", "n": "1"}, "idem-2")]
    )
    def test_what_is_encoded_decodes_back(self, headers, key):
        assert decode_headers(encode_headers(headers, key)) == (headers or {}, key)


class TestRender:
    def test_the_wire_shape_with_data_spliced_in_unparsed(self):
        # Key order and spacing of the stored data survive: it is not parsed and re-encoded.
        record = Record(
            7, 1_700_000_000_123, b'{"z": 1, "a": [1, 2]}', b"user-1", encode_headers({"h": "v"}, "k")
        )
        rendered = render_message(REF.name, REF, REF.id, 2, record)
        assert rendered.endswith(b',"data":{"z": 1, "a": [1, 2]}}')
        assert orjson.loads(rendered) == {
            "id": message_ids.encode(TOPIC, 2, 7),
            "topic": "orders",
            "partition": 2,
            "offset": 7,
            "key": "user-1",
            "headers": {"h": "v"},
            "timestamp": "2023-11-14T22:13:20.123Z",
            "deliverAt": None,
            "expiresAt": None,
            "data": {"z": 1, "a": [1, 2]},
        }

    def test_a_timed_record_renders_its_due_time_and_expiry(self):
        headers = encode_headers({"h": "v"}, None, 1_700_000_060_000, 1_700_000_120_000)
        record = Record(7, 1_700_000_000_123, b"1", None, headers)
        rendered = orjson.loads(render_message(REF.name, REF, REF.id, 2, record))
        assert rendered["deliverAt"] == "2023-11-14T22:14:20.000Z"
        assert rendered["expiresAt"] == "2023-11-14T22:15:20.000Z"
        assert rendered["headers"] == {"h": "v"}
        # Only a due time or an expiry makes a record "timed"; headers alone do not.
        assert not timing.is_timed(encode_headers({"d": "x"}, "k"))
        assert timing.of_record(encode_headers({"d": "x"}, "k")) == (None, None)
        assert timing.of_record(encode_headers(None, None, None, 5)) == (None, 5)

    def test_extra_fields_and_a_given_id(self):
        record = Record(0, 0, b"null", None, None)
        rendered = orjson.loads(
            render_message("orders", None, TOPIC, 0, record, {"attempt": 2}, message_id="msg_given")
        )
        assert rendered["id"] == "msg_given" and rendered["attempt"] == 2
        assert (rendered["key"], rendered["headers"], rendered["data"]) == (None, {}, None)
