"""What checking stored data on read costs: reads from sealed segments with and without the CRC and offset
checks of app/stores/log/local/reads.py, side by side in one run.

The local engine serves recent reads from its in-memory tail (not checked again: this process wrote it);
reads that reach the segment files (a consumer catching up, a replay, the Spark reader, a seek) check every
batch's CRC and that offsets follow on. This measures those reads: 200-byte JSON records appended in batches
of 100 to one partition with 1 MiB segments, then read from offset 0 to the end in reads of 500 records,
``--rounds`` times per arm, the arms alternating (ABBA); the figure is the median records/s of each arm and their
ratio. The "unchecked" arm replaces the CRC check with nothing (the offset check is free: an integer compare).

    .venv/bin/python bench/segment_reads.py [--records 200000] [--rounds 7]

Writes bench/results/segment_reads.md unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from app.stores.log.local import reads
from app.stores.log.local.config import LocalLogConfig
from app.stores.log.local.engine import LocalLogEngine
from app.stores.log.protocol import RecordIn, TopicLogConfig

RESULTS = ROOT / "bench" / "results"


async def fill(root: Path, records: int) -> LocalLogEngine:
    engine = LocalLogEngine(root, LocalLogConfig(segment_bytes=1 << 20))
    await engine.start()
    await engine.create_topic("bench", 1, TopicLogConfig())
    value = json.dumps({"order": 1, "customer": "c-0042", "items": ["x" * 20] * 5, "pad": "y" * 40}).encode()
    for _ in range(records // 100):
        await engine.append("bench", {0: [RecordIn(value=value) for _ in range(100)]})
    await engine.close()
    # Reopened: nothing in the in-memory tail, every read below goes to the files.
    engine = LocalLogEngine(root, LocalLogConfig(segment_bytes=1 << 20))
    await engine.start()
    return engine


async def read_all(engine: LocalLogEngine, records: int) -> float:
    offset, started = 0, time.perf_counter()
    while offset < records:
        got = await engine.read("bench", 0, offset, max_records=500, max_bytes=8 << 20)
        offset = got[-1].offset + 1
    return records / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    checked = reads.ensure_valid
    # As `queuecore-server serve` runs (QUEUECORE_GIL_SWITCH_INTERVAL_MS, 0.5 ms): reads run in a worker
    # thread, and every hop between it and the event loop waits up to one switch interval.
    sys.setswitchinterval(0.0005)

    async def run() -> dict[str, list[float]]:
        with tempfile.TemporaryDirectory() as tmp:
            engine = await fill(Path(tmp), args.records)
            # The segment files' active tail is kept in memory: read past it is what we measure.
            rates: dict[str, list[float]] = {"checked": [], "unchecked": []}
            try:
                for n in range(args.rounds):
                    # ABBA: neither arm always runs first (caches, the other work on the machine).
                    for arm in ("checked", "unchecked") if n % 2 == 0 else ("unchecked", "checked"):
                        reads.ensure_valid = checked if arm == "checked" else (lambda buf, position=0: None)  # type: ignore[assignment,misc]
                        rates[arm].append(await read_all(engine, args.records))
            finally:
                reads.ensure_valid = checked  # type: ignore[assignment]
                await engine.close()
            return rates

    async def share() -> float:
        """The share of a checked read's wall time spent inside the check (timed around each call): a figure
        the load of a shared machine moves far less than a ratio of two throughputs."""
        spent = 0.0

        def timed(buf: bytes | memoryview, position: int = 0) -> object:
            nonlocal spent
            started = time.perf_counter()
            try:
                return checked(buf, position)
            finally:
                spent += time.perf_counter() - started

        with tempfile.TemporaryDirectory() as tmp:
            engine = await fill(Path(tmp), args.records)
            reads.ensure_valid = timed  # type: ignore[assignment]
            try:
                started = time.perf_counter()
                for _ in range(3):
                    await read_all(engine, args.records)
                total = time.perf_counter() - started
            finally:
                reads.ensure_valid = checked  # type: ignore[assignment]
                await engine.close()
        return spent / total

    rates = asyncio.run(run())
    inside = asyncio.run(share())
    checked_median = statistics.median(rates["checked"])
    unchecked_median = statistics.median(rates["unchecked"])
    ratio = checked_median / unchecked_median
    lines = [
        "# Reads from segment files: the cost of checking stored data",
        "",
        "Written by `bench/segment_reads.py` (its docstring says what is measured). Both arms in one run,",
        "alternating; medians of records/s. Only reads that reach the segment files are checked (recent",
        "reads come from the in-memory tail).",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs (shared with other work during this run: the",
        "ratio is the figure to read, not the absolute rates).",
        "",
        "| arm | median records/s | rounds |",
        "|---|---:|---:|",
        f"| CRC + offset checks (as shipped) | {checked_median:,.0f} | {args.rounds} |",
        f"| without the CRC check | {unchecked_median:,.0f} | {args.rounds} |",
        "",
        f"Checked / unchecked: **{ratio:.3f}** ({(1 - ratio) * 100:+.1f} % cost).",
        "",
        f"Time inside the checks, timed around each call: **{inside * 100:.1f} %** of the checked reads' wall",
        "time (3 full reads of the partition).",
    ]
    print("\n".join(lines))
    if not args.no_write:
        (RESULTS / "segment_reads.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
