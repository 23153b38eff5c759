"""Scaling probes: the per-component figures ``docs/scaling.md`` and ``bench/capacity_model.py`` start from.

Each probe measures one component alone on this machine, with the CPU each server process spent during
the run, so that a figure can be read both as "what this box did" and as "what one core of that
component does" (the second is what the capacity model scales). Probes, each ``--rounds`` times, medians:

* ``jetstream`` (a 3-node 2.15 cluster of our own, ``infra/nats_cluster.py``, ``sync_interval: always``):
  - raw nats-py ``publish_async`` in windows of 1,000 into an R=3 and an R=1 stream (the issue's reference);
  - ``JetStreamLogEngine.append`` of batches of 1,000 records (one atomic batch) into one R=3 partition;
  - the same into 4, 16 and 64 partitions at once (one writer task per partition): aggregate msgs/s;
  - single-record appends, 64 in flight, one partition (what unbatched publishes cost);
  - a 1,000-record append spread over 4 partitions (the cross-partition commit record, ``transactions``).
* ``streams``: R=3 stream creation rate (the engine's ``create_topic``, 1 partition each), the servers'
  resident memory and on-disk size per stream, the idle CPU the streams cost (Raft heartbeats), deletion.
* ``postgres``: the metadata store of an in-process app (Postgres, migrated; local log engine):
  - a push member's checkpoint (``checkpoint_express``, one ``UPDATE`` committed per ack frame) from
    1, 4 and 16 writers (each its own connection, as separate API processes would be);
  - a push member's beat (what every WebSocket member does every 0.5 s: ``poll_once(fresh=False)`` as
    its heartbeat and due-lease scan, then ``read_claim``), 4 members of 4 groups at once;
  - a pull cycle (``leases.poll_once`` of 100 then ``leases.ack`` of them), 4 members on 4 partitions.
* ``redis``: rate-limit decisions (``RedisRateLimiter.acquire``) from 2 client processes at once, with
  the CPU Redis itself used (its own ``INFO cpu``).

    .venv/bin/python bench/scaling_probes.py [--rounds 3] [--only jetstream,streams,postgres,redis]

Writes ``bench/results/scaling_probes.json`` and ``.md`` (``--no-write`` only prints); ``--only`` runs
some sections and keeps the others' figures (the files say which run each section comes from). Uses ports
24111-24313 for its cluster and a database ``qc_scaling_probe_<pid>`` it drops after. The engine here
waits up to 30 s for an answer (the API's default is 5 s): a probe measures cost, and on a box at load
15 a 64-partition burst can take longer than 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
BASE_PORT = 24111
PAYLOAD = b'{"type":"order.created","orderId":"ord_00000001","amount":9900,"note":"' + b"x" * 120 + b'"}'
ADMIN_DSN = os.environ.get("QUEUECORE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = "redis://127.0.0.1:6379/0"
TICK = os.sysconf("SC_CLK_TCK")


# -- process accounting ------------------------------------------------------------------------------------


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes used so far (gone ones count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


async def postgres_pids(dsn: str, database: str) -> list[int]:
    """Backends connected to ``database`` and the server's WAL writer: the Postgres work a probe causes
    (other sessions share this server; their backends are left out)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 OR backend_type = 'walwriter'", database
        )
        return [int(r["pid"]) for r in rows]
    finally:
        await conn.close()


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def timed(run: Callable[[], Awaitable[int]], pids: list[int]) -> dict[str, float]:
    """Run once: items/s, and the CPU share (cores) this process and ``pids`` used meanwhile."""
    own = time.process_time()
    servers = cpu_seconds(pids)
    started = time.perf_counter()
    items = await run()
    elapsed = time.perf_counter() - started
    client = time.process_time() - own
    server = cpu_seconds(pids) - servers
    return {
        "per_s": items / elapsed,
        "seconds": elapsed,
        "client_cores": client / elapsed,
        "server_cores": server / elapsed,
        # CPU seconds per item, per run: what the capacity model scales (wall rates depend on the box's load)
        "client_cpu_per_item": client / items,
        "server_cpu_per_item": server / items,
    }


