"""``queuecore messages get`` and ``queuecore read``: messages without a consumer group, kcat-style.

``read`` walks every partition (or those given with ``-p``) from a start point: ``--from earliest|latest``,
``--from-offset N`` or ``--from-timestamp T``, taking a page of each partition in turn. Without ``--follow``
it stops at the end of each partition as it was when reached (kcat's ``-e``); with it, it keeps following:
the stream-read endpoint does not long-poll, so at the end it polls again with a short backoff (0.1 s
doubling to 1 s, back to 0.1 s as soon as anything arrives), re-reading the topic's offsets to find which
partitions have news (and partitions added meanwhile).
"""

from __future__ import annotations

import argparse
import signal
import time

from .._client import QueueCore
from .._constants import MAX_BATCH_SIZE
from .._exceptions import APIStatusError
from ..types.topic_detail import TopicDetail
from ._args import (
    OUTPUT_FORMATS,
    Subcommands,
    add_command,
    add_group,
    add_output_option,
    default_format,
    non_negative,
    partitions,
    positive,
)
from ._errors import EXIT_OK, UsageError
from ._output import MessagePrinter, emit_model

__all__ = ["register"]

_IDLE_FIRST, _IDLE_MAX = 0.1, 1.0


def cmd_get(client: QueueCore, args: argparse.Namespace) -> int:
    """One message by id."""
    emit_model(client.messages.get(args.topic, args.message_id))
    return EXIT_OK


def _chosen_partitions(args: argparse.Namespace, count: int) -> list[int]:
    if not args.partition:
        return list(range(count))
    chosen = sorted({p for group in args.partition for p in group})
    missing = [p for p in chosen if p >= count]
    if missing:
        raise UsageError(f"{args.topic} has partitions 0 to {count - 1}; no partition {missing[0]}")
    return chosen


def _start_positions(
    client: QueueCore, args: argparse.Namespace, detail: TopicDetail, chosen: list[int]
) -> dict[int, int]:
    by_id = {p.id: p for p in detail.partition_details}
    if args.from_offset is not None:
        return {p: args.from_offset for p in chosen}
    if args.from_timestamp is not None:
        when: str | int = (
            int(args.from_timestamp)
            if args.from_timestamp.isascii() and args.from_timestamp.isdigit()
            else args.from_timestamp
        )
        positions: dict[int, int] = {}
        for p in chosen:
            page = client.messages.read(args.topic, p, from_timestamp=when, limit=1)
            positions[p] = page.data[0].offset if page.data else page.next_offset
        return positions
    if args.start_from == "latest":
        return {p: by_id[p].latest_offset for p in chosen}
    return {p: by_id[p].earliest_offset for p in chosen}


def _latest_offsets(client: QueueCore, topic: str) -> dict[int, int]:
    return {p.id: p.latest_offset for p in client.topics.describe(topic).partition_details}


