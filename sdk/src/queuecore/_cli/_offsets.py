"""``queuecore offsets``: a group's committed positions: get, seek (while consuming), reset."""

from __future__ import annotations

import argparse

from .._client import QueueCore
from ._args import Subcommands, add_command, add_group, add_table_option, default_format, non_negative
from ._errors import EXIT_OK, UsageError
from ._output import emit_model, listing

__all__ = ["register"]


def cmd_get(client: QueueCore, args: argparse.Namespace) -> int:
    """``{current, latest, lag}`` of one partition, or of each."""
    if args.partition is not None:
        emit_model(client.offsets.get(args.topic, group=args.group, partition=args.partition))
        return EXIT_OK
    columns = [("PARTITION", "partition"), ("CURRENT", "current"), ("LATEST", "latest"), ("LAG", "lag")]
    listing(default_format(args.output), columns, client.offsets.get(args.topic, group=args.group))
    return EXIT_OK


def cmd_seek(client: QueueCore, args: argparse.Namespace) -> int:
    """Move one partition to an offset or a time."""
    if (args.offset is None) == (args.timestamp is None):
        raise UsageError("offsets seek needs exactly one of --offset and --timestamp")
    timestamp: str | int | None = args.timestamp
    if isinstance(timestamp, str) and timestamp.isascii() and timestamp.isdigit():
        timestamp = int(timestamp)
    emit_model(
        client.offsets.seek(
            args.topic, group=args.group, partition=args.partition, offset=args.offset, timestamp=timestamp
        )
    )
    return EXIT_OK


def cmd_reset(client: QueueCore, args: argparse.Namespace) -> int:
    """Move every partition (or one) to earliest or latest."""
    for position in client.offsets.reset(args.topic, group=args.group, to=args.to, partition=args.partition):
        emit_model(position)
    return EXIT_OK


def register(sub: Subcommands) -> None:
    """Add ``offsets get|seek|reset``."""
    offsets = add_group(
        sub,
        "offsets",
        help="a group's offsets",
        example="queuecore offsets get order.events --group order-processing",
    )
    og = add_command(
        offsets,
        "get",
        help="{current, latest, lag} of one partition, or of each",
        example="queuecore offsets get order.events --group order-processing --partition 0",
    )
    og.add_argument("topic")
    og.add_argument("--group", "-g", required=True)
    og.add_argument("--partition", "-p", type=non_negative)
    add_table_option(og)
    og.set_defaults(run=cmd_get)
    os_ = add_command(
        offsets,
        "seek",
        help="move one partition to an offset or a time",
        example="queuecore offsets seek order.events -g order-processing -p 0 --timestamp 2026-03-28T10:00:00Z",
    )
    os_.add_argument("topic")
    os_.add_argument("--group", "-g", required=True)
    os_.add_argument("--partition", "-p", type=non_negative, required=True)
    os_.add_argument("--offset", type=non_negative)
    os_.add_argument("--timestamp", help="ISO-8601 time or epoch milliseconds")
    os_.set_defaults(run=cmd_seek)
    orr = add_command(
        offsets,
        "reset",
        help="move every partition (or one) to earliest or latest",
        example="queuecore offsets reset order.events -g order-processing --to latest",
    )
    orr.add_argument("topic")
    orr.add_argument("--group", "-g", required=True)
    orr.add_argument("--to", choices=["earliest", "latest"], required=True)
    orr.add_argument("--partition", "-p", type=non_negative)
    orr.set_defaults(run=cmd_reset)
