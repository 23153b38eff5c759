"""``asyncapi.yaml`` against a real ``queuecore-server``: a consumer goes through every frame of the push
WebSocket, and each frame the server sends is checked against the JSON Schema of its message (closed: no
undocumented field), each frame the client sends too; every refusal at the upgrade is a documented status
with the envelope, every close code seen is documented, and each documented one is seen.

The server is this module's own (embedded engine), with small abuse limits so that the policy and size
closes and the per-key connection refusal are quick to reach.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection, connect

from tests.fixtures.asyncapi import AsyncApiContract
from tests.fixtures.server import ServerProcess, bootstrapped_server, server_env

FRAMES_PER_SECOND = 50
FRAME_BYTES = 65536
CONNECTIONS_PER_KEY = 4


@pytest.fixture(scope="module")
def contract(repo_root) -> AsyncApiContract:
    return AsyncApiContract(repo_root / "asyncapi.yaml")


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("asyncapi")
    env = server_env(
        data_dir,
        QUEUECORE_WS_MAX_FRAMES_PER_SECOND=str(FRAMES_PER_SECOND),
        QUEUECORE_WS_MAX_FRAME_BYTES=str(FRAME_BYTES),
        QUEUECORE_WS_MAX_CONNECTIONS_PER_KEY=str(CONNECTIONS_PER_KEY),
    )
    proc = bootstrapped_server(env, data_dir, "asyncapi")
    yield proc
    proc.stop()


class Peer:
    """One push connection whose every frame, both ways, is checked against the contract."""

    def __init__(self, ws: ClientConnection, contract: AsyncApiContract) -> None:
        self.ws = ws
        self.contract = contract
        self.received: list[dict[str, Any]] = []
        self.sent: list[str] = []

    async def recv(self, timeout: float = 10) -> dict[str, Any]:
        frame = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.contract.check_server_frame(frame)
        self.received.append(frame)
        return frame

    async def until(self, kind: str, timeout: float = 10) -> dict[str, Any]:
        while True:
            frame = await self.recv(timeout)
            if frame["type"] == kind:
                return frame

    async def messages(self, count: int) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        while len(got) < count:
            frame = await self.recv()
            if frame["type"] == "message":
                got.append(frame)
            elif frame["type"] == "messages":
                got.extend(frame["messages"])
        return got

    async def send(self, frame: dict[str, Any]) -> None:
        self.sent.append(self.contract.check_client_frame(frame))
        await self.ws.send(json.dumps(frame))

    async def closed(self) -> int:
        """Read on until the server closes; the close code it sent."""
        with pytest.raises(websockets.ConnectionClosed):
            while True:
                await self.recv()
        assert self.ws.close_code is not None
        return self.ws.close_code


class Client:
    def __init__(self, server: ServerProcess, contract: AsyncApiContract) -> None:
        self.server = server
        self.contract = contract
        self.headers = {"Authorization": f"Bearer {server.keys['production']}"}

    def call(self, method: str, path: str, body: Any = None) -> Any:
        r = httpx.request(method, self.server.url + path, json=body, headers=self.headers, timeout=30)
        assert r.is_success, r.text
        return r.json() if r.content else None

    def topic(self, partitions: int = 2, delivery: str = "exactly-once", **group: str) -> str:
        name = f"asyncapi-{secrets.token_hex(4)}"
        self.call("POST", "/v1/topics", {"name": name, "partitions": partitions, "delivery": delivery})
        if group:
            self.call("PUT", f"/v1/topics/{name}/groups/g", group)
        return name

    def url(self, topic: str, **query: Any) -> str:
        """The consume URL; the query must be one the contract's ws binding takes."""
        typed = {k: int(v) if k == "maxInFlight" else v for k, v in query.items()}
        assert self.contract.query_validator.is_valid(typed), query
        return f"ws://127.0.0.1:{self.server.port}/v1/topics/{topic}/consume?{urlencode(query)}"

    async def open(self, topic: str, *, headers: dict[str, str] | None = None, **query: Any) -> Peer:
        url = self.url(topic, **{"group": "g", "startFrom": "earliest", **query})
        ws = await connect(url, additional_headers=self.headers if headers is None else headers)
        peer = Peer(ws, self.contract)
        assert (await peer.recv())["type"] == "welcome"
        return peer