def medians(runs: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out["runs"] = [round(r["per_s"], 1) for r in runs]
    return out


# -- JetStream ---------------------------------------------------------------------------------------------


async def probe_jetstream(cluster: Any, rounds: int) -> dict[str, Any]:
    import nats

    from app.stores.log.jetstream.engine import JetStreamConfig, JetStreamLogEngine
    from app.stores.log.protocol import TopicLogConfig, ValueRecords

    pids = [n.process.pid for n in cluster.nodes]
    out: dict[str, Any] = {}
    nc = await nats.connect(servers=cluster.url.split(","), pending_size=64 * 1024 * 1024)
    js = nc.jetstream(timeout=30)

    async def raw(replicas: int, total: int) -> dict[str, Any]:
        name = f"PROBE_RAW_R{replicas}"
        await js.add_stream(name=name, subjects=[f"probe.raw.r{replicas}"], num_replicas=replicas)
        subject = f"probe.raw.r{replicas}"

        async def run() -> int:
            for _ in range(total // 1000):
                futures = [await js.publish_async(subject, PAYLOAD) for _ in range(1000)]
                await asyncio.gather(*futures)
            return total

        try:
            return medians([await timed(run, pids) for _ in range(rounds)])
        finally:
            await js.delete_stream(name)

    out["raw_publish_async_r3"] = await raw(3, 60_000)
    out["raw_publish_async_r1"] = await raw(1, 6_000)
    await nc.close()

    engine = JetStreamLogEngine(
        JetStreamConfig(servers=tuple(cluster.url.split(",")), request_timeout_seconds=30.0)
    )
    await engine.start()
    try:
        topic = f"probe{secrets.token_hex(3)}"
        await engine.create_topic(topic, 64, TopicLogConfig(replicas=3))
        values = [PAYLOAD] * 1000

        async def batches(partitions: int, per_partition: int) -> int:
            async def writer(p: int) -> None:
                for _ in range(per_partition):
                    await engine.append(topic, {p: ValueRecords(values)})

            await asyncio.gather(*(writer(p) for p in range(partitions)))
            return partitions * per_partition * 1000

        for partitions, per in ((1, 60), (4, 15), (16, 4), (64, 1)):
            runs = [await timed(lambda p=partitions, n=per: batches(p, n), pids) for _ in range(rounds)]
            out[f"engine_batch1000_p{partitions}"] = medians(runs)

        async def singles(in_flight: int, total: int) -> int:
            next_i = 0

            async def caller() -> None:
                nonlocal next_i
                while next_i < total:
                    next_i += 1
                    await engine.append(topic, {0: ValueRecords([PAYLOAD])})

            await asyncio.gather(*(caller() for _ in range(in_flight)))
            return total

        out["engine_single_64_in_flight"] = medians(
            [await timed(lambda: singles(64, 6000), pids) for _ in range(rounds)]
        )

        async def spread(count: int) -> int:
            for _ in range(count):
                await engine.append(topic, {p: ValueRecords(values[:250]) for p in range(4)})
            return count * 1000

        out["engine_batch1000_over_4_partitions_txn"] = medians(
            [await timed(lambda: spread(40), pids) for _ in range(rounds)]
        )

        async def reads(total: int) -> int:
            offset = 0
            while offset < total:
                records = await engine.read(topic, 0, offset, max_records=1000, max_bytes=8 << 20)
                offset += len(records)
            return total

        out["engine_read_1000_per_call"] = medians(
            [await timed(lambda: reads(60_000), pids) for _ in range(rounds)]
        )
        await engine.delete_topic(topic)
    finally:
        await engine.close()
    return out


async def probe_streams(cluster: Any, count: int) -> dict[str, Any]:
    from app.stores.log.jetstream.engine import JetStreamConfig, JetStreamLogEngine
    from app.stores.log.protocol import TopicLogConfig

    pids = [n.process.pid for n in cluster.nodes]
    engine = JetStreamLogEngine(
        JetStreamConfig(servers=tuple(cluster.url.split(",")), request_timeout_seconds=30.0)
    )
    await engine.start()
    out: dict[str, Any] = {"streams": count, "replicas": 3}
    try:
        await asyncio.sleep(5)
        idle_window = 10.0
        cpu0 = cpu_seconds(pids)
        await asyncio.sleep(idle_window)
        out["idle_cores_before"] = (cpu_seconds(pids) - cpu0) / idle_window
        rss0 = rss_bytes(pids)
        disk0 = dir_bytes(cluster.root)
        topics = [f"st{secrets.token_hex(4)}" for _ in range(count)]
        gate = asyncio.Semaphore(8)  # as the engine creates a topic's partitions: eight at a time

        async def create(topic: str) -> None:
            async with gate:
                await engine.create_topic(topic, 1, TopicLogConfig(replicas=3))

        started = time.perf_counter()
        cpu1 = cpu_seconds(pids)
        await asyncio.gather(*(create(t) for t in topics))
        elapsed = time.perf_counter() - started
        out["create_per_s"] = count / elapsed
        out["create_server_cores"] = (cpu_seconds(pids) - cpu1) / elapsed
        await asyncio.sleep(10)  # let Raft groups settle before sampling memory and idle CPU
        out["rss_bytes_per_stream_all_replicas"] = (rss_bytes(pids) - rss0) / count
        out["disk_bytes_per_stream_all_replicas"] = (dir_bytes(cluster.root) - disk0) / count
        cpu2 = cpu_seconds(pids)
        await asyncio.sleep(idle_window)
        out["idle_cores_after"] = (cpu_seconds(pids) - cpu2) / idle_window
        out["idle_core_per_1000_streams"] = (
            (out["idle_cores_after"] - out["idle_cores_before"]) / count * 1000
        )
        started = time.perf_counter()

        async def delete(topic: str) -> None:
            async with gate:
                await engine.delete_topic(topic)

        await asyncio.gather(*(delete(t) for t in topics))
        out["delete_per_s"] = count / (time.perf_counter() - started)
    finally:
        await engine.close()
    return out


# -- Postgres ----------------------------------------------------------------------------------------------


async def probe_postgres(rounds: int, seconds: float) -> dict[str, Any]:
    import asyncpg
    import httpx

    from app.broker import keys, tenancy
    from app.broker.delivery import checkpoints as push_checkpoints
    from app.broker.delivery import membership
    from app.broker.rate_limits import Tier
    from app.broker.topics import Scope
    from app.cli import migrate
    from app.main import create_app
    from app.settings import Settings
    from app.stores.metadata.express import ExpressWriter
    from app.stores.metadata.partition_repositories import checkpoint_express

    name = f"qc_scaling_probe_{os.getpid()}"
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    base = ADMIN_DSN.rsplit("/", 1)[0]
    url = f"{base.replace('postgresql://', 'postgresql+asyncpg://', 1)}/{name}"
    data_dir = Path(tempfile.mkdtemp(prefix="qc-scaling-probe-"))
    out: dict[str, Any] = {}
    try:
        settings = Settings(
            data_dir=data_dir,
            database_url=url,
            secret_key="probe-secret-" + "x" * 32,
            key_last_used_flush_seconds=3600.0,
        )  # type: ignore[call-arg]
        await asyncio.to_thread(migrate, settings)
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            services = app.state.services
            metadata = services.metadata
            async with metadata.session() as session:
                project = await tenancy.create_project(
                    session, f"probe-{secrets.token_hex(4)}", Tier.enterprise
                )
                await tenancy.set_tier(
                    session, project.id, Tier.enterprise, {"publish": 10**6, "consume": 10**6, "admin": 10**4}
                )
                key = await keys.create_key(session, settings.server_secret(), project.id, "production")
            headers = {"Authorization": f"Bearer {key.key}"}
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://probe", headers=headers
            ) as http:
                topic_name = "probe"
                r = await http.post("/v1/topics", json={"name": topic_name, "partitions": 16})
                r.raise_for_status()
                topic = await services.publisher.topics.resolve(Scope(project.id, "production"), topic_name)
                # Enough records for every pull round: 4 partitions x 100 per poll x polls.
                for p in range(4):
                    for _ in range(40):
                        body = {"messages": [{"data": {"n": i}, "partition": p} for i in range(1000)]}
                        (
                            await http.post(f"/v1/topics/{topic_name}/messages/batch", json=body)
                        ).raise_for_status()

            # Checkpoints: a push member owns the partitions; each writer checkpoints its own partition.
            joined = await membership.join(metadata, services.log, topic, "push", start_from="earliest")
            group_id, epochs = await _group_epochs(base, name, "push")
            dialect = metadata.engine.dialect
            for writers in (1, 4, 16):
                express = [ExpressWriter(url.replace("+asyncpg", ""), dialect) for _ in range(writers)]

                async def checkpoints(ws: list[ExpressWriter] = express) -> int:
                    done = 0
                    stop = time.perf_counter() + seconds

                    async def writer(i: int, w: ExpressWriter) -> None:
                        nonlocal done
                        position = 0
                        while time.perf_counter() < stop:
                            position += 1
                            fenced = await checkpoint_express(
                                w, group_id, joined.member_id, [(i, epochs[i], position)]
                            )
                            assert not fenced, "the probe's checkpoint was fenced"
                            done += 1

                    await asyncio.gather(*(writer(i, w) for i, w in enumerate(ws)))
                    return done

                for i, w in enumerate(express):  # connect first: their backends are counted from the start
                    await checkpoint_express(w, group_id, joined.member_id, [(i, epochs[i], 0)])
                runs = [await timed(checkpoints, await postgres_pids(ADMIN_DSN, name)) for _ in range(rounds)]
                for w in express:
                    await w.close()
                out[f"checkpoint_express_w{writers}"] = medians(runs)

            # A push member's beat (every 0.5 s per WebSocket member, push.BEAT_EVERY): the heartbeat and
            # due-lease scan (``poll_once(fresh=False)``, a write) and the claim read of ``_reconcile``.
            beaters = [
                await membership.join(metadata, services.log, topic, f"beat{i}", start_from="earliest")
                for i in range(4)
            ]
            beat_ids = [(await _group_epochs(base, name, f"beat{i}"))[0] for i in range(4)]

            async def beats() -> int:
                done = 0
                stop = time.perf_counter() + seconds

                async def member(i: int, m: Any) -> None:
                    nonlocal done
                    while time.perf_counter() < stop:
                        await poll_once(
                            metadata, services.log, topic, f"beat{i}", m, 100, heartbeat=True, fresh=False
                        )
                        async with metadata.session(readonly=True) as session:
                            await push_checkpoints.read_claim(session, beat_ids[i], m.member_id)
                        done += 1

                await asyncio.gather(*(member(i, m) for i, m in enumerate(beaters)))
                return done

            runs = [await timed(beats, await postgres_pids(ADMIN_DSN, name)) for _ in range(rounds)]
            out["push_beat_4_groups"] = medians(runs)

            # Pull: 4 members on a 4-partition topic, poll 100 then ack them, for ``seconds``.
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://probe", headers=headers
            ) as http:
                r = await http.post("/v1/topics", json={"name": "pull", "partitions": 4})
                r.raise_for_status()
                for p in range(4):
                    for _ in range(60):
                        body = {"messages": [{"data": {"n": i}, "partition": p} for i in range(1000)]}
                        (await http.post("/v1/topics/pull/messages/batch", json=body)).raise_for_status()
            pull_topic = await services.publisher.topics.resolve(Scope(project.id, "production"), "pull")
            members = [
                await membership.join(metadata, services.log, pull_topic, "pull", start_from="earliest")
                for _ in range(4)
            ]
            members = [
                await membership.join(metadata, services.log, pull_topic, "pull", member_id=m.member_id)
                for m in members
            ]
            messages = 0
            poll_ms: list[float] = []
            ack_ms: list[float] = []

            async def pull_cycles() -> int:
                nonlocal messages
                cycles = 0
                stop = time.perf_counter() + seconds

                async def member(m: Any) -> None:
                    nonlocal cycles, messages
                    while time.perf_counter() < stop:
                        t0 = time.perf_counter()
                        polled = await poll_once(metadata, services.log, pull_topic, "pull", m, 100)
                        if not polled.ids:
                            return
                        t1 = time.perf_counter()
                        await ack(metadata, pull_topic, "pull", m, polled.ids)
                        poll_ms.append((t1 - t0) * 1000)
                        ack_ms.append((time.perf_counter() - t1) * 1000)
                        cycles += 1
                        messages += len(polled.ids)

                await asyncio.gather(*(member(m) for m in members))
                return cycles

            runs = []
            for _ in range(rounds):
                messages = 0
                run = await timed(pull_cycles, await postgres_pids(ADMIN_DSN, name))
                run["msgs_per_s"] = messages / run["seconds"]
                run["poll_p50_ms"] = statistics.median(poll_ms)
                run["ack_p50_ms"] = statistics.median(ack_ms)
                poll_ms.clear()
                ack_ms.clear()
                runs.append(run)
            out["pull_poll100_ack_4_members"] = medians(runs)
            out["pull_poll100_ack_4_members"]["note"] = "per_s counts poll+ack cycles (2 transactions each)"
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def poll_once(metadata: Any, log: Any, topic: Any, group: str, m: Any, n: int, **options: Any) -> Any:
    """``leases.poll_once`` for a joined member, whether the delivery calls take a ``MemberRef`` (since the
    delivery restructuring) or the topic, group, member id and generation one by one (before it)."""
    from app.broker.delivery import leases, membership

    if hasattr(membership, "MemberRef"):
        member = membership.MemberRef(topic, group, m.member_id, m.generation)
        return leases.poll_once(metadata, log, member, n, **options)
    return leases.poll_once(metadata, log, topic, group, m.member_id, m.generation, n, **options)


