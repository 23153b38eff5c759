"""What the three SDKs share (sdk/README.md's parity table), in Python: the aligned error names and their
deprecated aliases, the rate-limit state (draft structured fields, else the older ones), raw responses,
and the consumer's ``"rebalance"`` event and ``AckError``s."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import warnings

import httpx
import pytest
from sdk_support import envelope, json_response, sequence, unique

import queuecore
from queuecore._ratelimit import parse_rate_limit

# -- names -------------------------------------------------------------------------------------------------


def test_bad_request_error_is_the_400_and_validation_error_its_deprecated_alias(mock_client):
    client = mock_client(sequence(json_response(400, envelope(400, "INVALID_REQUEST"))))
    with pytest.raises(queuecore.BadRequestError) as info:
        client.topics.describe("x")
    with pytest.warns(DeprecationWarning, match="BadRequestError"):
        old = queuecore.ValidationError
    assert old is queuecore.BadRequestError
    assert isinstance(info.value, old)
    with pytest.warns(DeprecationWarning):
        from queuecore import ValidationError  # noqa: F401 — the old import keeps working
    assert "ValidationError" not in queuecore.__all__


def test_ack_error_carries_id_code_and_action():
    err = queuecore.AckError("msg_1", "ACK_EXPIRED", "nack")
    assert isinstance(err, queuecore.QueueCoreError) and not isinstance(err, queuecore.APIError)
    assert (err.message_id, err.code, err.action) == ("msg_1", "ACK_EXPIRED", "nack")
    assert str(err) == "The nack of msg_1 failed: ACK_EXPIRED"


# -- rate-limit state --------------------------------------------------------------------------------------

DRAFT = {
    "RateLimit-Policy": '"publish";q=100;w=1',
    "RateLimit": '"publish";r=37;t=1',
    "RateLimit-Limit": "999",
    "RateLimit-Remaining": "998",
    "RateLimit-Reset": "9",
}


def test_structured_fields_win_over_the_older_ones():
    state = parse_rate_limit(httpx.Headers(DRAFT))
    assert state == queuecore.RateLimit(policy="publish", limit=100, remaining=37, reset=1.0, window=1.0)


def test_the_policy_is_matched_by_name_among_several():
    headers = httpx.Headers(
        {"RateLimit-Policy": '"admin";q=10;w=1, "publish";q=100;w=1', "RateLimit": '"publish";r=5;t=0'}
    )
    assert parse_rate_limit(headers) == queuecore.RateLimit("publish", 100, 5, 0.0, 1.0)


def test_older_fields_when_the_structured_ones_are_missing():
    headers = httpx.Headers({"RateLimit-Limit": "100", "RateLimit-Remaining": "0", "RateLimit-Reset": "1"})
    assert parse_rate_limit(headers) == queuecore.RateLimit(None, 100, 0, 1.0, None)


def test_no_rate_limit_fields_no_state():
    assert parse_rate_limit(httpx.Headers({"X-Request-Id": "req_1"})) is None


def test_garbage_values_are_left_out():
    headers = httpx.Headers({"RateLimit": '"publish";r=lots;t=-1', "RateLimit-Policy": '"publish";q=;w=x'})
    assert parse_rate_limit(headers) == queuecore.RateLimit("publish", None, None, None, None)


def test_rate_limit_error_and_client_carry_the_last_state(mock_client):
    refused = json_response(429, envelope(429, "RATE_LIMIT_EXCEEDED"), {**DRAFT, "Retry-After": "1"})
    client = mock_client(sequence(refused), max_retries=0)
    assert client.rate_limit is None
    with pytest.raises(queuecore.RateLimitError) as info:
        client.topics.describe("x")
    assert info.value.rate_limit == queuecore.RateLimit("publish", 100, 37, 1.0, 1.0)
    assert info.value.retry_after == 1.0
    assert client.rate_limit == info.value.rate_limit
    assert client.with_options(max_retries=1).rate_limit == info.value.rate_limit  # shared with copies


def test_with_options_adds_headers_for_the_calls_made_through_it(mock_client, recorder):
    ok = {
        "id": "top_1",
        "name": "x",
        "partitions": 1,
        "retention": "7d",
        "delivery": "exactly-once",
        "replicas": 1,
        "status": "active",
        "createdAt": "2026-03-28T10:00:00Z",
        "partitionDetails": [],
    }
    client = mock_client(sequence(json_response(200, ok), json_response(200, ok)), default_headers={"A": "1"})
    client.with_options(default_headers={"X-Request-Id": "req-per-call"}).topics.describe("x")
    client.topics.describe("x")
    first, second = recorder.requests
    assert first.headers["x-request-id"] == "req-per-call" and first.headers["a"] == "1"
    assert "x-request-id" not in second.headers and second.headers["a"] == "1"


# -- raw responses -----------------------------------------------------------------------------------------

integration = pytest.mark.integration


@integration
def test_with_raw_response_sync(client, topic):
    raw = client.with_raw_response.topics.describe(topic)
    assert isinstance(raw, queuecore.APIResponse)
    assert raw.status_code == 200 and raw.request_id and raw.request_id.startswith("req_")
    assert raw.headers["content-type"].startswith("application/json")
    detail = raw.parse()
    assert isinstance(detail, queuecore.TopicDetail) and detail.name == topic
    assert raw.rate_limit is not None and raw.rate_limit.policy == "admin"
    assert raw.rate_limit.limit is not None and raw.rate_limit.window == 1.0
    assert client.rate_limit == raw.rate_limit

    published = client.with_raw_response.publish(topic, {"n": 1})
    assert published.status_code == 201 and published.rate_limit.policy == "publish"
    assert published.parse().offset >= 0

    by_resource = client.topics.with_raw_response.list(limit=1)
    assert by_resource.status_code == 200 and len(by_resource.parse().data) == 1

    deleted = client.with_raw_response.topics.delete(topic)
    assert deleted.status_code == 204 and deleted.parse() is None
    with pytest.raises(queuecore.NotFoundError) as info:
        client.with_raw_response.topics.describe(topic)
    assert info.value.rate_limit is not None
    with pytest.raises(AttributeError):
        client.with_raw_response.consume  # noqa: B018 — not an HTTP call


@integration
async def test_with_raw_response_async(async_client, topic):
    raw = await async_client.with_raw_response.topics.describe(topic)
    assert raw.status_code == 200 and raw.parse().name == topic
    assert raw.rate_limit is not None and raw.rate_limit.policy == "admin"
    page = await async_client.with_raw_response.topics.list(limit=1)
    assert page.status_code == 200 and len(page.parse().data) == 1
    batch = await async_client.topics.with_raw_response.describe(topic)
    assert batch.parse().name == topic
    published = await async_client.with_raw_response.publish_batch(topic, [{"n": 1}, {"n": 2}])
    assert published.status_code == 201 and published.parse().count == 2
    assert async_client.rate_limit == published.rate_limit


# -- the consumer's events ---------------------------------------------------------------------------------


@pytest.fixture(params=["websocket", "pull"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@integration
def test_rebalance_event_on_join(client, topic, transport):
    consumer = client.consume(topic, group=unique("g"), transport=transport)
    events: list[queuecore.RebalanceEvent] = []
    consumer.on("rebalance", events.append)
    thread = threading.Thread(target=consumer.start)
    thread.start()
    deadline = time.monotonic() + 30
    while not events and time.monotonic() < deadline:
        time.sleep(0.05)
    consumer.stop()
    thread.join(30)
    assert events, "no rebalance event"
    event = events[0]
    assert isinstance(event, queuecore.RebalanceEvent)
    assert event.member_id and event.member_id.startswith("csr_")
    assert event.generation_id >= 1 and sorted(event.assignments) == [0, 1, 2]
    assert consumer.assignments == [] or sorted(consumer.assignments) == [0, 1, 2]
    with pytest.raises(ValueError, match="rebalance"):
        consumer.on("joined", print)  # type: ignore[arg-type]


MESSAGE = {
    "id": "msg_0000000000000000000001",
    "topic": "t",
    "partition": 0,
    "offset": 0,
    "key": None,
    "headers": {},
    "data": {"n": 1},
    "timestamp": "2026-03-28T10:00:00Z",
    "attempt": 1,
    "ackDeadline": "2026-03-28T10:00:30Z",
}
REFUSED = {"ids": [], "failed": [{"id": MESSAGE["id"], "code": "ACK_EXPIRED"}]}


async def _run_until_ack_error(consumer: queuecore.AsyncConsumer) -> list[BaseException]:
    errors: list[BaseException] = []
    got = asyncio.Event()

    def on_error(err: BaseException) -> None:
        errors.append(err)
        if isinstance(err, queuecore.AckError):
            got.set()

    consumer.on("message", lambda msg: msg.ack())
    consumer.on("error", on_error)
    runner = asyncio.ensure_future(consumer.start())
    await asyncio.wait_for(got.wait(), 10)
    consumer.stop()
    await asyncio.wait_for(runner, 10)
    return errors


async def test_a_refused_ack_over_pull_is_an_ack_error(mock_async_client):
    """The pull answers' ``failed`` list (a scripted server: what it answers is the contract's shape)."""

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/members"):
            joined = {"memberId": "csr_1", "generationId": 1, "assignments": [0], "sessionTimeout": "10s"}
            return json_response(200, joined)
        if path.endswith("/poll"):
            polled = getattr(handle, "polled", False)
            handle.polled = True  # type: ignore[attr-defined]
            return json_response(200, {"messages": [] if polled else [MESSAGE]})
        if path.endswith("/ack"):
            return json_response(200, REFUSED)
        return json_response(204, None) if request.method == "DELETE" else json_response(200, {})

    client = mock_async_client(handle)
    consumer = client.consume("t", group="g", transport="pull")
    events: list[queuecore.RebalanceEvent] = []
    consumer.on("rebalance", events.append)
    errors = await _run_until_ack_error(consumer)
    ack_error = next(e for e in errors if isinstance(e, queuecore.AckError))
    assert (ack_error.message_id, ack_error.code, ack_error.action) == (MESSAGE["id"], "ACK_EXPIRED", "ack")
    assert events == [queuecore.RebalanceEvent("csr_1", 1, [0])]


async def test_a_refused_ack_over_websocket_is_an_ack_error():
    """The ``acked`` frame's ``failed`` list, from a scripted WebSocket peer; a ``rebalance`` frame too."""
    from websockets.asyncio.server import serve

    async def peer(ws) -> None:
        welcome = {"type": "welcome", "memberId": "csr_ws", "generationId": 1, "assignments": [0, 1]}
        await ws.send(json.dumps(welcome))
        await ws.send(json.dumps({"type": "rebalance", "generationId": 2, "assignments": [0]}))
        await ws.send(json.dumps({"type": "message", **MESSAGE}))
        async for raw in ws:
            if json.loads(raw).get("type") == "ack":
                await ws.send(json.dumps({"type": "acked", **REFUSED}))

    async with serve(peer, "127.0.0.1", 0) as ws_server:
        port = ws_server.sockets[0].getsockname()[1]
        client = queuecore.AsyncQueueCore(api_key="pq_test_sk_unit", base_url=f"http://127.0.0.1:{port}")
        consumer = client.consume("t", group="g")
        events: list[queuecore.RebalanceEvent] = []
        consumer.on("rebalance", events.append)
        errors = await _run_until_ack_error(consumer)
        await client.close()
    ack_error = next(e for e in errors if isinstance(e, queuecore.AckError))
    assert (ack_error.message_id, ack_error.code) == (MESSAGE["id"], "ACK_EXPIRED")
    assert events[:2] == [
        queuecore.RebalanceEvent("csr_ws", 1, [0, 1]),
        queuecore.RebalanceEvent("csr_ws", 2, [0]),
    ]


