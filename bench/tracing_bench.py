"""What tracing costs the single publish: one QueueCore server with tracing off, one with it on (exporting
over OTLP/HTTP to a receiver on loopback that decodes nothing and answers at once), one on with 1 % of
traces sampled, driven by wrk in alternating rounds, each publish carrying a ``traceparent`` header (so the span has a parent and the
message a stored context).

    .venv/bin/python bench/tracing_bench.py [--seconds 5] [--rounds 3] [--connections 20] [--no-write]

Prints a table and writes bench/results/tracing.md and tracing.json (medians over ``--rounds``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from publish_bench import queuecore
from support import machine, payload, write_results, wrk

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_HEADER = f'wrk.headers["traceparent"] = "{TRACEPARENT}"\n'


class _Discard(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that reads each export and answers 200 with an empty response."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.exports += 1  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--no-write", action="store_true", help="print only (trial runs)")
    args = parser.parse_args()

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Discard)
    receiver.exports = 0  # type: ignore[attr-defined]
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
    servers = {
        "off": queuecore("tracing-off"),
        "on": queuecore("tracing-on", QUEUECORE_OTEL_ENDPOINT=endpoint),
        # What an operator does on a busy server: keep 1 % of the traces (the rest are not even recorded).
        "on, 1 % sampled": queuecore(
            "tracing-sampled",
            QUEUECORE_OTEL_ENDPOINT=endpoint,
            OTEL_TRACES_SAMPLER="traceidratio",
            OTEL_TRACES_SAMPLER_ARG="0.01",
        ),
    }
    body = json.dumps({"data": payload()}, separators=(",", ":"))
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    try:
        for server in servers.values():
            server.start()
            topic = httpx.post(
                f"{server.url}/v1/topics",
                json={"name": "bench", "partitions": 1},
                headers={"Authorization": f"Bearer {server.key}"},
            )
            topic.raise_for_status()
        for _ in range(args.rounds):
            for name, server in servers.items():
                url = f"{server.url}/v1/topics/bench/messages"
                rounds[name].append(
                    wrk(url, server.key, body, args.connections, args.seconds, extra=TRACE_HEADER)
                )
    finally:
        for server in servers.values():
            server.stop()
        receiver.shutdown()
    exports = receiver.exports  # type: ignore[attr-defined]
    medians = {
        name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in rounds.items()
    }
    lines = [
        "# Tracing: the single publish, off vs on",
        "",
        (
            f"{machine()}; wrk, {args.connections} connections, {args.rounds} alternating rounds of "
            f"{args.seconds} s (medians); every publish with a `traceparent`; {exports} OTLP exports received."
        ),
        "",
        "| tracing | msgs/s | p50 ms | p99 ms |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, m in medians.items():
        lines.append(f"| {name} | {m['rps']:,.0f} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} |")
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    if not args.no_write:
        write_results("tracing", {"medians": medians, "rounds": rounds}, markdown)


if __name__ == "__main__":
    main()
