"""``queuecore consume``: a member of a consumer group that prints, and acks (or nacks), what it gets.

Exactness: handlers of different partitions run at once (sync handlers in worker threads), so the check
against ``--count``, the print, the ack and the count happen under one lock; ``consumer.stop()`` then
guarantees no new handler call starts, so exactly N messages are printed and settled.

Stopping: ``--count`` reached, ``--exit-at-end`` (quiet for a moment and the group's lag is 0), or SIGINT /
SIGTERM, which stop gracefully like ``stop()`` (running handlers finish, acks are confirmed, the member
leaves the group); a second signal aborts at once. After a signal the exit code is 128 + its number.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any

from .._client import QueueCore
from .._exceptions import APIError, APIStatusError
from .._sync_consumer import Consumer
from ._args import OUTPUT_FORMATS, Subcommands, add_command, add_output_option, default_format, positive
from ._errors import EXIT_OK, UsageError
from ._output import MessagePrinter, Progress, error

__all__ = ["register"]

_QUIET_SECONDS = 1.0
"""--exit-at-end: how long nothing must arrive before the group's lag is checked."""


class _Tally:
    """What the handlers did, guarded by one lock (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.printed = 0
        self.unacked = 0  # printed but not acked (--no-ack, --nack): lag that --exit-at-end accepts
        self.last_activity = time.monotonic()
        self.signum: int | None = None


def _stop_on_signals(consumer: Consumer, tally: _Tally) -> None:
    """SIGINT and SIGTERM call ``consumer.stop()``; a second one aborts. Installed before ``start()``:
    asyncio.run installs its own SIGINT handler only over Python's default one."""

    def on_signal(signum: int, frame: object) -> None:
        if tally.signum is not None:
            error("interrupted again: aborting")
            os._exit(128 + signum)
        tally.signum = signum
        # From another thread: stop() then wakes the consumer's event loop through its self-pipe (a call
        # from this handler, on the loop's own thread, would wait for the loop's next wake-up).
        threading.Thread(target=consumer.stop, daemon=True).start()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)


def _watch_for_end(
    client: QueueCore, args: argparse.Namespace, consumer: Consumer, tally: _Tally, done: threading.Event
) -> None:
    """--exit-at-end: once nothing arrived for a moment, stop when the group's lag is only what this run
    printed without acking."""
    while not done.wait(0.25):
        if time.monotonic() - tally.last_activity < _QUIET_SECONDS:
            continue
        try:
            lag = sum(position.lag for position in client.offsets.get(args.topic, group=args.group))
        except APIError:  # not joined yet (GROUP_NOT_FOUND), or a blip: look again after the next moment
            continue
        with tally.lock:
            if lag <= tally.unacked:
                consumer.stop()
                return
            tally.last_activity = time.monotonic()


def cmd_consume(client: QueueCore, args: argparse.Namespace) -> int:
    """Print each message (and ack or nack it) until --count, --exit-at-end or a signal."""
    if args.no_ack and args.nack:
        raise UsageError("--no-ack and --nack exclude each other")
    if (args.reason is not None or args.delay is not None) and not args.nack:
        raise UsageError("--reason and --delay go with --nack")
    printer = MessagePrinter(default_format(args.output))
    consumer = client.consume(
        args.topic,
        group=args.group,
        start_from=args.start_from,
        max_in_flight=args.max_in_flight,
        transport=args.transport,
    )
    tally = _Tally()
    # A progress counter only where it does not mix with the messages: stderr a terminal, stdout not.
    progress = Progress(sys.stderr.isatty() and not sys.stdout.isatty(), total=args.count, verb="consumed")

    def handle(message: Any) -> None:
        with tally.lock:
            tally.last_activity = time.monotonic()
            if args.count is not None and tally.printed >= args.count:
                return  # arrived while stopping: not settled, the group gets it again
            printer.print(message)
            if args.nack:
                message.nack(args.reason, args.delay)
                tally.unacked += 1
            elif args.no_ack:
                tally.unacked += 1
            else:
                message.ack()
            tally.printed += 1
            progress.update(tally.printed)
            if args.count is not None and tally.printed >= args.count:
                consumer.stop()

    def on_error(exc: BaseException) -> None:
        # Refusals end start() with the error (reported by main); the rest is survived and retried.
        if not (isinstance(exc, APIStatusError) and exc.status in (400, 401, 403, 404)):
            error(f"{exc} (retrying)")

    consumer.on("message", handle).on("error", on_error)
    _stop_on_signals(consumer, tally)
    done = threading.Event()
    if args.exit_at_end:
        threading.Thread(
            target=_watch_for_end, args=(client, args, consumer, tally, done), daemon=True
        ).start()
    try:
        consumer.start()
    finally:
        done.set()
    progress.update(tally.printed, final=True)
    return EXIT_OK if tally.signum is None else 128 + tally.signum


def _delay(text: str) -> str | float:
    try:
        return float(text)
    except ValueError:
        return text  # a duration such as 30s: the server checks it


def register(sub: Subcommands) -> None:
    """Add ``consume``."""
    consume = add_command(
        sub,
        "consume",
        help="consume as a group member: print each message and ack it",
        description="Join a consumer group and print each message delivered to it, then ack it (--no-ack: "
        "leave it for redelivery; --nack: give it back, to retry or dead-letter). Stops after --count "
        "messages, at the end with --exit-at-end (once quiet and the group's lag is 0), or on Ctrl-C / "
        "SIGTERM, gracefully: running handlers finish, acks are confirmed, the member leaves; exit "
        "128 + the signal number (130, 143).",
        example="queuecore consume order.events -g order-processing --from earliest --count 10\n"
        "queuecore consume order.events -g debug --from earliest -e -o data | jq .orderId\n"
        "queuecore consume order.events -g order-processing --nack --reason 'testing the DLQ' --count 1",
    )
    consume.add_argument("topic")
    consume.add_argument("--group", "-g", required=True)
    consume.add_argument(
        "--from",
        dest="start_from",
        choices=["earliest", "latest"],
        default="latest",
        help="where a group without committed offsets starts (default: latest)",
    )
    consume.add_argument("--count", "-n", type=positive, help="exit after this many messages")
    consume.add_argument(
        "--exit-at-end", "-e", action="store_true", help="exit once nothing arrives and the group's lag is 0"
    )
    settle = consume.add_argument_group("settling (default: ack each printed message)")
    settle.add_argument("--no-ack", action="store_true", help="print without acking (redelivered later)")
    settle.add_argument("--nack", action="store_true", help="nack each message (retry, then the DLQ if any)")
    settle.add_argument("--reason", help="with --nack: the failure reason recorded in the DLQ")
    settle.add_argument("--delay", type=_delay, help="with --nack: redeliver after this (30s, or seconds)")
    consume.add_argument("--max-in-flight", type=positive, default=100)
    consume.add_argument("--transport", choices=["websocket", "pull", "sse"], default="websocket")
    add_output_option(consume, OUTPUT_FORMATS)
    consume.set_defaults(run=cmd_consume)
