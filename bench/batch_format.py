"""The local engine's record batches, two trees side by side: what encoding a batch (the publish path's
share of it), decoding it to ``Record``s (JSON reads, push and pull delivery) and, where the tree has it,
slicing it into columns (bulk reads) cost a record, in this process's CPU.

    .venv/bin/python bench/batch_format.py --base /path/to/other/checkout [--rounds 5] [--no-write]

Each round runs one child process per tree (``PYTHONPATH`` set to the tree, the same interpreter), in turn
A B A B ...; each child times every shape and prints microseconds a record (best of a few repetitions).
Writes bench/results/batch_format.md and .json: the median of the rounds for each tree, and the ratio
(this tree ÷ base) of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import ROOT, machine, write_results

# The child: imports ``app`` of the tree on its PYTHONPATH.
CHILD = textwrap.dedent(
    """
    import json, time
    from app.stores.log.local import records as r
    from app.stores.log.protocol import RecordIn, ValueRecords

    value = b'{"id":1,"text":"' + b"x" * 170 + b'"}'
    shapes = {
        "bare values (a batch publish)": ValueRecords([value] * 1000, 1_700_000_000_000),
        "keyed, idempotency header": [
            RecordIn(value, b"user-%d" % i, b'{"h":null,"i":"key-%d"}' % i, 1_700_000_000_000 + i)
            for i in range(1000)
        ],
        "one record (a single publish)": [RecordIn(value, None, None, 1_700_000_000_000)],
    }

    def best(fn, n):
        times = []
        for _ in range(7):
            start = time.perf_counter()
            for _ in range(n):
                fn()
            times.append(time.perf_counter() - start)
        return min(times) / n

    out = {}
    for name, records in shapes.items():
        reps = max(1, 20_000 // len(records))
        encoded = r.encode_batch(records, 0, now_ms=1)
        buf = encoded.header + encoded.body
        header = r.ensure_valid(buf)
        count = len(records)
        out[name] = {
            "encode": best(lambda: r.encode_batch(records, 0, now_ms=1), reps) / count * 1e6,
            "decode": best(lambda: r.decode_batch(buf, 0, header, []), reps) / count * 1e6,
        }
        if hasattr(r, "batch_columns"):
            out[name]["columns"] = best(lambda: r.batch_columns(buf, 0, header, 0, 1 << 62), reps) / count * 1e6
    print(json.dumps(out))
    """
)


def run(tree: Path) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, cwd=tree, capture_output=True, check=True, text=True
    )
    return json.loads(done.stdout)


def revision(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True
    )
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="a checkout of the tree to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    base = Path(args.base).resolve()
    revisions = {name: revision(tree) for name, tree in (("this", ROOT), ("base", base))}
    rounds: list[dict[str, dict[str, dict[str, float]]]] = []
    for n in range(args.rounds):
        rounds.append({"this": run(ROOT), "base": run(base)})
        print(f"round {n + 1}: {json.dumps(rounds[-1])}", flush=True)
    rows = []
    for shape, figures in rounds[0]["this"].items():
        for what in figures:
            this = statistics.median(r["this"][shape][what] for r in rounds)
            had = [r["base"][shape].get(what) for r in rounds]
            before = statistics.median(had) if None not in had else None
            rows.append({"shape": shape, "what": what, "this_us": this, "base_us": before})
    lines = [
        "# Record batches: columns (this tree) against rows (base)",
        "",
        (
            f"`bench/batch_format.py`, {machine()}; this tree {revisions['this']} (with uncommitted changes, if "
            f"any), base {revisions['base']}. Microseconds of one process's CPU a record, best of 7 repetitions "
            f"in a child process, median of {args.rounds} rounds (the two trees' children in turn). Batches of "
            "1,000 records of 200 bytes but the single record. `encode`: `records.encode_batch` (publishing); "
            "`decode`: `decode_batch` into `Record`s (JSON reads, push and pull delivery); `columns`: "
            "`batch_columns` (bulk reads; the base has none: its bulk read decoded `Record`s)."
        ),
        "",
        "| shape | what | this tree µs/record | base µs/record | this ÷ base |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        base_us = row["base_us"]
        ratio = f"{row['this_us'] / base_us:.2f}" if base_us else ""
        shown = f"{base_us:.3f}" if base_us else "(decode)"
        lines.append(f"| {row['shape']} | {row['what']} | {row['this_us']:.3f} | {shown} | {ratio} |")
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    if not args.no_write:
        write_results("batch_format", {"revisions": revisions, "rows": rows, "rounds": rounds}, markdown)


if __name__ == "__main__":
    main()