def ack(metadata: Any, topic: Any, group: str, m: Any, ids: list[str]) -> Any:
    """``leases.ack`` for a joined member (either calling convention, as ``poll_once``)."""
    from app.broker.delivery import leases, membership

    if hasattr(membership, "MemberRef"):
        return leases.ack(metadata, membership.MemberRef(topic, group, m.member_id, m.generation), ids)
    return leases.ack(metadata, topic, group, m.member_id, m.generation, ids)


async def _group_epochs(base: str, database: str, group: str) -> tuple[str, dict[int, int]]:
    """A group's id and the epoch of each of its partitions (what a checkpoint must name)."""
    import asyncpg

    conn = await asyncpg.connect(f"{base}/{database}")
    try:
        group_id = str(await conn.fetchval("SELECT id FROM consumer_groups WHERE name = $1", group))
        rows = await conn.fetch("SELECT partition, epoch FROM group_partitions WHERE group_id = $1", group_id)
        return group_id, {int(r["partition"]): int(r["epoch"]) for r in rows}
    finally:
        await conn.close()


# -- Redis -------------------------------------------------------------------------------------------------


def _redis_worker(total: int, callers: int, queue: Any) -> None:
    async def run() -> float:
        from app.stores.limits.redis import RedisRateLimiter

        limiter = RedisRateLimiter(REDIS_URL, key_prefix=f"qc:probe:{secrets.token_hex(4)}:")
        tag = secrets.token_hex(4)
        next_i = 0

        async def caller() -> None:
            nonlocal next_i
            while next_i < total:
                i = next_i
                next_i += 1
                await limiter.acquire(f"{tag}:{i % 1000}", 1000)

        for i in range(500):  # warm-up
            await limiter.acquire(f"{tag}:w{i}", 1000)
        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        elapsed = time.perf_counter() - started
        await limiter.close()
        return elapsed

    queue.put(asyncio.run(run()))


