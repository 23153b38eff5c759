"""Limits against abuse, on a real server process: request heads bounded in size and time, WebSocket
frames bounded in size and rate, push connections per key bounded. Each is refused cleanly (an answer in
the envelope or an error frame, then a close) and logged once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time

import httpx
import pytest
import websockets
from websockets.asyncio.client import connect

from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env


def limited_server(tmp_path_factory, name: str, topic: str, **settings: str) -> ServerProcess:
    """A real server with some limits lowered (``settings``: QUEUECORE_* values), an enterprise project
    and one 1-partition ``topic``."""
    data = tmp_path_factory.mktemp(name)
    env = server_env(data / "data", **settings)
    cli(env, "migrate")
    keys = bootstrap(env, name, "--tier", "enterprise")["keys"]
    proc = ServerProcess(env=env, port=free_port(), data_dir=data / "data", log_path=data / "server.log")
    proc.keys = keys
    proc.start()
    headers = {"Authorization": f"Bearer {keys['production']}"}
    assert httpx.post(
        proc.url + "/v1/topics", json={"name": topic, "partitions": 1}, headers=headers
    ).is_success
    return proc


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    proc = limited_server(
        tmp_path_factory,
        "abuse",
        "abuse",
        QUEUECORE_HTTP_HEAD_TIMEOUT_SECONDS="1",
        QUEUECORE_WS_MAX_FRAMES_PER_SECOND="50",
        QUEUECORE_WS_MAX_CONNECTIONS_PER_KEY="2",
        QUEUECORE_WS_MAX_FRAME_BYTES="65536",
    )
    yield proc
    proc.stop()


def raw(server: ServerProcess, payload: bytes, wait: float = 5.0) -> bytes:
    """Send bytes on a fresh connection; everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=wait) as sock:
        sock.sendall(payload)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def log_lines(server: ServerProcess, needle: str) -> list[dict]:
    assert server.log_path is not None
    return [
        json.loads(x) for x in server.log_path.read_text().splitlines() if x.startswith("{") and needle in x
    ]


class TestRequestHead:
    def test_a_huge_header_is_431_in_the_envelope_and_the_connection_closes(self, limited):
        head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * (200 * 1024) + b"\r\n\r\n"
        answer = raw(limited, head)
        status_line, _, rest = answer.partition(b"\r\n")
        assert status_line == b"HTTP/1.1 431 Request Header Fields Too Large"
        body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["status"] == 431 and body["error"]["requestId"].startswith("req_")
        assert len(log_lines(limited, body["error"]["requestId"])) == 1  # logged once
        assert httpx.get(limited.url + "/v1/health").status_code == 200  # the server is fine

    def test_a_header_trickle_is_cut_off_with_408(self, limited):
        with socket.create_connection(("127.0.0.1", limited.port), timeout=5) as sock:
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
            started = time.monotonic()
            answer = b""
            while time.monotonic() - started < 4:
                sock.sendall(b"X-Slow: 1\r\n")  # a header now and then, never the end of the head
                time.sleep(0.2)
                try:
                    sock.settimeout(0.01)
                    answer += sock.recv(65536)
                except (TimeoutError, BlockingIOError):
                    continue
                except (ConnectionResetError, BrokenPipeError):
                    break
                if answer:
                    break
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout"), answer[:100]

    def test_a_connection_that_sends_nothing_is_closed(self, limited):
        with socket.create_connection(("127.0.0.1", limited.port), timeout=5) as sock:
            sock.settimeout(4)
            assert sock.recv(1) == b""  # closed by the server, not by our timeout


async def _open(server: ServerProcess, group: str):
    url = f"ws://127.0.0.1:{server.port}/v1/topics/abuse/consume?group={group}&startFrom=earliest"
    ws = await connect(url, additional_headers={"Authorization": f"Bearer {server.keys['production']}"})
    assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "welcome"
    return ws


class TestPushConnections:
    async def test_a_frame_flood_gets_an_error_frame_and_a_policy_close(self, limited):
        ws = await _open(limited, "flood")
        for _ in range(120):
            await ws.send(json.dumps({"type": "ack", "ids": ["msg_nope"]}))
        frames = []
        with pytest.raises(websockets.ConnectionClosed):
            while True:
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
        errors = [f["error"] for f in frames if f["type"] == "error"]
        assert errors and errors[-1]["code"] == "RATE_LIMIT_EXCEEDED"
        assert ws.close_code == 1008
        assert len(log_lines(limited, "client frames in a second")) == 1

    async def test_an_oversized_frame_closes_the_connection(self, limited):
        ws = await _open(limited, "big")
        await ws.send(json.dumps({"type": "ack", "ids": ["x" * 100_000]}))
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1009  # message too big

    async def test_connections_per_key_are_bounded(self, limited):
        async def when_room():
            # Connections closed just before (earlier tests) count until the server has seen them leave:
            # a bounded number of tries, then the refusal itself is the failure.
            for _ in range(50):
                try:
                    return await _open(limited, "many")
                except websockets.InvalidStatus:
                    await asyncio.sleep(0.1)
            return await _open(limited, "many")

        first, second = await when_room(), await when_room()
        try:
            with pytest.raises(websockets.InvalidStatus) as refused:
                await _open(limited, "many")
            assert refused.value.response.status_code == 429
            assert json.loads(refused.value.response.body)["error"]["code"] == "RATE_LIMIT_EXCEEDED"
        finally:
            await first.close()
            await second.close()
        again = await when_room()  # room again once they are gone
        await again.close()