@pytest.fixture
def client(limited: ServerProcess, contract: AsyncApiContract) -> Client:
    return Client(limited, contract)


async def test_a_consumer_session_sends_and_takes_exactly_the_documented_frames(
    client: Client, contract: AsyncApiContract
) -> None:
    topic = client.topic(partitions=2)
    batch = [{"data": {"n": i}, "key": f"k{i}", "headers": {"source": "test"}} for i in range(6)]
    client.call("POST", f"/v1/topics/{topic}/messages/batch", {"messages": batch})
    first = await client.open(topic, maxInFlight=50)
    held = await first.messages(6)  # one pass: a `messages` frame
    client.call("POST", f"/v1/topics/{topic}/messages", {"data": None})
    [single] = await first.messages(1)  # one record: a `message` frame
    assert {f["type"] for f in first.received} >= {"welcome", "messages", "message"}

    await first.send({"type": "ack", "id": single["id"]})
    assert (await first.until("acked"))["ids"] == [single["id"]]
    await first.send({"type": "ack", "ids": [held[0]["id"], "msg_aaaaaaaaaaaaaaaaaaaaaaaaaa"]})
    acked = await first.until("acked")
    assert acked["ids"] == [held[0]["id"]] and len(acked["failed"]) == 1
    await first.send({"type": "extend", "ids": [held[1]["id"]], "seconds": 120})
    assert (await first.until("acked"))["ids"] == [held[1]["id"]]
    await first.send({"type": "extend", "id": held[2]["id"], "seconds": 1.5})
    assert (await first.until("acked"))["ids"] == [held[2]["id"]]
    await first.send({"type": "nack", "id": held[3]["id"], "reason": "not now", "delay": "1s"})
    assert (await first.until("acked"))["ids"] == [held[3]["id"]]
    await first.send({"type": "nack", "id": held[4]["id"], "delay": 0})
    assert (await first.until("acked"))["ids"] == [held[4]["id"]]

    # What the server refuses, the contract refuses too; the answer is a documented `error` frame.
    for bad in ("not json", [1], {"type": "dance"}, {"type": "ack"}, {"type": "extend", "ids": ["x"]}):
        assert not contract.takes_client_frame(bad), bad
        await first.ws.send(bad if isinstance(bad, str) else json.dumps(bad))
        error = (await first.until("error"))["error"]
        assert error["code"] == "INVALID_REQUEST" and error["status"] == 400

    second = await client.open(topic)  # a member joins: the first one rebalances
    rebalance = await first.until("rebalance")
    assert sorted(rebalance["assignments"] + (second.received[0]["assignments"])) == [0, 1]
    await second.ws.close()

    client.call("DELETE", f"/v1/topics/{topic}")  # the end of the member: `error`, then a close
    assert (await first.until("error"))["error"]["code"] == "TOPIC_NOT_FOUND"
    code = await first.closed()
    assert code == 1000 and code in contract.close_codes

    assert {f["type"] for f in first.received + second.received} == contract.sent_by_server
    assert set(first.sent) == contract.sent_by_client


