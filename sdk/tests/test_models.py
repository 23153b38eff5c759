"""Answer models: snake_case attributes over camelCase wire fields, and back."""

from __future__ import annotations

from datetime import datetime, timezone

import pydantic
import pytest

import queuecore
from queuecore.types import (
    BatchResult,
    Health,
    Message,
    MessagePage,
    PublishResult,
    Replica,
    Topic,
    TopicDetail,
)

TOPIC = {
    "id": "top_8xk2m9",
    "name": "order.events",
    "partitions": 2,
    "retention": "30d",
    "delivery": "exactly-once",
    "replicas": 3,
    "status": "active",
    "createdAt": "2026-03-28T10:42:18.003Z",
}


def test_topic_detail_round_trip():
    wire = {
        **TOPIC,
        "partitionDetails": [
            {
                "id": 0,
                "earliestOffset": 0,
                "latestOffset": 12,
                "messages": 12,
                "bytes": 2048,
                "replicas": [
                    {"server": "n1", "leader": True, "current": True, "zone": "zone-b", "lag": 0},
                    {"server": "n0", "leader": False, "current": False, "zone": "zone-a", "lag": 7},
                    {"server": "n2", "leader": False, "current": False, "zone": None, "lag": None},
                ],
            },
            {"id": 1, "earliestOffset": 3, "latestOffset": 3, "messages": 0, "bytes": 0, "replicas": []},
        ],
    }
    detail = TopicDetail.model_validate(wire)
    assert isinstance(detail, Topic)
    assert detail.created_at == datetime(2026, 3, 28, 10, 42, 18, 3000, tzinfo=timezone.utc)
    assert detail.partition_details[0].latest_offset == 12
    assert detail.partition_details[1].earliest_offset == 3
    assert [(r.server, r.zone, r.leader, r.current, r.lag) for r in detail.partition_details[0].replicas] == [
        ("n1", "zone-b", True, True, 0),
        ("n0", "zone-a", False, False, 7),
        ("n2", None, False, False, None),
    ]
    assert detail.model_dump()["partition_details"][0]["earliest_offset"] == 0
    assert detail.to_wire() == wire


def test_a_replica_from_a_server_that_does_not_say_zones():
    # Servers before zone and lag answered {server, leader, current}: the SDK reads them as unknown.
    replica = Replica.model_validate({"server": "n1", "leader": True, "current": True})
    assert (replica.zone, replica.lag) == (None, None)


def test_publish_result():
    wire = {
        "id": "msg_1",
        "offset": 14829,
        "partition": 2,
        "timestamp": "2026-03-28T10:42:18.003Z",
        "latency": 12,
        "durability": "fsync",
    }
    result = PublishResult.model_validate(wire)
    assert (result.offset, result.partition, result.latency, result.replayed) == (14829, 2, 12, False)
    assert result.timestamp.tzinfo is not None
    dumped = result.model_dump(mode="json")
    assert dumped["timestamp"] == "2026-03-28T10:42:18.003Z"


def test_batch_result():
    wire = {
        "count": 2,
        "latency": 18,
        "durability": "fsync",
        "messages": [
            {"id": "msg_1", "offset": 0, "partition": 0, "timestamp": "2026-03-28T10:42:18.003Z"},
            {
                "id": "msg_2",
                "offset": 1,
                "partition": 0,
                "timestamp": "2026-03-28T10:42:18.003Z",
                "replayed": True,
            },
        ],
    }
    result = BatchResult.model_validate(wire)
    assert result.count == 2 and result.latency == 18
    assert [m.replayed for m in result.messages] == [None, True]


def test_message_page_with_null_data_and_key():
    wire = {
        "data": [
            {
                "id": "msg_1",
                "topic": "order.events",
                "partition": 0,
                "offset": 5,
                "key": None,
                "headers": {},
                "data": None,
                "timestamp": "2026-03-28T10:42:18.003Z",
                "deliverAt": None,
                "expiresAt": None,
            }
        ],
        "nextOffset": 6,
        "earliestOffset": 0,
    }
    page = MessagePage.model_validate(wire)
    message = page.data[0]
    assert isinstance(message, Message)
    assert message.key is None and message.data is None and message.headers == {}
    assert (page.next_offset, page.earliest_offset) == (6, 0)
    assert page.to_wire() == wire


def test_health_checks_is_a_dict():
    health = Health.model_validate(
        {
            "status": "degraded",
            "checks": {"database": "ok", "redis": "down", "logEngine": "ok"},
            "version": "0.1.0",
        }
    )
    assert health.checks == {"database": "ok", "redis": "down", "logEngine": "ok"}
    assert health.ok


def test_replicas_is_read_and_a_server_without_it_means_one_copy():
    assert Topic.model_validate(TOPIC).replicas == 3
    older = {k: v for k, v in TOPIC.items() if k != "replicas"}
    assert Topic.model_validate(older).replicas == 1


def test_new_server_fields_are_kept():
    topic = Topic.model_validate({**TOPIC, "someNewField": 1})
    assert topic.model_extra == {"someNewField": 1}


def test_populate_by_python_name():
    topic = Topic(
        id="top_1",
        name="a",
        partitions=1,
        retention="7d",
        delivery="exactly-once",
        status="active",
        created_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    )
    assert topic.to_wire()["createdAt"] == "2026-01-01T00:00:00.000Z"


def test_batch_message_is_strict():
    message = queuecore.BatchMessage(
        data={"a": 1}, key="k", headers={"h": "v"}, partition=1, idempotency_key="i"
    )
    assert message.data == {"a": 1}
    with pytest.raises(pydantic.ValidationError, match="nope"):
        queuecore.BatchMessage(data=1, nope=2)  # type: ignore[call-arg]
