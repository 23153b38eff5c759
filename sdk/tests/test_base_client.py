"""The request loop over ``httpx.MockTransport``: what is retried, how long it waits, what a publish's
idempotency key does across retries, and which exception a status becomes."""

from __future__ import annotations

import json
import logging
import random
import re
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import httpx
import pytest
from sdk_support import envelope, json_response, sequence

import queuecore
from queuecore._constants import INITIAL_RETRY_DELAY, MAX_RETRY_AFTER, MAX_RETRY_DELAY

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
    "partitions": 3,
    "retention": "7d",
    "delivery": "exactly-once",
    "status": "active",
    "createdAt": "2026-03-28T10:42:18.003Z",
}
PAGE = {"data": [TOPIC], "nextCursor": None}
HEALTH_DOWN = {
    "status": "down",
    "checks": {"database": "ok", "redis": "embedded", "logEngine": "down"},
    "version": "0",
}


def limited(retry_after: str | None = "1") -> httpx.Response:
    headers = {"RateLimit-Limit": "10", "RateLimit-Remaining": "0", "RateLimit-Reset": "1"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return json_response(429, envelope(429, "RATE_LIMIT_EXCEEDED"), headers)


def unavailable() -> httpx.Response:
    return json_response(503, envelope(503, "SERVICE_UNAVAILABLE"))


@pytest.fixture
def no_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(random, "random", lambda: 0.0)


class TestRetryAfter:
    def test_429_waits_what_retry_after_says(self, mock_client, recorder):
        client = mock_client(sequence(limited("3"), json_response(200, PAGE)))
        assert [t.name for t in client.topics.list()] == ["order.events"]
        assert recorder.sleeps == [3.0]
        assert len(recorder.requests) == 2

    def test_retry_after_is_capped(self, mock_client, recorder):
        client = mock_client(sequence(limited("3600"), json_response(200, PAGE)))
        list(client.topics.list())
        assert recorder.sleeps == [MAX_RETRY_AFTER]

    def test_retry_after_as_an_http_date(self, mock_client, recorder):
        when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=5), usegmt=True)
        client = mock_client(sequence(limited(when), json_response(200, PAGE)))
        list(client.topics.list())
        assert 3.0 <= recorder.sleeps[0] <= 5.0

    def test_retry_after_decimal_and_zero(self, mock_client, recorder):
        client = mock_client(sequence(limited("0.25"), limited("0"), json_response(200, PAGE)))
        list(client.topics.list())
        assert recorder.sleeps == [0.25, 0.0]

    def test_429_without_retry_after_backs_off(self, mock_client, recorder, no_jitter):
        client = mock_client(sequence(limited(None), json_response(200, PAGE)))
        list(client.topics.list())
        assert recorder.sleeps == [INITIAL_RETRY_DELAY]

    def test_503_honours_retry_after_too(self, mock_client, recorder):
        busy = json_response(503, envelope(503, "SERVICE_UNAVAILABLE"), {"Retry-After": "2"})
        client = mock_client(sequence(busy, json_response(200, PAGE)))
        list(client.topics.list())
        assert recorder.sleeps == [2.0]

    def test_rate_limit_error_after_the_retries(self, mock_client, recorder):
        client = mock_client(sequence(limited("1"), limited("1"), limited("2")))
        with pytest.raises(queuecore.RateLimitError) as info:
            list(client.topics.list())
        assert info.value.retry_after == 2.0
        assert info.value.code == "RATE_LIMIT_EXCEEDED"
        assert info.value.status == 429
        assert recorder.sleeps == [1.0, 1.0]
        assert len(recorder.requests) == 3


class TestBackoff:
    def test_exponential_then_capped(self, mock_client, recorder, no_jitter):
        client = mock_client(sequence(*[unavailable() for _ in range(7)]), max_retries=6)
        with pytest.raises(queuecore.ServiceUnavailableError):
            client.topics.describe("order.events")
        assert recorder.sleeps == [0.5, 1.0, 2.0, 4.0, MAX_RETRY_DELAY, MAX_RETRY_DELAY]
        assert len(recorder.requests) == 7

    def test_jitter_shortens_by_at_most_a_quarter(self, mock_client, recorder, monkeypatch):
        monkeypatch.setattr(random, "random", lambda: 1.0)
        client = mock_client(sequence(unavailable(), unavailable(), json_response(200, PAGE)))
        list(client.topics.list())
        assert recorder.sleeps == [0.375, 0.75]

    def test_jitter_is_random(self, mock_client, recorder):
        client = mock_client(sequence(*[unavailable() for _ in range(3)]))
        with pytest.raises(queuecore.ServiceUnavailableError):
            client.topics.describe("x")
        assert 0.375 <= recorder.sleeps[0] <= 0.5
        assert 0.75 <= recorder.sleeps[1] <= 1.0

    def test_max_retries_zero_never_retries(self, mock_client, recorder):
        client = mock_client(sequence(unavailable()), max_retries=0)
        with pytest.raises(queuecore.ServiceUnavailableError):
            list(client.topics.list())
        assert recorder.sleeps == []
        assert len(recorder.requests) == 1

    def test_with_options_changes_the_budget(self, mock_client, recorder):
        client = mock_client(sequence(*[unavailable() for _ in range(5)], json_response(200, PAGE)))
        copy = client.with_options(max_retries=5)
        copy._sleep = recorder.sleeps.append
        assert len(list(copy.topics.list())) == 1
        assert len(recorder.sleeps) == 5

    def test_negative_max_retries_is_refused(self):
        with pytest.raises(ValueError):
            queuecore.QueueCore(api_key="k", max_retries=-1)


