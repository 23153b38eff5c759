"""``queuecore dlq``: a group's dead-letter queue: list, replay one or all, delete, audit. Configure it
with ``queuecore groups update ... --dead-letter``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from .._client import QueueCore
from ..types.dead_letter import DeadLetterMessage
from ._args import Subcommands, add_command, add_group, add_table_option, default_format, positive, rate
from ._errors import EXIT_OK
from ._output import emit, emit_model, listing, wire

__all__ = ["register"]


def cmd_list(client: QueueCore, args: argparse.Namespace) -> int:
    """The dead letters, oldest first: a table on a terminal, JSON lines otherwise."""
    columns = [
        ("MESSAGE", "messageId"),
        ("PARTITION", "partition"),
        ("OFFSET", "offset"),
        ("RETRIES", "retryCount"),
        ("FAILED", "failedAt"),
        ("REASON", "reason"),
        ("DATA", "data"),
    ]
    listing(default_format(args.output), columns, _dead_letters(client, args))
    return EXIT_OK


def _dead_letters(client: QueueCore, args: argparse.Namespace) -> Iterator[DeadLetterMessage]:
    cursor: str | None = None
    shown = 0
    while True:
        page = client.dlq.inspect(
            args.topic, group=args.group, limit=min(1000, args.limit or 100), cursor=cursor
        )
        for entry in page.data:
            if args.limit is not None and shown >= args.limit:
                return
            yield entry
            shown += 1
        cursor = page.next_cursor
        if cursor is None:
            return


def cmd_replay(client: QueueCore, args: argparse.Namespace) -> int:
    """Send one dead letter back to the group."""
    emit_model(client.dlq.replay(args.topic, args.group, message_id=args.message_id))
    return EXIT_OK


def cmd_replay_all(client: QueueCore, args: argparse.Namespace) -> int:
    """Send every dead letter back to the group."""
    emit_model(client.dlq.replay_all(args.topic, args.group, rate=args.rate))
    return EXIT_OK


def cmd_delete(client: QueueCore, args: argparse.Namespace) -> int:
    """Remove one dead letter for good."""
    client.dlq.delete(args.topic, args.group, message_id=args.message_id)
    emit({"messageId": args.message_id, "deleted": True})
    return EXIT_OK


def cmd_audit(client: QueueCore, args: argparse.Namespace) -> int:
    """Who replayed or deleted what, newest first."""
    cursor: str | None = None
    while True:
        page = client.dlq.audit(args.topic, args.group, limit=100, cursor=cursor)
        for entry in page.data:
            emit(wire(entry))
        cursor = page.next_cursor
        if cursor is None:
            return EXIT_OK


def register(sub: Subcommands) -> None:
    """Add ``dlq list|replay|replay-all|delete|audit``."""
    dlq = add_group(
        sub,
        "dlq",
        help="a group's dead-letter queue",
        example="queuecore dlq list order.events --group order-processing --limit 10",
    )
    specs = [
        ("list", "the dead letters, oldest first, one per line", cmd_list, "--limit 10"),
        (
            "replay",
            "send one dead letter back to the group",
            cmd_replay,
            "--message-id msg_AjWQd3Sf9J_B7MUAAA",
        ),
        ("replay-all", "send every dead letter back to the group", cmd_replay_all, "--rate 100"),
        ("delete", "remove one dead letter for good", cmd_delete, "--message-id msg_AjWQd3Sf9J_B7MUAAA"),
        ("audit", "who replayed or deleted what, newest first", cmd_audit, ""),
    ]
    for name, help_text, run, extra in specs:
        parser = add_command(
            dlq,
            name,
            help=help_text,
            example=f"queuecore dlq {name} order.events --group order-processing {extra}".rstrip(),
        )
        parser.add_argument("topic")
        parser.add_argument("--group", "-g", required=True)
        if name == "list":
            parser.add_argument("--limit", type=positive, help="at most this many (default: all)")
            add_table_option(parser)
        elif name in ("replay", "delete"):
            parser.add_argument("--message-id", required=True)
        elif name == "replay-all":
            parser.add_argument("--rate", type=rate, help="at most this many messages per second")
        parser.set_defaults(run=run)