async def probe_redis(rounds: int, processes: int = 2, total: int = 20_000) -> dict[str, Any]:
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL)
    runs = []
    for _ in range(rounds):
        info = await client.info("cpu")
        cpu0 = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        queue: Any = multiprocessing.get_context("spawn").Queue()
        workers = [
            multiprocessing.get_context("spawn").Process(target=_redis_worker, args=(total, 50, queue))
            for _ in range(processes)
        ]
        started = time.perf_counter()
        for w in workers:
            w.start()
        elapsed = [queue.get(timeout=300) for _ in workers]
        wall = time.perf_counter() - started
        for w in workers:
            w.join()
        info = await client.info("cpu")
        redis_cpu = float(info["used_cpu_user"]) + float(info["used_cpu_sys"]) - cpu0
        decisions = processes * total
        runs.append(
            {
                "per_s": decisions / max(elapsed),
                "redis_cpu_seconds_per_100k": redis_cpu / decisions * 100_000,
                "redis_cores_during_run": redis_cpu / wall,
                "seconds": max(elapsed),
            }
        )
    await client.aclose()
    out = medians(runs)
    out["decisions_per_redis_core_s"] = 100_000 / out["redis_cpu_seconds_per_100k"]
    out["processes"] = processes
    return {"limiter_2_processes": out}


