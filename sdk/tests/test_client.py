"""Client construction, configuration from the environment, lifecycle, and the requests calls make."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from sdk_support import json_response

import queuecore
from queuecore._constants import DEFAULT_BASE_URL

PUBLISHED = {
    "id": "msg_1",
    "offset": 0,
    "partition": 1,
    "timestamp": "2026-03-28T10:42:18.003Z",
    "latency": 3,
    "durability": "fsync",
}
TOPIC = {
    "id": "top_1",
    "name": "order.events",
    "partitions": 6,
    "retention": "30d",
    "delivery": "exactly-once",
    "replicas": 3,
    "status": "active",
    "createdAt": "2026-03-28T10:42:18.003Z",
}
PAGE = {
    "data": [],
    "nextOffset": 0,
    "earliestOffset": 0,
}


class TestConfiguration:
    def test_from_the_environment(self, monkeypatch):
        monkeypatch.setenv("QUEUECORE_API_KEY", "pq_test_sk_env")
        monkeypatch.setenv("QUEUECORE_BASE_URL", "http://example.test:9000/")
        client = queuecore.QueueCore()
        assert client.api_key == "pq_test_sk_env"
        assert client.base_url == "http://example.test:9000"
        client.close()

    def test_arguments_win(self, monkeypatch):
        monkeypatch.setenv("QUEUECORE_API_KEY", "pq_test_sk_env")
        monkeypatch.setenv("QUEUECORE_BASE_URL", "http://example.test:9000")
        client = queuecore.AsyncQueueCore(api_key="pq_test_sk_arg", base_url="http://other.test")
        assert (client.api_key, client.base_url) == ("pq_test_sk_arg", "http://other.test")

    def test_default_base_url(self, monkeypatch):
        monkeypatch.delenv("QUEUECORE_BASE_URL", raising=False)
        assert queuecore.QueueCore(api_key="k").base_url == DEFAULT_BASE_URL == "http://127.0.0.1:8080"

    @pytest.mark.parametrize("key", ["pq_test_sk_abc\n", "  pq_test_sk_abc\r\n", "\tpq_test_sk_abc "])
    def test_surrounding_whitespace_is_not_part_of_the_key(self, monkeypatch, key):
        monkeypatch.setenv("QUEUECORE_API_KEY", key)  # a key read from a file ends in a newline
        assert queuecore.QueueCore().api_key == "pq_test_sk_abc"
        assert queuecore.AsyncQueueCore(api_key=key).api_key == "pq_test_sk_abc"

    @pytest.mark.parametrize("key", ["pq_test_sk_a\nb", "pq_test sk", "pq_test_sk_\x00", "pq_tést", " \n "])
    def test_a_key_that_cannot_be_sent_is_refused_with_a_clear_message(self, key):
        with pytest.raises(queuecore.QueueCoreError) as refused:
            queuecore.QueueCore(api_key=key)
        assert "API key" in str(refused.value) and "Connection" not in str(refused.value)

    def test_region_sets_the_base_url_unless_one_is_given(self, monkeypatch):
        monkeypatch.delenv("QUEUECORE_BASE_URL", raising=False)
        assert queuecore.QueueCore(api_key="k", region="us-east-1").base_url == (
            "https://us-east-1.api.queuecore.cloud"
        )
        explicit = queuecore.QueueCore(api_key="k", region="us-east-1", base_url="http://127.0.0.1:1")
        assert explicit.base_url == "http://127.0.0.1:1"
        monkeypatch.setenv("QUEUECORE_BASE_URL", "http://env.test")
        assert queuecore.AsyncQueueCore(api_key="k", region="eu-west-1").base_url == "http://env.test"
        with pytest.raises(queuecore.QueueCoreError):
            queuecore.QueueCore(api_key="k", region="us east/1")

    def test_defaults(self):
        client = queuecore.QueueCore(api_key="k")
        assert client.max_retries == queuecore.DEFAULT_MAX_RETRIES == 2
        assert client.timeout == queuecore.DEFAULT_TIMEOUT

    def test_resources_are_cached(self):
        client = queuecore.QueueCore(api_key="k")
        assert client.topics is client.topics
        assert client.messages is client.messages


class TestLifecycle:
    def test_context_manager_closes_its_pool(self):
        with queuecore.QueueCore(api_key="k") as client:
            assert not client.is_closed()
        assert client.is_closed()

    async def test_async_context_manager_closes_its_pool(self):
        async with queuecore.AsyncQueueCore(api_key="k") as client:
            assert not client.is_closed()
        assert client.is_closed()

    def test_a_given_http_client_is_left_open(self):
        http = httpx.Client()
        with queuecore.QueueCore(api_key="k", http_client=http):
            pass
        assert not http.is_closed
        http.close()

    def test_with_options_shares_the_pool(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(201, PUBLISHED))
        copy = client.with_options(max_retries=7, timeout=3.0, api_key="pq_test_sk_other")
        assert copy.max_retries == 7 and copy.timeout == 3.0
        assert copy._client is client._client
        copy.publish("t", 1)
        assert recorder.requests[0].headers["Authorization"] == "Bearer pq_test_sk_other"
        assert recorder.requests[0].extensions["timeout"]["read"] == 3.0
        copy.close()
        assert not client.is_closed()

    def test_timeout_is_sent_per_request(self, mock_client, recorder):
        client = mock_client(
            lambda request: json_response(201, PUBLISHED), timeout=httpx.Timeout(7.0, connect=2.0)
        )
        client.publish("t", 1)
        assert recorder.requests[0].extensions["timeout"] == {
            "connect": 2.0,
            "read": 7.0,
            "write": 7.0,
            "pool": 7.0,
        }


class TestPublishRequests:
    def test_minimal_body(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(201, PUBLISHED))
        client.publish("order.events", None)
        request = recorder.requests[0]
        assert request.method == "POST"
        assert request.url == "http://queuecore.test/v1/topics/order.events/messages"
        assert json.loads(request.content) == {"data": None}
        assert request.headers["Content-Type"] == "application/json"

    def test_every_option(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(201, PUBLISHED))
        client.messages.publish("order.events", {"a": "é"}, key="k", headers={"h": "v"}, partition=2)
        assert json.loads(recorder.requests[0].content) == {
            "data": {"a": "é"},
            "key": "k",
            "headers": {"h": "v"},
            "partition": 2,
        }

    def test_batch_path(self, mock_client, recorder):
        answer = {"count": 1, "latency": 1, "durability": "fsync", "messages": [PUBLISHED]}
        client = mock_client(lambda request: json_response(201, answer))
        result = client.publish_batch("order.events", ({"n": i} for i in range(1)))
        assert result.count == 1
        assert recorder.requests[0].url.path == "/v1/topics/order.events/messages/batch"

    def test_a_batch_must_be_a_sequence_of_messages(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(500, {}))
        for wrong in ({"orderId": "ord_1"}, "abc", b"abc"):
            with pytest.raises(TypeError, match="publish_batch takes a list"):
                client.publish_batch("order.events", wrong)
        assert recorder.requests == []

    def test_names_are_quoted(self, mock_client, recorder):
        client = mock_client(
            lambda request: json_response(404, {"error": {"code": "NOT_FOUND", "message": "x"}})
        )
        with pytest.raises(queuecore.NotFoundError):
            client.messages.get("a/b", "msg_?x")
        assert recorder.requests[0].url.raw_path == b"/v1/topics/a%2Fb/messages/msg_%3Fx"


class TestReadRequests:
    def test_params(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(200, PAGE))
        client.messages.read("order.events", 2, from_offset=10, limit=5)
        request = recorder.requests[0]
        assert request.url.path == "/v1/topics/order.events/partitions/2/messages"
        assert dict(request.url.params) == {"fromOffset": "10", "limit": "5"}

    def test_from_timestamp_forms(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(200, PAGE))
        when = datetime(2026, 3, 28, 12, 42, 18, 3000, tzinfo=timezone(timedelta(hours=2)))
        client.messages.read("t", 0, from_timestamp=when)
        client.messages.read("t", 0, from_timestamp=1774694538003)
        client.messages.read("t", 0, from_timestamp="2026-03-28T10:42:18Z")
        sent = [r.url.params["fromTimestamp"] for r in recorder.requests]
        assert sent == ["2026-03-28T10:42:18.003Z", "1774694538003", "2026-03-28T10:42:18Z"]

    def test_nothing_optional_is_sent(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(200, PAGE))
        client.messages.read("t", 0)
        assert dict(recorder.requests[0].url.params) == {}


class TestTopicRequests:
    def test_create_sends_only_what_is_given(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(201, TOPIC))
        client.topics.create("order.events")
        created = client.topics.create(
            "order.events", retention="30d", delivery="exactly-once", partitions=6, replicas=3
        )
        assert json.loads(recorder.requests[0].content) == {"name": "order.events"}
        assert json.loads(recorder.requests[1].content) == {
            "name": "order.events",
            "retention": "30d",
            "delivery": "exactly-once",
            "partitions": 6,
            "replicas": 3,
        }
        assert created.replicas == 3

    async def test_async_create_sends_replicas(self, mock_async_client, recorder):
        client = mock_async_client(lambda request: json_response(201, TOPIC))
        created = await client.topics.create("order.events", replicas=5)
        assert json.loads(recorder.requests[0].content) == {"name": "order.events", "replicas": 5}
        assert created.replicas == 3  # as the server answered

    def test_update_and_delete(self, mock_client, recorder):
        def handle(request: httpx.Request) -> httpx.Response:
            if request.method == "DELETE":
                return httpx.Response(204)
            return json_response(200, TOPIC)

        client = mock_client(handle)
        client.topics.update("order.events", partitions=6)
        assert client.topics.delete("order.events") is None
        assert recorder.requests[0].method == "PATCH"
        assert json.loads(recorder.requests[0].content) == {"partitions": 6}
        assert recorder.requests[1].method == "DELETE"
        assert recorder.requests[1].content == b""


class TestHealthOfAnUnreachableServer:
    def test_sync_and_async_answer_down(self):
        from sdk_support import free_port

        url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        with queuecore.QueueCore(api_key="k", base_url=url, max_retries=0) as client:
            health = client.health()
        assert (health.status, health.ok, health.checks, health.version) == ("down", False, {}, "")
        assert health.error and "Connection" in health.error

        async def ask() -> queuecore.Health:
            async with queuecore.AsyncQueueCore(api_key="k", base_url=url, max_retries=0) as client:
                return await client.health()

        import asyncio

        assert asyncio.run(ask()).status == "down"
