"""The JetStream engine's large reads over its bulk read links against the same reads through nats-py, side by
side on one 3-node cluster (``infra/nats_cluster.py``) on this machine.

    .venv/bin/python bench/bulk_link_bench.py [--records 200000] [--partitions 4] [--rounds 5]

One topic of ``--partitions`` partitions holds ``--records`` records of 200 bytes. Each round reads every
partition whole, all partitions at once, in pages of 5,000 records (a bulk read's page, ``BULK_CHUNK``):
once by an engine with ``bulk_read_min_records=1000`` (the default: the bulk links) and once by one with
``0`` (nats-py), in alternating order. Medians over ``--rounds``, and the median of each round's own ratio;
the API process's work around a read (framing, HTTP) is not in it. Writes bench/results/bulk_link.md and
bulk_link.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from support import machine, write_results

from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine
from app.stores.log.protocol import RecordIn, TopicLogConfig
from infra.nats_cluster import NatsCluster
from tests.fixtures.nats import free_base_port

PAGE = 5_000
VALUE = b'{"type":"order.created","note":"' + b"x" * 166 + b'"}'  # 200 bytes


async def read_all(engine: JetStreamLogEngine, topic: str, partitions: int) -> int:
    async def one(partition: int) -> int:
        offset, n = 0, 0
        while True:
            records = await engine.read(topic, partition, offset, max_records=PAGE, max_bytes=4 << 20)
            if not records:
                return n
            n += len(records)
            offset = records[-1].offset + 1

    return sum(await asyncio.gather(*(one(p) for p in range(partitions))))


async def run(args: argparse.Namespace, url: str) -> dict[str, object]:
    servers = tuple(url.split(","))
    bulk = JetStreamLogEngine(JetStreamConfig(servers=servers, bulk_read_min_records=1000))
    plain = JetStreamLogEngine(JetStreamConfig(servers=servers, bulk_read_min_records=0))
    await bulk.start()
    await plain.start()
    try:
        topic = "bench_bulk_link"
        await bulk.create_topic(topic, args.partitions, TopicLogConfig(replicas=3))
        per = args.records // args.partitions
        for partition in range(args.partitions):
            for start in range(0, per, 1000):
                await bulk.append(topic, {partition: [RecordIn(value=VALUE)] * min(1000, per - start)})
        total = per * args.partitions
        await read_all(bulk, topic, args.partitions)  # warm-up, both
        await read_all(plain, topic, args.partitions)
        rounds = []
        for r in range(args.rounds):
            took: dict[str, float] = {}
            for name in ("bulk", "client") if r % 2 == 0 else ("client", "bulk"):
                engine = bulk if name == "bulk" else plain
                t = time.perf_counter()
                n = await read_all(engine, topic, args.partitions)
                took[name] = time.perf_counter() - t
                assert n == total, (name, n, total)
            rounds.append(took)
            print(
                f"round {r + 1}: bulk links {took['bulk']:.2f} s, client {took['client']:.2f} s", flush=True
            )
        return {"records": total, "rounds": rounds}
    finally:
        await bulk.close()
        await plain.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="qc-bulk-link-"))
    cluster = NatsCluster(tmp / "nats", base_port=free_base_port()).start()
    try:
        result = asyncio.run(run(args, cluster.url))
    finally:
        cluster.stop()
    rounds = result["rounds"]
    assert isinstance(rounds, list)
    total = int(str(result["records"]))
    bulk = statistics.median(r["bulk"] for r in rounds)
    client = statistics.median(r["client"] for r in rounds)
    per_round = statistics.median(r["client"] / r["bulk"] for r in rounds)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True
    ).stdout.strip()
    summary = {
        "commit": commit,
        "machine": machine(),
        "records": total,
        "partitions": args.partitions,
        "rounds": rounds,
        "bulk_records_per_s": total / bulk,
        "client_records_per_s": total / client,
        "speedup_of_medians": client / bulk,
        "speedup_per_round": per_round,
    }
    lines = [
        "# JetStream bulk read links against nats-py",
        "",
        (
            f"`bench/bulk_link_bench.py --records {args.records} --partitions {args.partitions} "
            f"--rounds {args.rounds}`, commit {commit}, {summary['machine']}; a 3-node NATS cluster on the "
            f"same machine. Every partition read whole, all at once, in pages of {PAGE:,} records, by the "
            f"engine's `read`; medians of {args.rounds} rounds, the two reads of a round one after the other "
            "in alternating order."
        ),
        "",
        "| read | records/s (median) | × nats-py |",
        "|---|---:|---:|",
        (
            f"| bulk read links (`bulk_read_min_records=1000`, the default) | {total / bulk:,.0f} | "
            f"**{client / bulk:.2f}** (per round: {per_round:.2f}) |"
        ),
        f"| nats-py (`bulk_read_min_records=0`, before) | {total / client:,.0f} | 1.00 |",
        "",
        "| round | bulk links s | nats-py s |",
        "|---:|---:|---:|",
        *(f"| {i + 1} | {r['bulk']:.2f} | {r['client']:.2f} |" for i, r in enumerate(rounds)),
        "",
    ]
    write_results("bulk_link", summary, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
