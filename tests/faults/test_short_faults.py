"""A short fault run against a real ``queuecore-server`` (embedded: SQLite metadata, local log engine):
single and batch publishers, two WebSocket and two pull members on an exactly-once topic, while the API
process is SIGKILLed and restarted, and SIGSTOPped for longer than the groups' sessionTimeout; every
operation recorded, then the history checked against the full read of every partition: no anomaly of any
kind the checker knows (tests/faults/history.py). bench/faults.py runs the same longer, with more faults.
"""

from __future__ import annotations

import copy

import pytest

from tests.faults.history import Recorder, check
from tests.faults.load import SIGKILL, SIGSTOP, run
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, server_env, set_tier


@pytest.mark.slow
async def test_no_anomalies_under_kills_and_pauses(tmp_path):
    env = server_env(tmp_path / "data")
    cli(env, "migrate")
    key = bootstrap(env, "faults", "--tier", "enterprise")["keys"]["production"]
    # Limits out of the way: a refused request here would be noise, not a finding.
    set_tier(env, "faults", "enterprise", "publish=100000,consume=100000,admin=10000")
    server = ServerProcess(
        env=env, port=free_port(), data_dir=tmp_path / "data", log_path=tmp_path / "srv.log"
    )
    server.start()
    recorder = Recorder(tmp_path / "history.jsonl")
    try:
        outcome = await run(server, key, recorder, [SIGKILL, SIGSTOP, SIGKILL], between=3.0)
    finally:
        server.stop()
    counts = outcome.counts
    assert outcome.lags == {"push": 0, "pull": 0}, (outcome.lags, counts)
    assert outcome.report.ok, f"{outcome.report.summary()}\nhistory: {tmp_path / 'history.jsonl'}\n{counts}"
    # The run did something worth checking: both kinds of publish answered, both groups delivered to, and
    # the kills cut requests on the wire.
    assert counts.get("publish ok", 0) > 100 and counts.get("delivered push", 0) > 100, counts
    assert counts.get("delivered pull", 0) > 100, counts
    assert counts.get("fault sigkill+restart") == 2 and counts.get("fault sigstop>sessionTimeout") == 1, (
        counts
    )

    # And the checker sees through this very history: one acknowledged message taken out of the final
    # read is a lost write, one stored twice a duplicate.
    acked = next(op for op in outcome.history if op["type"] == "publish" and op["outcome"] == "ok")
    reads = copy.deepcopy(outcome.final_reads)
    rows = reads["history"][acked["partition"]]
    rows[:] = [r for r in rows if r["value"] != acked["value"]]
    assert "lost-write" in check(outcome.history, reads).kinds()
    reads = copy.deepcopy(outcome.final_reads)
    reads["history"][acked["partition"]].append({"offset": 10**6, "value": acked["value"], "id": "x"})
    assert check(outcome.history, reads).kinds() == {"duplicate"}
