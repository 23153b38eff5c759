"""Log engine benchmark: the local engine vs NATS JetStream vs Redis Streams, same run, same machine.

Appends of 200-byte JSON messages in batches of 1, 100 and 1000 records, with 1 and 16 concurrent
writers, for ``--seconds`` per configuration, ``--rounds`` times; the figure is the median records/s.

* local: ``LocalLogEngine`` in a temporary directory, one partition, every append durable (group
  commit: one ``pwritev`` + one ``fdatasync`` for all waiting writers). Records are built before the
  clock starts; encoding them is part of the measured work.
* jetstream: a dedicated file-storage stream (created, then deleted); a batch is ``publish_async`` of
  N messages and awaiting their N acks (nats-py).
* redis: a dedicated stream key (deleted after); a batch is one pipelined round of N ``XADD``s.
  Note Redis acknowledges from memory: durability is whatever its AOF/RDB settings give (printed).

    .venv/bin/python bench/engine_bench.py [--seconds 2] [--rounds 3] [--only local,jetstream,redis]

Prints a table and writes bench/results/engine.md and engine.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import support
from support import RESULTS

from app.stores.log.local import LocalLogConfig, LocalLogEngine
from app.stores.log.protocol import RecordIn, TopicLogConfig

BATCHES = (1, 100, 1000)
WRITERS = (1, 16)


def payload(i: int = 0) -> bytes:
    """A 200-byte JSON message (``support.payload``), encoded."""
    data = json.dumps(support.payload(i), separators=(",", ":")).encode()
    assert len(data) == 200
    return data


async def drive(writers: int, seconds: float, one_batch: Callable[[int], Awaitable[int]]) -> float:
    """Run ``writers`` tasks calling ``one_batch(writer)`` until the deadline; records/s."""
    deadline = time.perf_counter() + seconds
    counts = [0] * writers

    async def writer(w: int) -> None:
        while time.perf_counter() < deadline:
            counts[w] += await one_batch(w)

    started = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    return sum(counts) / (time.perf_counter() - started)


# -- local engine -----------------------------------------------------------------------------------------


async def local_run(batch: int, writers: int, seconds: float, directory: Path) -> float:
    root = Path(tempfile.mkdtemp(prefix="engine-bench-", dir=directory))
    engine = LocalLogEngine(root, LocalLogConfig())
    await engine.start()
    try:
        await engine.create_topic("top_bench", 1, TopicLogConfig())
        # Distinct records per writer, built before the clock starts.
        records = [[RecordIn(value=payload(w * batch + i)) for i in range(batch)] for w in range(writers)]

        async def one(w: int) -> int:
            await engine.append("top_bench", {0: records[w]})
            return batch

        return await drive(writers, seconds, one)
    finally:
        await engine.close()
        shutil.rmtree(root, ignore_errors=True)


# -- NATS JetStream ----------------------------------------------------------------------------------------


async def jetstream_run(batch: int, writers: int, seconds: float) -> float:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    name = f"QCENGINEBENCH{os.getpid()}"
    subject = f"qcenginebench.{os.getpid()}"
    await js.add_stream(name=name, subjects=[subject], storage="file")
    data = payload()
    try:

        async def one(w: int) -> int:
            if batch == 1:
                await js.publish(subject, data)
                return 1
            futures = [await js.publish_async(subject, data) for _ in range(batch)]
            await asyncio.gather(*futures)
            return batch

        return await drive(writers, seconds, one)
    finally:
        await js.delete_stream(name)
        await nc.close()


async def jetstream_storage() -> str:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    try:
        return (
            f"file-storage stream on nats-server {str(nc.connected_server_version).strip('<>').split()[-1]} "
            "with default settings: "
            "its file store acknowledges a publish without waiting for an fsync (it syncs in the background)"
        )
    finally:
        await nc.close()


# -- Redis Streams -----------------------------------------------------------------------------------------


async def redis_run(batch: int, writers: int, seconds: float) -> float:
    from redis.asyncio import Redis

    client = Redis.from_url("redis://127.0.0.1:6379/0", max_connections=writers + 2)
    key = f"qc:bench:engine:{os.getpid()}"
    data = payload()
    try:

        async def one(w: int) -> int:
            pipe = client.pipeline(transaction=False)
            for _ in range(batch):
                pipe.xadd(key, {"v": data})
            await pipe.execute()
            return batch

        return await drive(writers, seconds, one)
    finally:
        await client.delete(key)
        await client.aclose()


async def redis_durability() -> str:
    from redis.asyncio import Redis

    client = Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        aof = (await client.config_get("appendonly")).get("appendonly")
        fsync = (await client.config_get("appendfsync")).get("appendfsync")
        return f"appendonly={aof}, appendfsync={fsync}"
    finally:
        await client.aclose()


# -- main ------------------------------------------------------------------------------------------------------


async def measure(args: argparse.Namespace) -> dict:
    systems = [s.strip() for s in args.only.split(",") if s.strip()]
    results: dict[str, dict[str, dict]] = {}
    notes: dict[str, str] = {}
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    if "redis" in systems:
        notes["redis"] = await redis_durability()
    if "jetstream" in systems:
        notes["jetstream"] = await jetstream_storage()
    notes["local"] = "fsync (fdatasync) per group commit"
    for system in systems:
        results[system] = {}
        for batch in BATCHES:
            for writers in WRITERS:
                runs = []
                for _ in range(args.rounds):
                    if system == "local":
                        rate = await local_run(batch, writers, args.seconds, directory)
                    elif system == "jetstream":
                        rate = await jetstream_run(batch, writers, args.seconds)
                    elif system == "redis":
                        rate = await redis_run(batch, writers, args.seconds)
                    else:
                        raise SystemExit(f"unknown system {system}")
                    runs.append(rate)
                key = f"batch={batch},writers={writers}"
                results[system][key] = {
                    "batch": batch,
                    "writers": writers,
                    "median": statistics.median(runs),
                    "runs": runs,
                }
                print(
                    f"{system:9} batch={batch:<5} writers={writers:<3} median {statistics.median(runs):>12,.0f} rec/s"
                    f"   runs {', '.join(f'{r:,.0f}' for r in runs)}",
                    flush=True,
                )
    return {"results": results, "notes": notes}


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }


def write_results(data: dict, args: argparse.Namespace) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "engine.json").write_text(json.dumps(data, indent=2) + "\n")
    systems = list(data["results"])
    lines = [
        "# Log engine benchmark",
        "",
        (
            f"Generated by `bench/engine_bench.py --seconds {args.seconds} --rounds {args.rounds}` on "
            f"{data['machine']['platform']}, {data['machine']['cpus']} CPUs, Python {data['machine']['python']}, "
            f"{data['machine'].get('event_loop', 'asyncio')} event loop."
        ),
        (
            "Records/s, median of the rounds; 200-byte JSON records appended in batches, every append "
            "acknowledged before the next one from the same writer."
        ),
        "",
        "| batch | writers | " + " | ".join(systems) + " |",
        "|---:|---:|" + "---:|" * len(systems),
    ]
    for batch in BATCHES:
        for writers in WRITERS:
            key = f"batch={batch},writers={writers}"
            cells = [
                f"{data['results'][s][key]['median']:,.0f}" for s in systems if key in data["results"][s]
            ]
            lines.append(f"| {batch} | {writers} | " + " | ".join(cells) + " |")
    lines += ["", "Durability of an acknowledged append:", ""]
    for system, note in data["notes"].items():
        if system in systems:
            lines.append(f"- {system}: {note}")
    lines.append("")
    lines.append(data.get("commentary", "").strip())
    (RESULTS / "engine.md").write_text("\n".join(lines).rstrip() + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of one run of one configuration")
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs per configuration (the median is reported)"
    )
    parser.add_argument("--only", default="local,jetstream,redis", help="comma-separated systems to measure")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the local engine's temp dirs go")
    parser.add_argument("--commentary", default="", help="a file whose text is appended to engine.md")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite engine.md from engine.json (e.g. with new commentary)",
    )
    args = parser.parse_args()
    if args.render_only:
        data = json.loads((RESULTS / "engine.json").read_text())
        if args.commentary:
            data["commentary"] = Path(args.commentary).read_text()
        args.seconds, args.rounds = data["settings"]["seconds"], data["settings"]["rounds"]
        write_results(data, args)
        return
    try:
        import uvloop

        uvloop.install()
        loop_name = "uvloop"
    except ImportError:  # pragma: no cover
        loop_name = "asyncio"
    data = asyncio.run(measure(args))
    data["machine"] = machine() | {"event_loop": loop_name}
    data["settings"] = {"seconds": args.seconds, "rounds": args.rounds}
    if args.commentary:
        data["commentary"] = Path(args.commentary).read_text()
    if not args.no_write:
        write_results(data, args)


if __name__ == "__main__":
    main()
