"""Short fault runs against a real ``queuecore-server``: single and batch publishers, two WebSocket and two
pull members on an exactly-once topic, every operation recorded, then the history checked against the full
read of every partition: no anomaly of any kind the checker knows (tests/system/faults/history.py).

- embedded (SQLite metadata, local log engine): the API process SIGKILLed and restarted, and SIGSTOPped for
  longer than the groups' sessionTimeout;
- JetStream (Postgres metadata, a 3-node NATS cluster, each node on its own address and in its own cgroup):
  the leading node cut from the other two, the API process cut from every node, the leading node paused
  past an election (tests/system/faults/nats_faults.py);
- Postgres metadata with limits in a Redis of the test's own, reached through a latency proxy: Redis slowed
  down (a round trip of 0.2 s, then 2 s) and made fast again (tests/system/faults/redis_faults.py);
- embedded, its data directory (SQLite and the log) on a lazy file system: a coordinated power loss, every
  write not fsync'd dropped while the process is down, then one torn (part of the unsynced writes kept,
  sector by sector; renames and unlinks not yet durable undone) (tests/system/faults/power_faults.py);
- the Postgres deployment with Postgres's own data directory on a lazy file system too: a torn loss and a
  whole one of every process that stores data, Postgres included.

bench/faults.py runs the same longer, with more faults.
"""

from __future__ import annotations

import asyncio
import copy
import secrets
from pathlib import Path

import pytest

from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.redis import RedisServer
from tests.fixtures.server import free_port, server_env
from tests.system.faults import lazyfs, nats_faults, power_faults, redis_faults
from tests.system.faults.history import Recorder, check
from tests.system.faults.latency_proxy import ProxyThread
from tests.system.faults.load import SIGKILL, SIGSTOP, Outcome, Target, prepare_server, run
from tests.system.faults.network import Links, unavailable


@pytest.mark.slow
async def test_no_anomalies_under_kills_and_pauses(tmp_path):
    server, key = prepare_server(server_env(tmp_path / "data"), tmp_path)
    server.start()
    recorder = Recorder(tmp_path / "history.jsonl")
    try:
        outcome = await run(server, key, recorder, [SIGKILL, SIGSTOP, SIGKILL], between=3.0)
    finally:
        server.stop()
    counts = clean(outcome, tmp_path)
    # Every fault was injected.
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


@pytest.mark.slow
async def test_no_anomalies_under_nats_partitions_cuts_and_pauses(tmp_path):
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    name = f"qc_faults_{secrets.token_hex(4)}"
    await create_database(name)
    links = Links()
    cluster = None
    try:
        cluster, nodes, api = await asyncio.to_thread(nats_faults.start_cluster, tmp_path / "nats", links)
        env = server_env(
            tmp_path / "data",
            database_url(name),
            QUEUECORE_LOG_ENGINE="jetstream",
            QUEUECORE_NATS_URL=cluster.url,
            QUEUECORE_REDIS_URL="redis://127.0.0.1:6379/0",
            QUEUECORE_RATE_LIMIT_PREFIX=f"qc:faults:{name}:",
        )
        server, key = prepare_server(env, tmp_path, api.cgroup)
        target = Target(server=server, cluster=cluster, links=links, api=api, nodes=nodes)
        server.start()
        recorder = Recorder(tmp_path / "history.jsonl")
        faults = [nats_faults.NATS_ISOLATE, nats_faults.API_CUT, nats_faults.NATS_PAUSE]
        try:
            outcome = await run(
                target, key, recorder, faults, between=3.0, drain_seconds=60, settle_seconds=14.0
            )
        finally:
            server.stop()
    finally:
        if cluster is not None:
            cluster.stop()
        links.close()
        await drop_database(name)
    counts = clean(outcome, tmp_path)
    # The faults were real: while the leading node was cut off, the other two led streams of their own
    # (an election happened), and cutting the API process from NATS failed requests that were under way.
    isolated = next(note for note in outcome.notes if note.startswith(nats_faults.NATS_ISOLATE.name))
    assert "led: none" not in isolated, outcome.notes
    failed = sum(n for what, n in counts.items() if what.startswith(("publish fail", "publish unknown")))
    failed += sum(n for what, n in counts.items() if what.startswith(("pull poll 5", "pull join 5")))
    assert failed > 0, counts


