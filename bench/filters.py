"""Filter cost: consume throughput of a group with and without a filter, side by side in one run.

One real ``queuecore-server serve`` (embedded SQLite metadata, local log engine). ``--messages`` 200-byte
messages are published once to a 1-partition ``at-least-once`` topic, each with a key and two headers.
Each round then drains the topic with one WebSocket member (``maxInFlight`` 1000, one ``ack`` frame per
delivered frame) in fresh groups, one after the other, in an order that rotates every round:

* **no filter** — the baseline;
* **filter, all match** — ``headers.type IN ("order.created", "order.paid") AND NOT hasPrefix(key,
  "test-")``: every message matches, so the same messages are delivered and the difference is what
  evaluating the filter costs (the target: at most 10 % fewer msgs/s than the baseline);
* **filter, half match** — ``headers.type = "order.created" AND NOT hasPrefix(key, "test-")``: half the
  messages are passed over (they count as acked); reported as delivered msgs/s and as messages the group
  got through (delivered + passed over) per second.

msgs/s run from the first frame to the last expected ack answered. Figures are medians of ``--rounds``;
the filter's cost is also given as the median of each round's own ratio to the no-filter drain.

    .venv/bin/python bench/filters.py [--messages 50000] [--rounds 7] [--no-write]

Writes bench/results/filters.md and filters.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import BenchServer
from support import machine, write_results

LIMITS = "publish=100000,consume=100000,admin=1000"
ALL_MATCH = 'headers.type IN ("order.created", "order.paid") AND NOT hasPrefix(key, "test-")'
HALF_MATCH = 'headers.type = "order.created" AND NOT hasPrefix(key, "test-")'
CASES = {"no filter": None, "filter, all match": ALL_MATCH, "filter, half match": HALF_MATCH}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used (``/proc/<pid>/stat``), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def message(i: int) -> dict[str, Any]:
    return {
        "data": {"orderId": f"ord_{i:08d}", "amount": 9900, "note": "x" * 120},
        "key": f"cust-{i % 997}",
        "headers": {"type": "order.created" if i % 2 == 0 else "order.paid", "region": "eu"},
    }


async def fill(http: httpx.AsyncClient, topic: str, count: int) -> None:
    for start in range(0, count, 1000):
        body = {"messages": [message(i) for i in range(start, min(count, start + 1000))]}
        (await http.post(f"/v1/topics/{topic}/messages/batch", json=body)).raise_for_status()


async def drain(server: BenchServer, topic: str, group: str, expected: int) -> float:
    """One WebSocket member of ``group`` reads the topic and acks every frame; the seconds from the first
    frame until ``expected`` acks were answered (with half matching, the last match is the topic's last
    message but one, so that is when the group has gone through it all)."""
    from websockets.asyncio.client import connect

    url = f"ws://127.0.0.1:{server.port}/v1/topics/{topic}/consume?group={group}&startFrom=earliest&maxInFlight=1000"
    acked = 0
    done = asyncio.Event()
    started: list[float] = []

    async def read(ws: Any) -> None:
        nonlocal acked
        async for raw in ws:
            frame = json.loads(raw)
            kind = frame["type"]
            if kind in ("message", "messages"):
                if not started:
                    started.append(time.perf_counter())
                batch = frame["messages"] if kind == "messages" else [frame]
                await ws.send(json.dumps({"type": "ack", "ids": [m["id"] for m in batch]}))
            elif kind == "acked":
                acked += len(frame["ids"])
                if acked >= expected:
                    done.set()

    async with connect(
        url, additional_headers={"Authorization": f"Bearer {server.key}"}, max_size=None
    ) as ws:
        json.loads(await ws.recv())  # welcome
        reader = asyncio.create_task(read(ws))
        await asyncio.wait_for(done.wait(), 300)
        elapsed = time.perf_counter() - started[0]
        reader.cancel()
    return elapsed


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server = BenchServer("filters-bench", LIMITS)
    server.start()
    rounds: list[dict[str, dict[str, float]]] = []
    try:
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}, timeout=60
        ) as http:
            topic = f"bench-{secrets.token_hex(4)}"
            (
                await http.post(
                    "/v1/topics", json={"name": topic, "partitions": 1, "delivery": "at-least-once"}
                )
            ).raise_for_status()
            await fill(http, topic, args.messages)
            names = list(CASES)
            for r in range(args.rounds):
                figures: dict[str, dict[str, float]] = {}
                for case in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order
                    group = f"g-{r}-{secrets.token_hex(3)}"
                    config: dict[str, Any] = {} if CASES[case] is None else {"filter": CASES[case]}
                    (await http.put(f"/v1/topics/{topic}/groups/{group}", json=config)).raise_for_status()
                    expected = args.messages // 2 if case == "filter, half match" else args.messages
                    assert server.process is not None
                    cpu = cpu_seconds(server.process.pid)
                    seconds = await drain(server, topic, group, expected)
                    cpu = cpu_seconds(server.process.pid) - cpu
                    figures[case] = {
                        "delivered": expected / seconds,
                        "through": args.messages / seconds,
                        # The server's own CPU per message gone through: what load on the machine moves least.
                        "server_cpu_us": cpu / args.messages * 1e6,
                    }
                    print(f"round {r + 1} {case}: {expected / seconds:,.0f} delivered msgs/s", flush=True)
                rounds.append(figures)
    finally:
        server.stop()
    median = {
        case: {
            k: statistics.median(f[case][k] for f in rounds)
            for k in ("delivered", "through", "server_cpu_us")
        }
        for case in CASES
    }
    # The cost as the median of each round's own ratio (the two drains of a round ran back to back).
    ratios = [f["filter, all match"]["delivered"] / f["no filter"]["delivered"] for f in rounds]
    cpu_ratios = [f["filter, all match"]["server_cpu_us"] / f["no filter"]["server_cpu_us"] for f in rounds]
    return {
        "load": " / ".join(f"{x:.1f}" for x in os.getloadavg()) + " (1/5/15 min)",
        "machine": machine(),
        "messages": args.messages,
        "rounds": rounds,
        "median": median,
        "all_match_ratio_median": statistics.median(ratios),
        "all_match_ratios": ratios,
        "all_match_cpu_ratio_median": statistics.median(cpu_ratios),
        "all_match_cpu_ratios": cpu_ratios,
    }


def write(report: dict[str, Any], args: argparse.Namespace) -> None:
    m = report["median"]
    base = m["no filter"]["delivered"]
    ratio = report["all_match_ratio_median"]
    cpu_ratio = report["all_match_cpu_ratio_median"]
    rows = "\n".join(
        f"| {case} | {m[case]['delivered']:,.0f} | {m[case]['through']:,.0f} | {m[case]['delivered'] / base:.2f} "
        f"| {m[case]['server_cpu_us']:.1f} |"
        for case in CASES
    )
    markdown = f"""# Filter cost