def test_an_extend_settled_in_the_same_batch_is_not_sent():
    from queuecore._consumer_kit import _Settler

    settler = _Settler()
    settler.extend("a", 30)
    settler.ack("a")
    settler.extend("b", 30)
    settler.nack("b", "no", None)
    settler.extend("c", 30)
    acks, nacks, extends = settler.take()
    assert acks == ["a"] and [nack[0] for nack in nacks] == ["b"] and extends == [("c", 30)]


@integration
def test_extend_then_ack_reports_no_error(client, topic, transport):
    """Acks are sent before extends: an extend of a message acked meanwhile must not be sent (it would be
    refused, an AckError the application never caused)."""
    client.publish(topic, {"n": 1}, partition=0)
    consumer = client.consume(topic, group=unique("g"), start_from="earliest", transport=transport)
    errors: list[Exception] = []
    handled: list[str] = []

    def handle(msg: queuecore.ConsumedMessage) -> None:
        msg.extend(60)
        msg.ack()
        handled.append(msg.id)
        consumer.stop()

    consumer.on("message", handle)
    consumer.on("error", errors.append)
    thread = threading.Thread(target=consumer.start)
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and handled
    assert errors == []


def test_no_deprecation_warning_for_the_new_names():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert queuecore.BadRequestError.__name__ == "BadRequestError"


