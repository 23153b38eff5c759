"""Schedules across real processes: one schedule ``every: "1s"`` publishes each due time exactly once,
with no gap, while API processes run side by side, are SIGKILLed and restarted.

- ``two nodes``: two ``queuecore-server`` processes sharing Postgres, Redis and a 3-node JetStream cluster
  (the only shape in which API processes share a topic); one is SIGKILLed mid-run and started again.
- ``one node, local engine``: a ``queuecore-server`` on Postgres and the local log engine, SIGKILLed and
  restarted on the same data directory (its idempotency keys come back from the log).

The checker reads the topic afterwards: every message of the schedule (header ``queuecore-schedule``)
names its due time (``queuecore-scheduled-at``); no due time twice, and the due times from the first to
the last one second apart with none missing (the outages here are far shorter than the 30 s catch-up
window, so the catch-up rule keeps every run). The runs the API lists are those same messages.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import signal
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env

pytestmark = pytest.mark.slow

# A dead node's claim holds a run for at most this long: short, so the test's outage is short.
CLAIM = {"QUEUECORE_SCHEDULE_CLAIM_SECONDS": "2"}


def due_ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp).timestamp() * 1000)


def check_history(messages: list[dict], schedule_id: str) -> list[int]:
    """The due times the schedule's messages name, sorted; fails on a duplicate or a gap."""
    dues = [
        due_ms(m["headers"]["queuecore-scheduled-at"])
        for m in messages
        if m["headers"].get("queuecore-schedule") == schedule_id
    ]
    duplicates = {d: n for d, n in Counter(dues).items() if n > 1}
    assert not duplicates, f"due times published more than once: {duplicates}"
    dues.sort()
    gaps = [(a, b) for a, b in itertools.pairwise(dues) if b - a != 1000]
    assert not gaps, f"due times missing between: {gaps}"
    return dues


class TestCheckHistory:
    """The checker itself, on hand-written histories."""

    def message(self, at: str, schedule: str = "sch_a") -> dict:
        return {"headers": {"queuecore-schedule": schedule, "queuecore-scheduled-at": at}}

    def test_a_clean_history_passes(self):
        history = [self.message(f"2026-01-01T00:00:0{s}.000Z") for s in (2, 0, 1)]
        assert len(check_history([*history, self.message("2026-01-01T00:00:05.000Z", "sch_b")], "sch_a")) == 3

    def test_a_duplicate_fails(self):
        with pytest.raises(AssertionError, match="more than once"):
            check_history([self.message("2026-01-01T00:00:00.000Z")] * 2, "sch_a")

    def test_a_gap_fails(self):
        with pytest.raises(AssertionError, match="missing"):
            check_history(
                [self.message("2026-01-01T00:00:00.000Z"), self.message("2026-01-01T00:00:02.000Z")], "sch_a"
            )


async def read_all(http: httpx.AsyncClient, topic: str) -> list[dict]:
    out: list[dict] = []
    offset = 0
    while True:
        r = await http.get(
            f"/v1/topics/{topic}/partitions/0/messages", params={"fromOffset": offset, "limit": 1000}
        )
        assert r.status_code == 200, r.text
        page = r.json()
        out += page["data"]
        if not page["data"]:
            return out
        offset = page["nextOffset"]


async def exercise(nodes: list[ServerProcess], key: str) -> None:
    """Run the schedule across ``nodes``, SIGKILL the first and start it again, then check the topic."""
    headers = {"Authorization": f"Bearer {key}"}
    survivor = nodes[-1]
    async with httpx.AsyncClient(base_url=survivor.url, headers=headers, timeout=30) as http:
        topic = f"sched-{secrets.token_hex(3)}"
        r = await http.post("/v1/topics", json={"name": topic, "partitions": 1})
        assert r.status_code == 201, r.text
        r = await http.post("/v1/schedules", json={"topic": topic, "every": "1s", "data": {"tick": True}})
        assert r.status_code == 201, r.text
        schedule = r.json()
        await asyncio.sleep(4)
        victim = nodes[0]
        victim.stop(signal.SIGKILL)
        await asyncio.sleep(4 if len(nodes) > 1 else 0)
        await asyncio.to_thread(victim.start)
        await asyncio.sleep(5)
        # Then the schedule catches up: a node killed between claiming a run's idempotency key and placing
        # its message holds that run until the key is stale (15 s, ``app/broker/idempotency.py``), after
        # which the runs missed meanwhile are published in order (within the 30 s catch-up window). A
        # deadline, not a speed claim; the history is checked for duplicates and gaps at every look.
        deadline = time.monotonic() + 45
        while True:
            history = check_history(await read_all(http, topic), schedule["id"])
            if history and history[-1] >= (time.time() - 3) * 1000:
                break
            if time.monotonic() > deadline:  # a hang guard: the catch-up never came
                pytest.fail(f"the schedule did not catch up after the kill: {history}")
            await asyncio.sleep(1)
        stopped_at = time.time()
        r = await http.post(f"/v1/schedules/{schedule['id']}/pause")
        assert r.status_code == 200, r.text
        # A run under way when paused is still published and recorded: wait until the topic and the runs
        # agree (a deadline, not a speed claim), checking the history at every look.
        deadline = time.monotonic() + 30
        while True:
            await asyncio.sleep(1)
            recorded = sorted(
                due_ms(run["at"])
                for run in (await http.get(f"/v1/schedules/{schedule['id']}/runs")).json()["data"]
            )
            history = check_history(await read_all(http, topic), schedule["id"])
            if recorded == history or time.monotonic() > deadline:
                break
        # Every published run was recorded (fewer than the 100 kept), and none recorded without its message.
        assert recorded == history
        # It ran from its first due time until the pause, through the kill.
        assert history[0] == due_ms(schedule["nextRunAt"])
        assert history[-1] >= (stopped_at - 4) * 1000
        assert len(history) >= 10


async def test_two_nodes_on_jetstream_with_a_sigkill(tmp_path_factory: pytest.TempPathFactory):
    from tests.system.test_scaleout import start_scaleout

    name = f"qc_test_sched_{secrets.token_hex(4)}"
    await create_database(name)
    scaleout = await asyncio.to_thread(
        start_scaleout, tmp_path_factory.mktemp("sched-js"), database_url(name), 2, **CLAIM
    )
    try:
        await exercise(scaleout.nodes, scaleout.key)
    finally:
        for node in scaleout.nodes:
            node.stop()
        scaleout.cluster.stop()
        await drop_database(name)


async def test_one_node_on_the_local_engine_with_a_sigkill(tmp_path_factory: pytest.TempPathFactory):
    name = f"qc_test_sched_{secrets.token_hex(4)}"
    await create_database(name)
    root: Path = tmp_path_factory.mktemp("sched-local")
    env = server_env(root / "data", database_url(name), **CLAIM)
    node: ServerProcess | None = None
    try:
        await asyncio.to_thread(cli, env, "migrate")
        boot = await asyncio.to_thread(bootstrap, env, "sched-local", "--tier", "pro")
        node = ServerProcess(env=env, port=free_port(), data_dir=root / "data", log_path=root / "api.log")
        await asyncio.to_thread(node.start)
        await exercise([node], boot["keys"]["production"])
    finally:
        if node is not None:
            node.stop()
        await drop_database(name)
