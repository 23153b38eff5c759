"""``queuecore bench TOPIC``: publish N messages in batches and report throughput and publish latency
percentiles; with ``--consume``, also consume and ack them with a fresh group and report end-to-end latency.

Latencies are measured by this process: a publish's is the round trip of its batch request; a message's
end-to-end latency is from just before its batch was sent to its delivery to the handler (one clock, this
process's). The bench group is set to the topic's end before publishing, so it gets exactly this run's
messages, and it is deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
import uuid
from typing import Any

from .._client import QueueCore
from ._args import Subcommands, add_command, batch_size, default_format, positive, seconds
from ._errors import EXIT_API, EXIT_OK
from ._output import Progress, emit, error

__all__ = ["register"]


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p95/p99 by nearest rank, in the samples' unit, rounded to 0.01."""
    if not samples:
        return {}
    ordered = sorted(samples)

    def rank(p: float) -> float:
        return round(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)], 2)

    return {"p50": rank(50), "p95": rank(95), "p99": rank(99)}


def _payloads(run_id: str, count: int, size: int) -> list[dict[str, Any]]:
    base = len(json.dumps({"bench": run_id, "n": count, "t": time.time(), "pad": ""}))
    pad = "x" * max(0, size - base)
    return [{"bench": run_id, "n": n, "t": 0.0, "pad": pad} for n in range(count)]


class _Receiver:
    """The consuming side of a bench run: acks this run's messages and times them."""

    def __init__(self, client: QueueCore, topic: str, group: str, run_id: str, expected: int) -> None:
        self.run_id, self.expected = run_id, expected
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.first = self.last = 0.0
        self.done = threading.Event()
        self.failure: BaseException | None = None
        self.consumer = client.consume(topic, group=group, start_from="latest", max_in_flight=1000)
        self.consumer.on("message", self.handle)
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            self.consumer.start()
        except BaseException as exc:  # noqa: BLE001 — reported by the main thread
            self.failure = exc
        finally:
            self.done.set()

    def handle(self, message: Any) -> None:
        now = time.time()
        data = message.data
        message.ack()
        if not isinstance(data, dict) or data.get("bench") != self.run_id:
            return
        with self.lock:
            self.latencies.append((now - float(data["t"])) * 1000)
            self.first = self.first or now
            self.last = now
            if len(self.latencies) >= self.expected:
                self.consumer.stop()


def cmd_bench(client: QueueCore, args: argparse.Namespace) -> int:
    """Run the bench and print its report."""
    run_id = uuid.uuid4().hex[:12]
    group = f"bench-{run_id}"
    receiver: _Receiver | None = None
    if args.consume:
        client.consumer_groups.update(args.topic, group)
        client.consumer_groups.reset_offsets(args.topic, group, to="latest")
        receiver = _Receiver(client, args.topic, group, run_id, args.messages)
        receiver.thread.start()
    payloads = _payloads(run_id, args.messages, args.size)
    progress = Progress(sys.stderr.isatty(), total=args.messages)
    latencies: list[float] = []
    started = time.monotonic()
    sent = 0
    for first in range(0, args.messages, args.batch_size):
        batch = payloads[first : first + args.batch_size]
        stamp = time.time()
        for payload in batch:
            payload["t"] = stamp
        before = time.monotonic()
        client.publish_batch(args.topic, batch)
        latencies.append((time.monotonic() - before) * 1000)
        sent += len(batch)
        progress.update(sent, batches=len(latencies))
    publish_seconds = time.monotonic() - started
    progress.update(sent, batches=len(latencies), final=True)
    report: dict[str, Any] = {
        "topic": args.topic,
        "messages": args.messages,
        "size": args.size,
        "batchSize": args.batch_size,
        "publish": {
            "seconds": round(publish_seconds, 3),
            "messagesPerSecond": round(sent / max(publish_seconds, 1e-9), 1),
            "batchLatencyMs": percentiles(latencies),
        },
    }
    code = EXIT_OK
    if receiver is not None:
        receiver.done.wait(args.consume_timeout)
        receiver.consumer.stop()
        receiver.done.wait(30)
        with receiver.lock:
            received = len(receiver.latencies)
            span = max(receiver.last - receiver.first, 1e-9) if received > 1 else 0.0
            report["consume"] = {
                "group": group,
                "received": received,
                "messagesPerSecond": round(received / span, 1) if span else None,
                "endToEndMs": percentiles(receiver.latencies),
            }
        if receiver.failure is not None:
            raise receiver.failure
        if received < args.messages:
            error(f"received {received} of {args.messages} messages within {args.consume_timeout:g} s")
            code = EXIT_API
        else:
            client.consumer_groups.delete(args.topic, group)
    _print_report(report, default_format(args.output))
    return code


def _print_report(report: dict[str, Any], output_format: str) -> None:
    if output_format == "json":
        emit(report)
        return
    publish = report["publish"]
    lat = publish["batchLatencyMs"]
    print(
        f"published {report['messages']} messages of {report['size']} bytes in batches of {report['batchSize']}: "
        f"{publish['messagesPerSecond']:.0f} msg/s; batch latency p50 {lat.get('p50')} ms, "
        f"p95 {lat.get('p95')} ms, p99 {lat.get('p99')} ms"
    )
    if "consume" in report:
        consume = report["consume"]
        e2e = consume["endToEndMs"]
        rate = consume["messagesPerSecond"]
        print(
            f"consumed {consume['received']} messages: {rate if rate is not None else '-'} msg/s; "
            f"end-to-end p50 {e2e.get('p50')} ms, p95 {e2e.get('p95')} ms, p99 {e2e.get('p99')} ms"
        )


def register(sub: Subcommands) -> None:
    """Add ``bench``."""
    bench = add_command(
        sub,
        "bench",
        help="publish (and consume) N messages; report msg/s and latency percentiles",
        description="Publish --messages messages of --size bytes in batches of --batch-size and report "
        "throughput and batch latency p50/p95/p99. With --consume, a fresh group consumes and acks them "
        "meanwhile, and end-to-end latency is reported too (the group is deleted afterwards).",
        example="queuecore bench bench.events --messages 10000 --size 512 --batch-size 500 --consume",
    )
    bench.add_argument("topic")
    bench.add_argument("--messages", type=positive, default=1000, help="how many (default 1000)")
    bench.add_argument("--size", type=positive, default=256, help="bytes of JSON per message (default 256)")
    bench.add_argument(
        "--batch-size", type=batch_size, default=100, help="messages per request (default 100)"
    )
    bench.add_argument("--consume", action="store_true", help="also consume and ack them with a fresh group")
    bench.add_argument(
        "--consume-timeout",
        type=seconds,
        default=120.0,
        help="give up waiting for messages after (default 120 s)",
    )
    bench.add_argument("-o", "--output", choices=["json", "human"], help="default: human on a terminal")
    bench.set_defaults(run=cmd_bench)