class _Stopped(Exception):
    """A signal asked ``read --follow`` to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped(signum)


def cmd_read(client: QueueCore, args: argparse.Namespace) -> int:
    """Print the messages of the chosen partitions from the start point, to the end or ``--limit`` (or on
    and on with ``--follow``, until SIGINT or SIGTERM: exit 128 + its number, as ``consume``)."""
    if not args.follow:
        return _read(client, args)
    # Nothing to settle or commit: stop between two messages; every printed line is complete.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_stopped)
    try:
        return _read(client, args)
    except _Stopped as stopped:
        return 128 + stopped.signum


def _read(client: QueueCore, args: argparse.Namespace) -> int:
    printer = MessagePrinter(default_format(args.output))
    detail = client.topics.describe(args.topic)
    chosen = _chosen_partitions(args, len(detail.partition_details))
    positions = _start_positions(client, args, detail, chosen)
    ends = {p.id: p.latest_offset for p in detail.partition_details}
    if args.from_offset is not None and not args.follow:
        # Beyond the end there is nothing to wait for: let the API refuse it (OFFSET_OUT_OF_RANGE, exit 1),
        # as kcat does, rather than print nothing and exit 0. With --follow it waits there.
        for p in chosen:
            if positions[p] > ends.get(p, 0):
                client.messages.read(args.topic, p, from_offset=positions[p], limit=1)
    remaining: int | None = args.limit
    idle = _IDLE_FIRST
    while True:
        progressed = False
        for p in chosen:
            if remaining == 0:
                return EXIT_OK
            if positions[p] >= ends.get(p, 0):
                continue
            page_size = MAX_BATCH_SIZE if remaining is None else min(MAX_BATCH_SIZE, remaining)
            try:
                page = client.messages.read(args.topic, p, from_offset=positions[p], limit=page_size)
            except APIStatusError as exc:
                if exc.code != "OFFSET_OUT_OF_RANGE":
                    raise
                ends[p] = positions[p]  # beyond the end (a --from-offset past it): wait there
                continue
            for message in page.data:
                printer.print(message)
            if remaining is not None:
                remaining -= len(page.data)
            if page.data:
                progressed = True
            else:
                ends[p] = page.next_offset
            positions[p] = max(positions[p], page.next_offset)
        if progressed:
            idle = _IDLE_FIRST
            continue
        if not args.follow:
            return EXIT_OK
        time.sleep(idle)
        idle = min(_IDLE_MAX, idle * 2)
        ends = _latest_offsets(client, args.topic)
        if not args.partition:  # follow partitions added while reading
            for p in sorted(ends):
                if p not in positions:
                    chosen.append(p)
                    positions[p] = 0


def register(sub: Subcommands) -> None:
    """Add ``messages get`` and ``read``."""
    messages = add_group(
        sub,
        "messages",
        help="messages by id",
        example="queuecore messages get order.events msg_AjWQd3Sf9J_B7MUAAA",
    )
    mg = add_command(
        messages,
        "get",
        help="one message by id",
        example="queuecore messages get order.events msg_AjWQd3Sf9J_B7MUAAA",
    )
    mg.add_argument("topic")
    mg.add_argument("message_id")
    mg.set_defaults(run=cmd_get)

    read = add_command(
        sub,
        "read",
        help="read messages without a group, across partitions (kcat -C)",
        description="Print messages of every partition (or those given with -p) from a start point, without "
        "a consumer group: nothing is acked or committed. Without --follow, stop at the end of each "
        "partition (-e, kcat's); with it, keep printing new messages until Ctrl-C. Output: -o json (the "
        "message, one line; the default off a terminal), data, raw or human (the default on a terminal).",
        example="queuecore read order.events --from earliest -o data | jq .orderId\n"
        "queuecore read order.events -p 0 --from-offset 4800 --limit 10\n"
        "queuecore read order.events -f --from latest -o human",
    )
    read.add_argument("topic")
    read.add_argument(
        "--partition",
        "-p",
        type=partitions,
        action="append",
        metavar="N[,N...]",
        help="read only these partitions (repeatable; default: all)",
    )
    start = read.add_mutually_exclusive_group()
    start.add_argument(
        "--from",
        dest="start_from",
        choices=["earliest", "latest"],
        default="earliest",
        help="where to start (default: earliest)",
    )
    start.add_argument("--from-offset", type=non_negative, help="the first offset of each partition")
    start.add_argument(
        "--from-timestamp", help="the first message at or after this ISO-8601 time or epoch ms"
    )
    read.add_argument("--limit", type=positive, help="at most this many messages in all")
    until = read.add_mutually_exclusive_group()
    until.add_argument("--follow", "-f", action="store_true", help="keep printing new messages until Ctrl-C")
    until.add_argument(
        "--exit-at-end", "-e", action="store_true", help="stop at the end of every partition (the default)"
    )
    add_output_option(read, OUTPUT_FORMATS)
    read.set_defaults(run=cmd_read)