`.venv/bin/python bench/filters.py --messages {args.messages} --rounds {args.rounds}` on {report["machine"]};
medians of {args.rounds} rounds. One WebSocket member (`maxInFlight` 1000) drains {args.messages:,} messages
(200-byte data, a key, two headers) of a 1-partition `at-least-once` topic in a fresh group per case; the
three cases run back to back in each round, in an order that rotates every round.

| group | delivered msgs/s | messages gone through/s (delivered + passed over) | delivered vs no filter | server CPU µs per message gone through |
|---|---:|---:|---:|---:|
{rows}

**Filter cost** (every message matches, so the same messages are delivered), two ways:

- throughput: the median of each round's own ratio is **{ratio:.2f}** of the no-filter msgs/s
  ({(ratio - 1) * 100:+.1f} %; target: at most 10 % slower). Per round:
  {", ".join(f"{x:.2f}" for x in report["all_match_ratios"])}.
- the server's CPU time per message (user + system of the server process, `/proc/<pid>/stat`, which the
  machine's load moves much less than wall-clock throughput): the median of each round's ratio is
  **{cpu_ratio:.2f}** of the no-filter CPU per message ({(cpu_ratio - 1) * 100:+.1f} %). Per round:
  {", ".join(f"{x:.2f}" for x in report["all_match_cpu_ratios"])}.

Filter all match: `{ALL_MATCH}`. Half match: `{HALF_MATCH}` (half the messages are passed over and count
as acked: fewer deliveries, so more messages get through per second).

Caveats:
- The machine is shared and loaded while this ran (2 CPUs; other agents' builds and test suites run at the
  same time): absolute figures move from run to run; compare the columns of one run, and the per-round
  ratios, not figures across runs. Differences under ~10 % between single rounds are noise.
- The client (one Python process) and the server share the same CPUs.
- The filter is evaluated on each record's key and headers bytes (header values found in the stored
  bytes without decoding the JSON, the data never read); it is compiled once per group config into one
  Python function (`app/broker/filters.py`).
- Load average during the run: {report["load"]}.
"""
    write_results("filters", report, markdown)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-write", action="store_true", help="print only (trial runs)")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    if not args.no_write:
        write(report, args)
    print(
        json.dumps(
            {"median": report["median"], "all_match_ratio": report["all_match_ratio_median"]}, indent=2
        )
    )


if __name__ == "__main__":
    main()
