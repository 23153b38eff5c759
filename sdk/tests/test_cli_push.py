"""``queuecore groups push set|off|rotate-secret|attempts`` as subprocesses against the real server."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sdk_support import unique
from test_cli import lines, run

from queuecore import QueueCore, webhooks

pytestmark = pytest.mark.integration


@pytest.fixture
def env(server, tmp_path: Path) -> dict[str, str]:
    env = server.client_env(server.keys["sdk-test"]["staging"])
    env["QUEUECORE_CONFIG"] = str(tmp_path / "queuecore-config.json")
    return env


@pytest.fixture
def receiver():
    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(
                (
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(int(self.headers["Content-Length"])),
                )
            )
            self.send_response(503)
            self.send_header("Retry-After", "60")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    server.shutdown()
    server.server_close()


def test_set_rotate_attempts_off(env, receiver):
    url, got = receiver
    topic, group = unique("cli"), "billing"
    with QueueCore(api_key=env["QUEUECORE_API_KEY"], base_url=env["QUEUECORE_BASE_URL"]) as client:
        client.topics.create(topic, partitions=1)
        done = run(
            env, "groups", "push", "set", topic, group, "--url", url, "--max-concurrency", "2", "--ordered"
        )
        assert done.returncode == 0, done.stderr
        push = lines(done.stdout)[0]["config"]["push"]
        assert push["secret"].startswith("whsec_") and (push["maxConcurrency"], push["ordered"]) == (2, True)

        client.publish(topic, {"n": 1})
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        assert webhooks.verify(got[0][1], got[0][0], push["secret"]) == {"n": 1}

        rotated = run(env, "groups", "push", "rotate-secret", topic, group)
        assert rotated.returncode == 0 and lines(rotated.stdout)[0]["secret"].startswith("whsec_")

        rows: list[dict] = []
        while not rows and time.monotonic() < deadline:
            shown = run(env, "groups", "push", "attempts", topic, group, "--limit", "5", "-o", "json")
            assert shown.returncode == 0, shown.stderr
            rows = lines(shown.stdout)
            time.sleep(0.2)
        assert (rows[0]["attempt"], rows[0]["status"]) == (1, 503)

        off = run(env, "groups", "push", "off", topic, group)
        assert off.returncode == 0 and lines(off.stdout)[0]["config"]["push"] is None
        bad = run(env, "groups", "push", "set", topic, group, "--url", "ftp://x")
        assert bad.returncode != 0 and "push.url" in bad.stderr
        assert json.loads(got[0][1]) == {"n": 1}
