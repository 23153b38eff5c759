"""``queuecore schedules``: create, list, get, pause, resume, runs, delete, as subprocesses against the
real server (as test_cli.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sdk_support import unique
from test_cli import lines, run

from queuecore import QueueCore

pytestmark = pytest.mark.integration


@pytest.fixture
def env(server, tmp_path: Path) -> dict[str, str]:
    env = server.client_env(server.keys["sdk-test"]["staging"])
    env["QUEUECORE_CONFIG"] = str(tmp_path / "queuecore-config.json")
    return env


def test_the_whole_life_of_a_schedule(env):
    topic = unique("cli-sched")
    with QueueCore(api_key=env["QUEUECORE_API_KEY"], base_url=env["QUEUECORE_BASE_URL"]) as client:
        client.topics.create(topic, partitions=1)
    created = run(
        env, "schedules", "create", topic, "--every", "1s", "--data", '{"tick": 1}', "--header", "team=ops"
    )
    assert created.returncode == 0, created.stderr
    schedule = json.loads(created.stdout)
    assert schedule["id"].startswith("sch_") and schedule["every"] == "1s"
    assert schedule["headers"] == {"team": "ops"}

    listed = run(env, "schedules", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert schedule["id"] in [item["id"] for item in lines(listed.stdout)]
    got = run(env, "schedules", "get", schedule["id"])
    assert json.loads(got.stdout)["topic"] == topic

    deadline = time.monotonic() + 20
    runs: list = []
    while len(runs) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        result = run(env, "schedules", "runs", schedule["id"], "-o", "json")
        assert result.returncode == 0, result.stderr
        runs = lines(result.stdout)
    assert len(runs) >= 2 and runs[0]["at"] > runs[1]["at"]

    paused = run(env, "schedules", "pause", schedule["id"])
    assert json.loads(paused.stdout)["status"] == "paused"
    resumed = run(env, "schedules", "resume", schedule["id"])
    assert json.loads(resumed.stdout)["status"] == "active"
    deleted = run(env, "schedules", "delete", schedule["id"])
    assert deleted.returncode == 0 and json.loads(deleted.stdout)["deleted"] is True
    gone = run(env, "schedules", "get", schedule["id"])
    assert gone.returncode == 1 and "NOT_FOUND" in gone.stderr


def test_usage_errors(env):
    neither = run(env, "schedules", "create", "t", "--data", "1")
    assert neither.returncode == 2 and "exactly one of --cron and --every" in neither.stderr
    bad_json = run(env, "schedules", "create", "t", "--every", "1m", "--data", "{nope")
    assert bad_json.returncode == 2 and "--data" in bad_json.stderr
    refused = run(env, "schedules", "create", unique("none"), "--cron", "* * *", "--data", "1")
    assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr
