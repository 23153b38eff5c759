"""Where a bulk read's CPU goes, without Spark: one ``queuecore-server`` (embedded defaults, local engine) and
this process reading a topic whole by bulk reads as a Spark task does (``queuecore_spark``'s client and
decoder), one call after another; the server's CPU (from /proc) and this process's, per round.

    .venv/bin/python bench/bulk_read_cpu.py [--messages 400000] [--partitions 4] [--rounds 3]

For an A/B of the server's side, run it on each tree (e.g. ``git stash`` between two runs): the numbers are
CPU seconds for the same work, so they compare across runs of one machine better than wall times do.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "spark" / "src")]

import httpx
from queuecore_spark._http import BULK_PAGE, Client
from queuecore_spark._records import decode
from queuecore_spark._source import _arrow_schema
from spark_bench import publish

from tests.spark.support import CONNECTOR_SCHEMA, Server, unique


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = Server(Path(tempfile.mkdtemp(prefix="qc-bulk-cpu-")) / "data")
    server.data_dir.mkdir()
    server.cli("migrate")
    key = server.bootstrap("bulk-cpu")["development"]
    server.start()
    try:
        topic = unique("bulk")
        created = httpx.post(
            server.url + "/v1/topics",
            json={"name": topic, "partitions": args.partitions},
            headers={"Authorization": f"Bearer {key}"},
        )
        created.raise_for_status()
        publish(server.url, key, topic, args.messages)
        arrow = _arrow_schema(CONNECTOR_SCHEMA)
        assert server.process is not None
        rows = []
        for n in range(args.rounds):
            mine, theirs, start = own_cpu(), process_cpu(server.process.pid), time.perf_counter()
            read = 0
            with Client(server.url, key) as client:
                for partition in range(args.partitions):
                    at = 0
                    while True:
                        body = client.read_records(
                            topic, partition, from_offset=at, until_offset=args.messages, limit=BULK_PAGE
                        )
                        answer = decode(body, topic, partition, arrow)
                        if not answer.batches:
                            break
                        read += sum(batch.num_rows for batch in answer.batches)
                        at = answer.next_offset
            wall = time.perf_counter() - start
            row = (wall, process_cpu(server.process.pid) - theirs, own_cpu() - mine)
            assert read == args.messages, (read, args.messages)
            rows.append(row)
            print(
                f"round {n + 1}: {read} records in {row[0]:.2f} s; server CPU {row[1]:.2f} s "
                f"({row[1] / read * 1e6:.2f} us/record); reader CPU {row[2]:.2f} s",
                flush=True,
            )
        wall, server_s, reader_s = (statistics.median(r[i] for r in rows) for i in range(3))
        print(
            f"median: {args.messages / wall:,.0f} records/s; server {server_s / args.messages * 1e6:.2f} us/record, "
            f"reader {reader_s / args.messages * 1e6:.2f} us/record"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