# -- report ------------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        "# Scaling probes: what one component does on this machine",
        "",
        (
            f"Last written {report['generated']} by `bench/scaling_probes.py` (`{report['command']}`). "
            "Raw figures: `scaling_probes.json`."
        ),
        "",
        *[
            f"- section `{name}`: run {run['generated']} (`{run['command']}`), load average {run['load_average']}"
            for name, run in report.get("sections", {}).items()
        ],
        "",
        (
            f"Machine: {report['machine']['cpus']} shared vCPUs, {report['machine']['platform']}, Python "
            f"{report['machine']['python']}; load average at the start of that run {report['machine']['load_average']}. "
            "**Every client and every server below shares these 2 cores** (and other sessions' work): a "
            "figure is what this box did, not what the component does on a machine of its own. `cores` "
            "columns are CPU seconds per second of wall time (1.0 = one core busy); `µs` columns are CPU time per "
            "item (median over the rounds of each round's CPU / items): those are what `bench/capacity_model.py` "
            "scales from, since the wall rates mostly say how busy the box was."
        ),
        "",
    ]
    js = report.get("jetstream")
    if js:
        lines += [
            "## JetStream, 3-node cluster (nats-server 2.15, `sync_interval: always`), 200 B records",
            "",
            "| probe | msgs/s | client cores | NATS cores (3 servers) | client µs/msg | NATS µs/msg | runs |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for key, label in (
            ("raw_publish_async_r3", "nats-py publish_async ×1000, R=3 stream"),
            ("raw_publish_async_r1", "nats-py publish_async ×1000, R=1 stream"),
            ("engine_batch1000_p1", "engine append, batches of 1,000, 1 partition (R=3)"),
            ("engine_batch1000_p4", "engine append, batches of 1,000, 4 partitions at once"),
            ("engine_batch1000_p16", "engine append, batches of 1,000, 16 partitions at once"),
            ("engine_batch1000_p64", "engine append, batches of 1,000, 64 partitions at once"),
            ("engine_single_64_in_flight", "engine append, 1 record each, 64 in flight, 1 partition"),
            ("engine_batch1000_over_4_partitions_txn", "engine append, 1,000 records over 4 partitions (commit record)"),
            ("engine_read_1000_per_call", "engine read, 1,000 records per call, 1 partition"),
        ):  # fmt: skip
            row = js.get(key)
            if row:
                lines.append(
                    f"| {label} | {row['per_s']:,.0f} | {row['client_cores']:.2f} | "
                    f"{row['server_cores']:.2f} | {row['client_cpu_per_item'] * 1e6:.1f} | "
                    f"{row['server_cpu_per_item'] * 1e6:.1f} | {row['runs']} |"
                )
        lines.append("")
    st = report.get("streams")
    if st:
        lines += [
            f"## Streams: {st['streams']} R=3 streams on the same cluster",
            "",
            "| figure | value |",
            "|---|---:|",
            f"| created per second (8 at a time) | {st['create_per_s']:,.1f} |",
            f"| NATS cores while creating | {st['create_server_cores']:.2f} |",
            f"| resident memory per stream, 3 replicas together | {st['rss_bytes_per_stream_all_replicas'] / 1024:,.0f} KiB |",
            f"| disk per empty stream, 3 replicas together | {st['disk_bytes_per_stream_all_replicas'] / 1024:,.1f} KiB |",
            f"| idle NATS cores before / after | {st['idle_cores_before']:.3f} / {st['idle_cores_after']:.3f} |",
            f"| idle NATS cores per 1,000 idle streams | {st['idle_core_per_1000_streams']:.3f} |",
            f"| deleted per second | {st['delete_per_s']:,.1f} |",
            "",
        ]  # fmt: skip
    pg = report.get("postgres")
    if pg:
        lines += [
            "## Postgres metadata store (Postgres 15 on this host, `synchronous_commit` on)",
            "",
            "| probe | transactions/s | client cores | Postgres cores | client µs/tx | Postgres µs/tx | runs |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for key, label in (
            ("checkpoint_express_w1", "push checkpoint (1 UPDATE, commit), 1 writer"),
            ("checkpoint_express_w4", "push checkpoint, 4 writers (connections)"),
            ("checkpoint_express_w16", "push checkpoint, 16 writers"),
            ("push_beat_4_groups", "push member beat (heartbeat + due scan, claim read), 4 groups"),
        ):
            row = pg.get(key)
            if row:
                lines.append(
                    f"| {label} | {row['per_s']:,.0f} | {row['client_cores']:.2f} | "
                    f"{row['server_cores']:.2f} | {row['client_cpu_per_item'] * 1e6:.0f} | "
                    f"{row['server_cpu_per_item'] * 1e6:.0f} | {row['runs']} |"
                )
        row = pg.get("pull_poll100_ack_4_members")
        if row:
            lines += [
                "",
                (
                    "Pull, 4 members on 4 partitions, `poll_once` of 100 then `ack` of them (two units of work; "
                    "the broker's functions, no HTTP):"
                ),
                "",
                (
                    "| cycles/s | msgs/s | poll p50 ms | ack p50 ms | client cores | Postgres cores | "
                    "client ms/cycle | Postgres ms/cycle | runs |"
                ),
                "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
                (
                    f"| {row['per_s']:,.0f} | {row['msgs_per_s']:,.0f} | {row['poll_p50_ms']:.1f} | "
                    f"{row['ack_p50_ms']:.1f} | {row['client_cores']:.2f} | {row['server_cores']:.2f} | "
                    f"{row['client_cpu_per_item'] * 1e3:.2f} | {row['server_cpu_per_item'] * 1e3:.2f} | {row['runs']} |"
                ),
            ]
        lines.append("")
    rd = report.get("redis", {}).get("limiter_2_processes")
    if rd:
        lines += [
            "## Redis rate limiter, 2 client processes × 50 callers",
            "",
            "| decisions/s | Redis cores during run | Redis CPU s per 100k decisions | decisions per Redis core-second |",
            "|---:|---:|---:|---:|",
            (f"| {rd['per_s']:,.0f} | {rd['redis_cores_during_run']:.2f} | "
            f"{rd['redis_cpu_seconds_per_100k']:.2f} | {rd['decisions_per_redis_core_s']:,.0f} |"),
            "",
        ]  # fmt: skip
    lines += [
        "## Caveats",
        "",
        "- Two shared cores: the three NATS servers, Postgres, Redis and the Python client of each probe",
        "  compete for them, so a probe's throughput is bounded by the box as much as by the component.",
        "  The µs columns (CPU per item) are steadier than the rates; they still include contention (cache,",
        "  fsync queue, scheduler, CPU steal), so they overstate what an item costs on a dedicated core.",
        "- A 3-node cluster on one host shares one disk: a quorum write is three fsyncs on the same device.",
        "- Small samples (seconds per round); medians of the rounds; runs listed. Differences under ~15% are noise.",
        "",
    ]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from infra.nats_cluster import NatsCluster

    only = set(args.only.split(","))
    report: dict[str, Any] = {
        "generated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(["bench/scaling_probes.py", *sys.argv[1:]]),
        "machine": machine(),
    }
    if only & {"jetstream", "streams"}:
        root = Path(tempfile.mkdtemp(prefix="qc-scaling-nats-"))
        cluster = NatsCluster(root, base_port=BASE_PORT).start()
        try:
            if "jetstream" in only:
                report["jetstream"] = await probe_jetstream(cluster, args.rounds)
                print(json.dumps(report["jetstream"], indent=1), flush=True)
            if "streams" in only:
                report["streams"] = await probe_streams(cluster, args.streams)
                print(json.dumps(report["streams"], indent=1), flush=True)
        finally:
            cluster.stop()
            shutil.rmtree(root, ignore_errors=True)
    if "postgres" in only:
        report["postgres"] = await probe_postgres(args.rounds, args.seconds)
        print(json.dumps(report["postgres"], indent=1), flush=True)
    if "redis" in only:
        report["redis"] = await probe_redis(args.rounds)
        print(json.dumps(report["redis"], indent=1), flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a Postgres round")
    parser.add_argument("--streams", type=int, default=300, help="R=3 streams the streams probe creates")
    parser.add_argument("--only", default="jetstream,streams,postgres,redis")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        previous: dict[str, Any] = {}
        path = RESULTS / "scaling_probes.json"
        if path.exists() and set(args.only.split(",")) != {"jetstream", "streams", "postgres", "redis"}:
            previous = json.loads(path.read_text())  # a partial run keeps the other sections' figures
        merged = {**previous, **report}
        # Which run each section comes from (a partial run replaces only its own sections).
        sections = dict(previous.get("sections", {}))
        for name in ("jetstream", "streams", "postgres", "redis"):
            if name in report:
                sections[name] = {
                    "generated": report["generated"],
                    "command": report["command"],
                    "load_average": report["machine"]["load_average"],
                }
        merged["sections"] = sections
        path.write_text(json.dumps(merged, indent=2) + "\n")
        (RESULTS / "scaling_probes.md").write_text(render(merged))
    print(render(report))


if __name__ == "__main__":
    main()
