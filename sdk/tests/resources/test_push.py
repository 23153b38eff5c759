"""Push groups through the SDK against a real server, sync and async: typed config, the one-time secret,
rotation, attempts, and a delivery verified with ``queuecore.webhooks``."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sdk_support import unique

import queuecore
from queuecore import Push, webhooks

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver():
    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    server.shutdown()
    server.server_close()


def test_push_config_secret_rotation_attempts_and_verification(client, topic, receiver):
    url, got = receiver
    group = unique("push")
    created = client.consumer_groups.update(topic, group, push=Push(url=url, max_concurrency=4))
    assert created.config.push is not None
    secret = created.config.push.secret
    assert secret.startswith("whsec_") and created.config.push.max_concurrency == 4
    described = client.consumer_groups.describe(topic, group)
    assert described.config.push is not None and described.config.push.secret == f"whsec_…{secret[-4:]}"
    changed = client.consumer_groups.update(topic, group, push={"ordered": True, "rate": 50})
    assert changed.config.push is not None and (changed.config.push.ordered, changed.config.push.rate) == (
        True,
        50,
    )

    sent = client.publish(topic, {"hello": "push"})
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    headers, body = got[0]
    assert webhooks.verify(body, headers, secret) == {"hello": "push"}
    assert headers["webhook-id"] == sent.id

    rotated = client.consumer_groups.rotate_push_secret(topic, group)
    assert isinstance(rotated, queuecore.PushSecret) and rotated.secret != secret

    attempts: list[queuecore.PushAttempt] = []
    while not attempts and time.monotonic() < deadline:
        attempts = client.consumer_groups.push_attempts(topic, group, limit=10)
        time.sleep(0.1)
    assert [(a.message_id, a.attempt, a.status) for a in attempts] == [(sent.id, 1, 204)]

    off = client.consumer_groups.update(topic, group, push=None)
    assert off.config.push is None
    with pytest.raises(queuecore.BadRequestError):
        client.consumer_groups.rotate_push_secret(topic, group)
    assert json.loads(body) == {"hello": "push"}


async def test_async_push_calls(async_client, client, topic, receiver):
    url, _ = receiver
    group = unique("push")
    created = await async_client.consumer_groups.update(topic, group, push={"url": url, "mode": "structured"})
    assert created.config.push is not None and created.config.push.mode == "structured"
    assert (await async_client.consumer_groups.rotate_push_secret(topic, group)).secret.startswith("whsec_")
    assert await async_client.consumer_groups.push_attempts(topic, group) == []