@pytest.fixture(scope="module")
def body_limited(tmp_path_factory):
    """A server whose body limits are short enough to watch: 4 s with credentials, 1.5 s without."""
    proc = limited_server(
        tmp_path_factory,
        "bodies",
        "bodies",
        QUEUECORE_HTTP_BODY_TIMEOUT_SECONDS="4",
        QUEUECORE_HTTP_ANONYMOUS_BODY_TIMEOUT_SECONDS="1.5",
        QUEUECORE_HTTP_BODY_MIN_RATE="1024",
    )
    yield proc
    proc.stop()


def trickle(
    server: ServerProcess, head: bytes, piece: bytes, every: float, limit: float
) -> tuple[bytes, float]:
    """Send ``head``, then ``piece`` every ``every`` seconds (never the whole body) until the server
    answers or ``limit`` seconds pass: what it answered, and after how long."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(head)
        started = time.monotonic()
        answer = b""
        while time.monotonic() - started < limit:
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                sock.sendall(piece)
            sock.settimeout(every)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            answer += chunk
            if not chunk or b"\r\n\r\n" in answer:
                break
        return answer, time.monotonic() - started


def publish_head(server: ServerProcess, length: int, *, key: bool = True) -> bytes:
    auth = f"Authorization: Bearer {server.keys['production']}\r\n".encode() if key else b""
    return (
        b"POST /v1/topics/bodies/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + auth
        + b"Content-Length: %d\r\n\r\n" % length
    )


class TestRequestBody:
    def test_a_body_trickled_below_the_minimum_rate_is_408(self, body_limited):
        answer, _ = trickle(body_limited, publish_head(body_limited, 100_000), b"x" * 50, 0.2, 10)
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout"), answer[:200]
        body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert "slower than 1024 bytes" in body["error"]["message"]  # the rate check, not the time limit

    def test_a_body_sent_fast_enough_but_never_finished_is_408_at_the_time_limit(self, body_limited):
        # 2 KiB every 0.25 s is 8 KiB/s, above the rate; the 10 MB promised never all arrive.
        answer, took = trickle(body_limited, publish_head(body_limited, 10_000_000), b"x" * 2048, 0.25, 10)
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout"), answer[:200]
        assert b"not complete within 4 s" in answer and took >= 3.5  # served until its limit

    def test_a_request_without_credentials_gets_the_short_limit(self, body_limited):
        # A route that reads its body before it authenticates: the short limit cuts the body off.
        head = b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"
        answer, _ = trickle(body_limited, head, b"x" * 2048, 0.25, 10)
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout"), answer[:200]
        assert b"not complete within 1.5 s" in answer  # the limit of a request without credentials

    def test_an_answer_given_before_the_body_ends_the_connection_soon(self, body_limited):
        # The publish authenticates first: 401 at once; the rest of the body is not waited for.
        with socket.create_connection(("127.0.0.1", body_limited.port), timeout=5) as sock:
            sock.sendall(publish_head(body_limited, 10_000_000, key=False) + b"x" * 100)
            started = time.monotonic()
            answer = sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
            closed = False  # without the rule the server reads on for as long as the 10 MB keep coming
            while time.monotonic() - started < 5 and not closed:
                try:
                    sock.sendall(b"x" * 2048)
                    sock.settimeout(0.25)
                    closed = sock.recv(65536) == b""
                except TimeoutError:
                    continue
                except (ConnectionResetError, BrokenPipeError):
                    closed = True
            assert closed

    def test_a_body_in_quick_pieces_is_published(self, body_limited):
        payload = json.dumps({"data": {"text": "y" * 6000}}).encode()
        with socket.create_connection(("127.0.0.1", body_limited.port), timeout=5) as sock:
            sock.sendall(publish_head(body_limited, len(payload)))
            for start in range(0, len(payload), 1000):
                sock.sendall(payload[start : start + 1000])
                time.sleep(0.05)
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 201"), answer[:200]

    def test_the_app_sees_a_timed_out_body_as_a_client_gone_not_an_error(self, body_limited):
        trickle(body_limited, publish_head(body_limited, 100_000), b"x" * 10, 0.2, 10)
        time.sleep(0.5)
        text = body_limited.log_path.read_text()
        assert "unhandled error" not in text
        assert any(line.get("msg") == "client disconnected" for line in log_lines(body_limited, "client"))

    def test_a_request_that_is_not_http_gets_the_envelope(self, body_limited):
        answer = raw(body_limited, b"\x16\x03\x01 this is not HTTP\r\n\r\n")
        head, _, rest = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 Bad Request"), answer[:200]
        assert b"content-type: application/json" in head.lower() and b"x-request-id: req_" in head.lower()
        body = json.loads(rest)
        assert body["error"]["code"] == "INVALID_REQUEST" and body["error"]["status"] == 400