async def test_a_token_in_the_query_opens_the_connection(client: Client, contract: AsyncApiContract) -> None:
    topic = client.topic(partitions=1)
    scheme = contract.document["components"]["securitySchemes"]["WebSocketToken"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("httpApiKey", "query", "token")
    token = client.call("POST", "/v1/tokens/websocket", {"topic": topic, "group": "g"})["token"]
    peer = await client.open(topic, headers={}, token=token, startFrom="latest", maxInFlight=1)
    await peer.ws.close()


async def test_every_refusal_at_the_upgrade_is_documented_with_the_envelope(
    client: Client, contract: AsyncApiContract
) -> None:
    topic = client.topic(partitions=1)
    base = f"ws://127.0.0.1:{client.server.port}/v1/topics/{topic}/consume"
    bad_query: list[dict[str, Any]] = [
        {"group": "g", "startFrom": "middle"},
        {"group": "g", "maxInFlight": 0},
        {},
    ]
    for query in bad_query:  # the contract's query schema refuses what the server refuses
        assert not contract.query_validator.is_valid(query), query
    cases: list[tuple[str, dict[str, str], int]] = [
        *((f"{base}?{urlencode(q)}", client.headers, 400) for q in bad_query),
        (f"{base}?group=g", {}, 401),
        (f"{base}?group=g", {"Authorization": "Bearer pq_live_sk_" + "x" * 32}, 401),
        (f"{base}?group=g&token=not-a-token", {}, 401),
        (base.replace(topic, "no-such-topic") + "?group=g", client.headers, 404),
        (f"{base}?group=g", {**client.headers, "X-Padding": "x" * 70_000}, 431),
    ]
    for url, headers, status in cases:
        with pytest.raises(websockets.InvalidStatus) as refused:
            await connect(url, additional_headers=headers)
        _check_refusal(contract, refused.value.response, status)

    # Connections per key on one node: the next one is refused with 429 and Retry-After.
    open_ = [await _when_room(client, topic) for _ in range(CONNECTIONS_PER_KEY)]
    try:
        with pytest.raises(websockets.InvalidStatus) as refused:
            await connect(client.url(topic, group="g"), additional_headers=client.headers)
        _check_refusal(contract, refused.value.response, 429)
        assert refused.value.response.headers["Retry-After"]
    finally:
        for peer in open_:
            await peer.ws.close()


async def _when_room(client: Client, topic: str) -> Peer:
    """A connection, once those closed by earlier tests have left (the server counts them until then)."""
    for _ in range(50):
        try:
            return await client.open(topic)
        except websockets.InvalidStatus:
            await asyncio.sleep(0.1)
    return await client.open(topic)


def _check_refusal(contract: AsyncApiContract, response: Any, status: int) -> None:
    assert response.status_code == status
    assert status in contract.refusals, f"undocumented refusal {status}"
    body = json.loads(response.body)
    errors = [e.message for e in contract.envelope.iter_errors(body)]
    assert not errors, (errors, body)
    assert body["error"]["code"] == contract.refusals[status]["code"]


async def _flood(client: Client) -> int:
    peer = await client.open(client.topic(partitions=1))
    for _ in range(FRAMES_PER_SECOND * 3):
        await peer.send({"type": "ack", "ids": ["msg_aaaaaaaaaaaaaaaaaaaaaaaaaa"]})
    code = await peer.closed()
    assert peer.received[-1]["error"]["code"] == "RATE_LIMIT_EXCEEDED"
    return code


async def _too_big(client: Client) -> int:
    peer = await client.open(client.topic(partitions=1))
    ids = ["msg_" + "a" * 60] * 1000  # 67 kB: over FRAME_BYTES, yet a frame the contract describes
    await peer.send({"type": "ack", "ids": ids})
    return await peer.closed()


async def _not_utf8(client: Client) -> int:
    peer = await client.open(client.topic(partitions=1))
    await peer.ws.send(b'{"type":"ack","id":"\xff"}', text=True)
    return await peer.closed()


async def _silent(client: Client) -> int:
    topic = client.topic(partitions=1, sessionTimeout="2s")
    url = client.url(topic, group="g")
    ws = await connect(url, additional_headers=client.headers, ping_interval=None)
    peer = Peer(ws, client.contract)
    assert (await peer.recv())["type"] == "welcome"
    ws.transport.pause_reading()  # nothing read, so no pong: the server hears nothing from it
    await asyncio.sleep(4.5)
    ws.transport.resume_reading()
    return await peer.closed()


async def _client_closes(client: Client) -> int:
    peer = await client.open(client.topic(partitions=1))
    await peer.ws.close()
    return peer.ws.close_code or 0


async def _server_restarts(client: Client) -> int:
    peer = await client.open(client.topic(partitions=1))
    stopping = asyncio.create_task(asyncio.to_thread(client.server.stop))
    try:
        return await peer.closed()
    finally:
        await stopping
        client.server.start()  # the module's other tests go on with it


CLOSES = {
    1000: _client_closes,  # and after TOPIC_NOT_FOUND: the session test
    1007: _not_utf8,
    1008: _flood,
    1009: _too_big,
    1011: _silent,
    1012: _server_restarts,
}


def test_every_documented_close_code_is_exercised(contract: AsyncApiContract) -> None:
    assert set(CLOSES) == contract.close_codes


@pytest.mark.parametrize("code", sorted(CLOSES))
async def test_the_server_closes_with_the_documented_code(
    client: Client, contract: AsyncApiContract, code: int
) -> None:
    seen = await CLOSES[code](client)
    assert seen in contract.close_codes, f"undocumented close code {seen}"
    assert seen == code
