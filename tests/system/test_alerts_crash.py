"""Alert webhooks with a real ``queuecore-server``, on SQLite and on Postgres: the endpoint set through the
operator CLI, a DLQ alert whose receiver is down, a SIGKILL while it is being retried, and after the
restart the event, kept in the outbox, reaches the receiver that came up meanwhile."""

from __future__ import annotations

import json
import secrets
import signal
import time

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env
from tests.fixtures.webhooks import Receiver

ENV = "production"

pytestmark = pytest.mark.slow


# The deployments of this run (tests/conftest.py: Postgres with the local log engine is make test-matrix's).
@pytest.fixture(params=[b for b in ("sqlite", "postgres") if b in BACKENDS])
def running(request, tmp_path, postgres_database):
    url = postgres_database if request.param == "postgres" else ""
    env = server_env(
        tmp_path / "data",
        url,
        QUEUECORE_ALERT_BACKOFF_BASE_SECONDS="0.3",
        QUEUECORE_ALERT_BACKOFF_MAX_SECONDS="1",
        QUEUECORE_ALERT_BREAKER_THRESHOLD="1000",
    )
    cli(env, "migrate")
    project = f"alerts-{secrets.token_hex(4)}"
    boot = bootstrap(env, project)
    server = ServerProcess(
        env=env, port=free_port(), data_dir=tmp_path / "data", log_path=tmp_path / "srv.log"
    )
    server.keys, server.project_id = boot["keys"], project
    server.start()
    yield server
    server.stop()


def test_an_alert_survives_a_sigkill_in_the_outbox(running: ServerProcess):
    headers = {"Authorization": f"Bearer {running.keys['production']}"}

    def call(method: str, path: str, body: object = None) -> dict:
        r = httpx.request(method, running.url + path, json=body, headers=headers, timeout=30)
        assert r.status_code in (200, 201, 202), r.text
        return r.json()

    port = free_port()
    receiver_url = f"http://127.0.0.1:{port}/hooks/queuecore"
    out = cli(
        running.env,
        "alerts",
        "set",
        "--project",
        running.project_id,
        "--environment",
        ENV,
        "--url",
        receiver_url,
        "--json",
    )
    configured = json.loads(out.stdout)
    assert configured["url"] == receiver_url and configured["secret"].startswith("whsec_")

    call("POST", "/v1/topics", {"name": "jobs", "partitions": 1})
    base = "/v1/topics/jobs/groups/workers"
    call("PUT", base, {"deadLetter": {"maxRetries": 0, "alertThreshold": 1}})
    [message] = call("POST", "/v1/topics/jobs/messages/batch", {"messages": [{"data": 1}]})["messages"]
    member = call("POST", f"{base}/members", {"startFrom": "earliest"})
    ident = {"memberId": member["memberId"], "generationId": member["generationId"]}
    assert len(call("POST", f"{base}/poll", ident)["messages"]) == 1
    call("POST", f"{base}/nack", {**ident, "id": message["id"], "reason": "poison"})

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not call("GET", "/v1/alerts/deliveries")["data"]:
        time.sleep(0.1)
    failed = call("GET", "/v1/alerts/deliveries")["data"]
    assert failed and not failed[0]["ok"] and failed[0]["eventType"] == "dlq.threshold_reached"

    running.stop(signal.SIGKILL)
    receiver = Receiver(port).start()
    try:
        running.start()
        [alert] = receiver.wait_for("dlq.threshold_reached", seconds=15)
        event = json.loads(alert.body)
        assert event["data"] == {"topic": "jobs", "group": "workers", "depth": 1, "threshold": 1}

        shown = json.loads(
            cli(
                running.env, "alerts", "show", "--project", running.project_id, "--environment", ENV, "--json"
            ).stdout
        )
        assert "secret" not in shown and shown["secretHint"] == configured["secret"][-4:]
        queued = json.loads(
            cli(
                running.env, "alerts", "test", "--project", running.project_id, "--environment", ENV, "--json"
            ).stdout
        )
        [test] = receiver.wait_for("test", seconds=10)
        assert json.loads(test.body)["id"] == queued["eventId"]
        # A duplicate would be a retry of an event not settled as delivered, due within the longest
        # backoff (QUEUECORE_ALERT_BACKOFF_MAX_SECONDS=1, +20 % jitter): wait past it, then look.
        time.sleep(1.5)
        assert len(receiver.of_type("dlq.threshold_reached")) == 1
        attempts = call("GET", "/v1/alerts/deliveries")["data"]
        delivered = [a for a in attempts if a["eventType"] == "dlq.threshold_reached" and a["ok"]]
        assert len(delivered) == 1  # settled once: the outbox will not send it again
    finally:
        receiver.stop()