@pytest.mark.parametrize("deploy", ["draining after welcome", "draining before welcome", "1012 alone"])
async def test_a_draining_server_is_left_for_another_without_an_error(deploy):
    """A deploy: the node sends ``draining`` and closes with 1012 (also before any welcome, when the
    connection reached a node already draining; or a bare 1012 close); the consumer reconnects at once
    (here to the same scripted address, as to another node behind one balancer) and reports no error."""
    from websockets.asyncio.server import serve

    connections = 0
    acked = asyncio.Event()

    async def peer(ws) -> None:
        nonlocal connections
        connections += 1
        welcome = {"type": "welcome", "memberId": f"csr_{connections}", "generationId": 1, "assignments": [0]}
        if connections == 1:
            if deploy != "draining before welcome":
                await ws.send(json.dumps(welcome))
            if deploy != "1012 alone":
                await ws.send(json.dumps({"type": "draining"}))
            await ws.close(code=1012)
            return
        await ws.send(json.dumps(welcome))
        await ws.send(json.dumps({"type": "message", **MESSAGE}))
        async for raw in ws:
            frame = json.loads(raw)
            if frame.get("type") == "ack":
                await ws.send(json.dumps({"type": "acked", "ids": [MESSAGE["id"]], "failed": []}))
                acked.set()

    async with serve(peer, "127.0.0.1", 0) as ws_server:
        port = ws_server.sockets[0].getsockname()[1]
        client = queuecore.AsyncQueueCore(api_key="pq_test_sk_unit", base_url=f"http://127.0.0.1:{port}")
        consumer = client.consume("t", group="g")
        errors: list[BaseException] = []
        consumer.on("error", errors.append)
        consumer.on("message", lambda msg: msg.ack())
        runner = asyncio.ensure_future(consumer.start())
        await asyncio.wait_for(acked.wait(), 10)
        consumer.stop()
        await asyncio.wait_for(runner, 10)
        await client.close()
    assert connections == 2 and errors == []
