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

The Postgres section lives in ``scaling_probes_postgres.py``, the Markdown report in
``scaling_probes_report.py``.

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
sys.path.insert(
    0, str(ROOT / "bench")
)  # its sections (scaling_probes_postgres, _report), run as a script or not

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

    from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine
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
    from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine
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
        from scaling_probes_postgres import probe_postgres

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
    from scaling_probes_report import render

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