@pytest.mark.slow
async def test_no_anomalies_and_no_hang_under_a_slow_redis(tmp_path):
    name = f"qc_faults_{secrets.token_hex(4)}"
    await create_database(name)
    redis = RedisServer(free_port(), tmp_path)
    redis.start()
    proxy = ProxyThread("127.0.0.1", redis.port)
    try:
        env = server_env(
            tmp_path / "data",
            database_url(name),
            QUEUECORE_REDIS_URL=proxy.url,
            QUEUECORE_RATE_LIMIT_PREFIX=f"qc:faults:{name}:",
        )
        server, key = prepare_server(env, tmp_path)
        target = Target(server=server, redis=redis, redis_proxy=proxy)
        server.start()
        recorder = Recorder(tmp_path / "history.jsonl")
        try:
            outcome = await run(target, key, recorder, [redis_faults.REDIS_SLOW], between=3.0)
        finally:
            server.stop()
    finally:
        proxy.close()
        redis.kill()
        await drop_database(name)
    clean(outcome, tmp_path)
    # Answered, not hung: every publish, ack and nack sent while Redis was slow got an answer (none lost
    # to the load's client timeout: outcome "unknown"). How long they took is printed, not asserted.
    took = redis_faults.latencies_during(outcome.history, redis_faults.REDIS_SLOW.name)
    print(
        f"while Redis was slow: {len(took)} requests, p99 {redis_faults.p99(took):.3f} s, "
        f"max {max(took):.3f} s; {outcome.notes}"
    )
    assert len(took) > 50, len(took)
    unanswered = redis_faults.unanswered_during(outcome.history, redis_faults.REDIS_SLOW.name)
    assert not unanswered, unanswered[:5]
    # The fault was seen (health degraded while slow), healed, and limits are counted in Redis again.
    note = outcome.notes[0]
    assert "degraded" in note and "ok again after" in note, note
    counted = int(note.rsplit("; ", 1)[1].split()[0])
    assert counted > 0, note


@pytest.mark.slow
async def test_no_anomalies_after_power_losses(tmp_path):
    reason = lazyfs.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with power_faults.lazy_disks(tmp_path / "data") as disks:
        # Small segments: the log rolls under the load (new files, sealed indexes) between the losses.
        env = server_env(tmp_path / "data", QUEUECORE_LOG__SEGMENT_BYTES=str(64 * 1024))
        server, key = prepare_server(env, tmp_path)
        target = Target(server=server, disks=disks)
        server.start()
        recorder = Recorder(tmp_path / "history.jsonl")
        faults = [power_faults.POWER_LOSS, power_faults.POWER_LOSS_TORN]
        try:
            outcome = await run(target, key, recorder, faults, between=3.0)
        finally:
            server.stop()
    clean(outcome, tmp_path)
    # The losses were real: each dropped writes the processes had made and not synced (the -shm index
    # SQLite never syncs, at least), and nothing was left unsynced to drop twice.
    assert len(outcome.notes) == 2, outcome.notes
    for note in outcome.notes:
        assert "0 files cut back (0 bytes), 0 never" not in note, note


@pytest.mark.slow
async def test_no_anomalies_after_power_losses_of_postgres_too(tmp_path):
    # The Postgres deployment with its Postgres on a lazy file system of its own: every loss takes the
    # metadata's unsynced writes too (relation files, a WAL tail), and its crash recovery must bring back
    # every commit the API process answered for (offsets, acks, leases of the exactly-once topic).
    reason = lazyfs.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with (
        power_faults.lazy_postgres() as (postgres, pg_disk),
        power_faults.lazy_disks(tmp_path / "data") as disks,
    ):
        env = server_env(tmp_path / "data", postgres.url)
        server, key = prepare_server(env, tmp_path)
        target = Target(server=server, disks=[pg_disk, *disks], postgres=postgres)
        server.start()
        recorder = Recorder(tmp_path / "history.jsonl")
        try:
            outcome = await run(
                target, key, recorder, [power_faults.POWER_LOSS_TORN, power_faults.POWER_LOSS], between=3.0
            )
        finally:
            server.stop()
    clean(outcome, tmp_path)
    # Postgres's disk lost something in the losses (relation files and caches it writes back lazily, by
    # design): the fault reached it.
    assert len(outcome.notes) == 2, outcome.notes
    assert any(word in note for note in outcome.notes for word in ("base/", "global/", "pg_")), outcome.notes


def clean(outcome: Outcome, tmp_path: Path) -> dict[str, int]:
    """The run's counts, once it is seen clean: both groups drained, no anomaly, and enough done to be worth
    checking (publishes answered, both groups delivered to)."""
    counts = outcome.counts
    assert outcome.lags == {"push": 0, "pull": 0}, (outcome.lags, counts, outcome.notes)
    assert outcome.report.ok, f"{outcome.report.summary()}\nhistory: {tmp_path / 'history.jsonl'}\n{counts}"
    assert counts.get("publish ok", 0) > 100 and counts.get("delivered push", 0) > 100, counts
    assert counts.get("delivered pull", 0) > 100, counts
    return counts
