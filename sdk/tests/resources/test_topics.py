"""``client.topics`` against a real server, sync and async."""

from __future__ import annotations

from datetime import datetime, timezone

import httpx
import pytest
from sdk_support import unique

import queuecore

pytestmark = pytest.mark.integration


class TestCreate:
    def test_server_defaults(self, client):
        name = unique("create")
        topic = client.topics.create(name)
        assert topic.id.startswith("top_")
        assert (
            topic.name,
            topic.partitions,
            topic.retention,
            topic.delivery,
            topic.replicas,
            topic.status,
        ) == (name, 3, "7d", "exactly-once", 1, "active")
        assert topic.created_at.tzinfo is not None
        assert abs((datetime.now(timezone.utc) - topic.created_at).total_seconds()) < 120
        assert topic.request_id and topic.request_id.startswith("req_")

    def test_every_option(self, client):
        name = unique("create")
        topic = client.topics.create(
            name, retention="30d", delivery="at-least-once", partitions=6, replicas=1
        )
        assert (topic.retention, topic.delivery, topic.partitions, topic.replicas) == (
            "30d",
            "at-least-once",
            6,
            1,
        )
        assert client.topics.describe(name).replicas == 1
        assert [t.replicas for t in client.topics.list() if t.name == name] == [1]

    @pytest.mark.parametrize("replicas", [3, 5])
    def test_more_replicas_than_the_local_engine_keeps(self, client, replicas):
        name = unique("replicas")
        with pytest.raises(queuecore.BadRequestError) as info:
            client.topics.create(name, replicas=replicas)
        assert info.value.code == "INVALID_REQUEST"
        assert "keeps one copy" in info.value.message
        assert [d["field"] for d in info.value.details] == ["replicas"]
        with pytest.raises(queuecore.NotFoundError):
            client.topics.describe(name)

    def test_a_taken_name_is_a_conflict(self, client, topic):
        with pytest.raises(queuecore.ConflictError) as info:
            client.topics.create(topic)
        assert info.value.code == "TOPIC_ALREADY_EXISTS"
        assert info.value.status == 409
        assert info.value.request_id.startswith("req_")
        assert str(info.value).startswith(f"Request {info.value.request_id}: 409 TOPIC_ALREADY_EXISTS")

    @pytest.mark.parametrize(
        "options",
        [
            {"partitions": 0},
            {"partitions": 257},
            {"retention": "2y"},
            {"delivery": "at-most-once"},
            {"replicas": 2},
        ],
    )
    def test_invalid_values(self, client, options):
        with pytest.raises(queuecore.BadRequestError) as info:
            client.topics.create(unique("bad"), **options)
        assert info.value.code == "INVALID_REQUEST"
        assert info.value.details

    def test_invalid_name(self, client):
        with pytest.raises(queuecore.BadRequestError):
            client.topics.create("Not A Valid Name")


class TestList:
    def test_walks_every_page_lazily(self, server):
        prefix = unique("list")
        sent: list[httpx.Request] = []
        http = httpx.Client(event_hooks={"request": [sent.append]})
        with queuecore.QueueCore(api_key=server.key, base_url=server.url, http_client=http) as client:
            names = [f"{prefix}.{i}" for i in range(5)]
            for name in names:
                client.topics.create(name, partitions=1)
            sent.clear()
            listing = client.topics.list(limit=2)
            assert len(sent) == 1 and len(listing.data) == 2
            seen = [t.name for t in listing]
            assert len(sent) >= 3  # at least the pages holding our five
            assert [n for n in seen if n.startswith(prefix)] == names
            assert seen == sorted(seen)
            assert len(seen) == len(set(seen))
        http.close()

    def test_pages_by_hand(self, client, topic):
        client.topics.create(unique("pages"))  # with the fixture's topic, at least two: a second page
        page = client.topics.list(limit=1)
        assert len(page.data) == 1
        assert page.has_next_page() and page.next_cursor is not None
        pages = list(page.iter_pages())
        assert sum(len(p.data) for p in pages) == len(list(client.topics.list()))


class TestDescribe:
    def test_partition_details(self, client):
        name = unique("describe")
        client.topics.create(name, partitions=4)
        detail = client.topics.describe(name)
        assert isinstance(detail, queuecore.TopicDetail)
        assert detail.name == name and detail.partitions == 4
        assert [p.id for p in detail.partition_details] == [0, 1, 2, 3]
        assert all(p.earliest_offset == p.latest_offset == p.messages == 0 for p in detail.partition_details)

    def test_offsets_move_with_publishes(self, client, topic):
        for i in range(3):
            client.publish(topic, {"n": i}, partition=1)
        part = client.topics.describe(topic).partition_details[1]
        assert (part.earliest_offset, part.latest_offset, part.messages) == (0, 3, 3)
        assert part.bytes > 0

    def test_missing(self, client):
        with pytest.raises(queuecore.NotFoundError) as info:
            client.topics.describe("user.events")
        assert info.value.code == "TOPIC_NOT_FOUND"
        assert info.value.message == "The topic 'user.events' does not exist in the current environment."


class TestUpdate:
    def test_increase_partitions_and_change_retention(self, client, topic):
        updated = client.topics.update(topic, partitions=5, retention="12h")
        assert (updated.partitions, updated.retention) == (5, "12h")
        assert len(client.topics.describe(topic).partition_details) == 5

    def test_a_decrease_is_refused(self, client, topic):
        with pytest.raises(queuecore.BadRequestError):
            client.topics.update(topic, partitions=1)

    def test_missing(self, client):
        with pytest.raises(queuecore.NotFoundError):
            client.topics.update(unique("missing"), retention="1d")


class TestDelete:
    def test_delete(self, client, topic):
        client.publish(topic, "bye")
        assert client.topics.delete(topic) is None
        with pytest.raises(queuecore.NotFoundError):
            client.topics.describe(topic)
        with pytest.raises(queuecore.NotFoundError):
            client.topics.delete(topic)

    def test_a_recreated_topic_starts_empty(self, client, topic):
        client.publish(topic, 1, partition=0)
        client.topics.delete(topic)
        client.topics.create(topic, partitions=1)
        assert client.topics.describe(topic).partition_details[0].latest_offset == 0


class TestAsync:
    async def test_lifecycle(self, async_client):
        name = unique("async")
        created = await async_client.topics.create(name, retention="1d", partitions=2, replicas=1)
        assert (created.partitions, created.replicas) == (2, 1)
        with pytest.raises(queuecore.ConflictError):
            await async_client.topics.create(name)
        detail = await async_client.topics.describe(name)
        assert len(detail.partition_details) == 2
        updated = await async_client.topics.update(name, partitions=3)
        assert updated.partitions == 3
        assert await async_client.topics.delete(name) is None
        with pytest.raises(queuecore.NotFoundError):
            await async_client.topics.describe(name)

    async def test_list(self, async_client):
        prefix = unique("alist")
        for i in range(3):
            await async_client.topics.create(f"{prefix}.{i}", partitions=1)
        every = [t.name async for t in async_client.topics.list(limit=2)]
        assert [n for n in every if n.startswith(prefix)] == [f"{prefix}.{i}" for i in range(3)]
        first = await async_client.topics.list(limit=2)
        assert isinstance(first, queuecore.AsyncCursorPage) and len(first.data) == 2
        assert [t.name async for t in first] == every