class TestWhatIsRetried:
    @pytest.mark.parametrize("status", [429, 502, 503, 504])
    def test_retried(self, mock_client, recorder, status):
        first = json_response(status, envelope(status, "X"), {"Retry-After": "0"})
        client = mock_client(sequence(first, json_response(200, PAGE)))
        assert len(list(client.topics.list())) == 1
        assert len(recorder.requests) == 2

    @pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 409, 413, 422, 500])
    def test_not_retried(self, mock_client, recorder, status):
        client = mock_client(sequence(json_response(status, envelope(status, "X"))))
        with pytest.raises(queuecore.APIStatusError) as info:
            client.topics.create("order.events")
        assert info.value.status == status
        assert len(recorder.requests) == 1
        assert recorder.sleeps == []

    def test_connection_errors_are_retried(self, mock_client, recorder):
        client = mock_client(
            sequence(
                httpx.ConnectError("refused"), httpx.RemoteProtocolError("eof"), json_response(200, PAGE)
            )
        )
        assert len(list(client.topics.list())) == 1
        assert len(recorder.requests) == 3
        assert len(recorder.sleeps) == 2

    def test_connection_error_after_the_retries(self, mock_client, recorder):
        client = mock_client(sequence(*[httpx.ConnectError("refused") for _ in range(3)]))
        with pytest.raises(queuecore.APIConnectionError) as info:
            client.topics.describe("x")
        assert not isinstance(info.value, queuecore.APITimeoutError)
        assert info.value.status is None and info.value.code is None
        assert len(recorder.requests) == 3

    def test_timeouts_are_retried_then_raised(self, mock_client, recorder):
        client = mock_client(sequence(*[httpx.ReadTimeout("slow") for _ in range(3)]))
        with pytest.raises(queuecore.APITimeoutError):
            client.topics.describe("x")
        assert len(recorder.requests) == 3

    def test_a_retry_is_logged(self, mock_client, caplog):
        client = mock_client(sequence(unavailable(), json_response(200, PAGE)))
        with caplog.at_level(logging.INFO, logger="queuecore"):
            list(client.topics.list())
        assert any("Retrying GET /v1/topics" in r.getMessage() for r in caplog.records)

    def test_custom_logger(self, mock_client, caplog):
        logger = logging.getLogger("my.app.queuecore")
        client = mock_client(sequence(unavailable(), json_response(200, PAGE)), logger=logger)
        with caplog.at_level(logging.INFO, logger="my.app.queuecore"):
            list(client.topics.list())
        assert any(r.name == "my.app.queuecore" for r in caplog.records)


class TestIdempotencyKey:
    def test_one_key_across_retries(self, mock_client, recorder):
        client = mock_client(
            sequence(
                unavailable(),
                httpx.ConnectError("refused"),
                httpx.ReadTimeout("slow"),
                json_response(201, PUBLISHED),
            ),
            max_retries=3,
        )
        client.publish("order.events", {"a": 1})
        keys = [r.headers["Idempotency-Key"] for r in recorder.requests]
        assert len(keys) == 4
        assert len(set(keys)) == 1
        assert keys[0].startswith("qc-py-")
        bodies = {r.content for r in recorder.requests}
        assert len(bodies) == 1

    def test_each_publish_gets_its_own_key(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(201, PUBLISHED))
        client.publish("order.events", 1)
        client.publish("order.events", 1)
        keys = [r.headers["Idempotency-Key"] for r in recorder.requests]
        assert keys[0] != keys[1]

    def test_a_given_key_is_sent_as_is(self, mock_client, recorder):
        client = mock_client(sequence(unavailable(), json_response(201, PUBLISHED)))
        client.publish("order.events", 1, idempotency_key="order-ord_92jf8x")
        assert [r.headers["Idempotency-Key"] for r in recorder.requests] == ["order-ord_92jf8x"] * 2

    def test_replayed_header_sets_replayed(self, mock_client):
        client = mock_client(lambda request: json_response(201, PUBLISHED, {"Idempotent-Replayed": "true"}))
        assert client.publish("order.events", 1).replayed is True
        client = mock_client(lambda request: json_response(201, PUBLISHED))
        assert client.publish("order.events", 1).replayed is False

    def test_batch_items_keep_their_keys_across_retries(self, mock_client, recorder):
        answer = {"count": 3, "latency": 1, "durability": "fsync", "messages": [{**PUBLISHED}] * 3}
        client = mock_client(
            sequence(httpx.ConnectError("refused"), unavailable(), json_response(201, answer))
        )
        client.publish_batch(
            "order.events",
            [{"orderId": "a"}, queuecore.BatchMessage(data="b", key="k", idempotency_key="mine"), None],
        )
        bodies = [json.loads(r.content) for r in recorder.requests]
        assert bodies[0] == bodies[1] == bodies[2]
        items = bodies[0]["messages"]
        assert items[0]["data"] == {"orderId": "a"}
        assert items[0]["idempotencyKey"].startswith("qc-py-")
        assert items[1] == {"data": "b", "key": "k", "idempotencyKey": "mine"}
        assert items[2]["data"] is None
        assert len({i["idempotencyKey"] for i in items}) == 3
        assert "Idempotency-Key" not in recorder.requests[0].headers

    def test_reads_carry_no_key(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(200, PAGE))
        list(client.topics.list())
        assert "Idempotency-Key" not in recorder.requests[0].headers


