"""Helpers of the SDK's tests (importable: ``pythonpath = ["tests"]``); the fixtures are in conftest.py.

Unit tests drive the clients over ``httpx.MockTransport`` (``mock_client`` / ``mock_async_client``).
Integration tests (``pytest.mark.integration``) use one real ``queuecore-server`` process per session,
started from its operator CLI exactly as an operator would: migrate, bootstrap projects, serve.

The server binary: ``$QUEUECORE_TEST_SERVER``, else the repository's ``.venv/bin/queuecore-server``, else
``queuecore-server`` on ``PATH``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / "sdk"


def server_bin() -> str:
    explicit = os.environ.get("QUEUECORE_TEST_SERVER")
    if explicit:
        return explicit
    local = REPO / ".venv" / "bin" / "queuecore-server"
    if local.exists():
        return str(local)
    found = shutil.which("queuecore-server")
    if found:
        return found
    raise RuntimeError("queuecore-server not found: set QUEUECORE_TEST_SERVER")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unique(prefix: str = "sdk") -> str:
    """A topic name no other test uses."""
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


# -- the real server -----------------------------------------------------------------------------------


@dataclass
class Server:
    """A ``queuecore-server serve`` process and the keys of the projects bootstrapped for the tests."""

    data_dir: Path
    port: int
    env: dict[str, str]
    keys: dict[str, dict[str, str]] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def key(self) -> str:
        """The main test key: project ``sdk-test`` (enterprise, generous limits), development."""
        return self.keys["sdk-test"]["development"]

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            [server_bin(), *args], env=self.env, capture_output=True, text=True, timeout=120, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"queuecore-server {' '.join(args)} failed ({result.returncode}): {result.stderr}"
            )
        return result.stdout

    def bootstrap(self, project: str, tier: str, limits: str | None = None) -> dict[str, str]:
        boot = json.loads(self.cli("bootstrap", "--project", project, "--tier", tier, "--json"))
        if limits:
            self.cli("projects", "set-tier", "--project", project, "--tier", tier, "--limits", limits)
        self.keys[project] = boot["keys"]
        return boot["keys"]

    def start(self, timeout: float = 60.0) -> None:
        log = (self.data_dir / "server.log").open("ab")
        self.process = subprocess.Popen(
            [server_bin(), "serve", "--port", str(self.port)],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"queuecore-server exited:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"queuecore-server was not healthy within {timeout} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def log_tail(self, chars: int = 4000) -> str:
        path = self.data_dir / "server.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def client_env(self, key: str | None = None) -> dict[str, str]:
        """The environment of a customer process: the key and URL set, nothing else of QueueCore's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
        env["QUEUECORE_API_KEY"] = key or self.key
        env["QUEUECORE_BASE_URL"] = self.url
        return env


# -- mocked transports (unit tests only) --------------------------------------------------------------

Handler = Callable[[httpx.Request], httpx.Response]


def envelope(status: int, code: str, message: str = "nope", request_id: str = "req_test") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, "requestId": request_id}}


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    base = {"X-Request-Id": "req_test"}
    base.update(headers or {})
    return httpx.Response(status, json=body, headers=base)


@dataclass
class Recorder:
    """What a mocked transport saw, and the retry sleeps a client asked for."""

    requests: list[httpx.Request] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)


def sequence(*responses: httpx.Response | Exception) -> Handler:
    """A handler answering each request with the next response (or raising the next exception)."""
    pending = list(responses)

    def handle(request: httpx.Request) -> httpx.Response:
        item = pending.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    return handle


# -- a faulty network in front of the real server ---------------------------------------------------------


class LosingProxy:
    """A TCP proxy to the real server that loses answers: for the first ``lose`` connections it forwards
    the request, waits until the server starts answering (so the request was fully handled), then closes
    the client's side without relaying a byte. Later connections are relayed both ways untouched.

    This is the failure idempotency keys exist for: the publish happened, the client cannot know.
    """

    def __init__(self, upstream_port: int, lose: int = 1) -> None:
        self.upstream_port = upstream_port
        self.lose = lose
        self.lost = 0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                lose = self.lost < self.lose
                if lose:
                    self.lost += 1
            threading.Thread(target=self._serve, args=(conn, lose), daemon=True).start()

    def _serve(self, conn: socket.socket, lose: bool) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        threading.Thread(target=_pump, args=(conn, upstream), daemon=True).start()
        try:
            if lose:
                upstream.recv(1)  # the server has handled the request and is answering: drop it
            else:
                _pump(upstream, conn)
        finally:
            for s in (conn, upstream):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            sink.sendall(chunk)
    except OSError:
        pass