class TestAsyncLoop:
    async def test_retries_with_the_same_key(self, mock_async_client, recorder):
        client = mock_async_client(
            sequence(limited("1"), httpx.ConnectError("x"), json_response(201, PUBLISHED))
        )
        result = await client.publish("order.events", {"a": 1})
        assert result.offset == 0
        assert recorder.sleeps[0] == 1.0
        assert len({r.headers["Idempotency-Key"] for r in recorder.requests}) == 1
        assert len(recorder.requests) == 3

    async def test_not_retried_and_mapped(self, mock_async_client, recorder):
        client = mock_async_client(sequence(json_response(404, envelope(404, "TOPIC_NOT_FOUND"))))
        with pytest.raises(queuecore.NotFoundError):
            await client.topics.describe("x")
        assert len(recorder.requests) == 1

    async def test_timeouts(self, mock_async_client, recorder):
        client = mock_async_client(sequence(*[httpx.ConnectTimeout("slow") for _ in range(3)]))
        with pytest.raises(queuecore.APITimeoutError):
            await client.topics.describe("x")
        assert len(recorder.sleeps) == 2


class TestHealth:
    def test_503_with_a_health_body_is_an_answer(self, mock_client, recorder):
        client = mock_client(sequence(json_response(503, HEALTH_DOWN)))
        health = client.health()
        assert health.status == "down" and not health.ok
        assert health.checks["logEngine"] == "down"
        assert len(recorder.requests) == 1
        assert "Authorization" not in recorder.requests[0].headers

    def test_503_envelope_is_retried_then_answered_down(self, mock_client, recorder):
        client = mock_client(sequence(unavailable(), unavailable(), unavailable()))
        health = client.health()  # never raises for a service that is down
        assert (health.status, health.ok, health.checks) == ("down", False, {})
        assert health.error is not None and "SERVICE_UNAVAILABLE" in health.error
        assert len(recorder.requests) == 3

    async def test_timeouts_answer_down(self, mock_async_client, recorder):
        client = mock_async_client(sequence(*[httpx.ConnectTimeout("slow") for _ in range(3)]))
        health = await client.health()
        assert health.status == "down" and re.fullmatch(r"Request to .+:\d+ timed out\.", health.error or "")

    def test_a_proxy_page_answers_down(self, mock_client, recorder):
        page = httpx.Response(200, text="<html>maintenance</html>", headers={"content-type": "text/html"})
        health = mock_client(sequence(page)).health()
        assert health.status == "down" and health.error

    async def test_async(self, mock_async_client):
        client = mock_async_client(sequence(json_response(200, {**HEALTH_DOWN, "status": "ok"})))
        health = await client.health()
        assert health.ok and isinstance(health.checks, dict)


class TestRequests:
    def test_auth_and_user_agent(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(200, PAGE))
        list(client.topics.list())
        request = recorder.requests[0]
        assert request.headers["Authorization"] == "Bearer pq_test_sk_unit"
        assert request.headers["User-Agent"] == f"queuecore-python/{queuecore.__version__}"
        assert request.headers["Accept"] == "application/json"

    def test_default_headers(self, mock_client, recorder):
        client = mock_client(
            lambda request: json_response(200, PAGE), default_headers={"X-Request-Id": "mine-1"}
        )
        list(client.topics.list())
        assert recorder.requests[0].headers["X-Request-Id"] == "mine-1"

    def test_nan_is_refused_before_sending(self, mock_client, recorder):
        client = mock_client(lambda request: json_response(201, PUBLISHED))
        with pytest.raises(queuecore.QueueCoreError):
            client.publish("t", float("nan"))
        assert recorder.requests == []

    def test_a_2xx_that_is_not_the_promised_shape(self, mock_client):
        client = mock_client(lambda request: httpx.Response(201, text="<html>proxy</html>"))
        with pytest.raises(queuecore.APIResponseValidationError):
            client.publish("t", 1)
        client = mock_client(lambda request: json_response(200, {"nope": 1}))
        with pytest.raises(queuecore.APIResponseValidationError):
            client.topics.describe("t")
