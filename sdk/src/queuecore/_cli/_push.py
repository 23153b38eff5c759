"""``queuecore groups push``: make a group POST its messages to a URL (``set``), stop it (``off``), rotate
its signing secret (``rotate-secret``) and show its recent attempts (``attempts``)."""

from __future__ import annotations

import argparse
from typing import Any

from .._client import QueueCore
from ..types.push import Push
from ._args import Subcommands, add_command, add_group, add_table_option, default_format, positive
from ._errors import EXIT_OK, UsageError
from ._output import emit, emit_model, listing

__all__ = ["register"]


def cmd_set(client: QueueCore, args: argparse.Namespace) -> int:
    """Set or change ``push``; the answer of the first set holds the signing secret (shown once)."""
    fields: dict[str, Any] = {
        "url": args.url,
        "max_concurrency": args.max_concurrency,
        "rate": args.rate,
        "timeout": args.timeout,
        "ordered": args.ordered,
        "mode": args.mode,
    }
    chosen = {k: v for k, v in fields.items() if v is not None}
    if not chosen:
        raise UsageError("groups push set needs --url (the first time) or an option to change")
    emit_model(client.consumer_groups.update(args.topic, args.group, push=Push(**chosen)))
    return EXIT_OK


def cmd_off(client: QueueCore, args: argparse.Namespace) -> int:
    """Turn push off: the group takes WebSocket, SSE and pull members again."""
    emit_model(client.consumer_groups.update(args.topic, args.group, push=None))
    return EXIT_OK


def cmd_rotate(client: QueueCore, args: argparse.Namespace) -> int:
    """A new signing secret (shown once); the previous one signs too for 24 h."""
    emit(client.consumer_groups.rotate_push_secret(args.topic, args.group).to_wire())
    return EXIT_OK


def cmd_attempts(client: QueueCore, args: argparse.Namespace) -> int:
    """The most recent POSTs, newest first."""
    columns = [
        ("AT", "at"),
        ("MESSAGE", "messageId"),
        ("ATTEMPT", "attempt"),
        ("STATUS", "status"),
        ("LATENCY MS", "latencyMs"),
        ("ERROR", "error"),
    ]
    rows = client.consumer_groups.push_attempts(args.topic, args.group, limit=args.limit)
    listing(default_format(args.output), columns, rows)
    return EXIT_OK


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def register(groups: Subcommands) -> None:
    """Add ``groups push set|off|rotate-secret|attempts``."""
    push = add_group(
        groups,
        "push",
        help="POST a group's messages to a URL (a push group)",
        example="queuecore groups push set order.events billing --url https://billing.example.com/hooks\n"
        "queuecore groups push attempts order.events billing",
    )
    ps = add_command(
        push,
        "set",
        help="set or change the group's push URL and options (the first set prints the secret, once)",
        example="queuecore groups push set order.events billing --url https://billing.example.com/hooks "
        "--max-concurrency 32 --ordered",
    )
    ps.add_argument("--url", help="where each message is POSTed (https:// in production)")
    ps.add_argument("--max-concurrency", type=positive, help="POSTs in flight per API process (default 16)")
    ps.add_argument("--rate", type=_rate, help="messages per second (default: no limit)")
    ps.add_argument("--timeout", metavar="DURATION", help="per POST, 100ms to 5m (default 10s)")
    ps.add_argument(
        "--ordered",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one delivery in flight per partition, in offset order",
    )
    ps.add_argument("--mode", choices=("binary", "structured"), help="CloudEvents mode (default binary)")
    ps.set_defaults(run=cmd_set)
    po = add_command(
        push,
        "off",
        help="stop pushing (the group takes other members again)",
        example="queuecore groups push off order.events billing",
    )
    po.set_defaults(run=cmd_off)
    pr = add_command(
        push,
        "rotate-secret",
        help="a new signing secret, printed once; the old one signs too for 24 h",
        example="queuecore groups push rotate-secret order.events billing",
    )
    pr.set_defaults(run=cmd_rotate)
    pa = add_command(
        push,
        "attempts",
        help="the group's most recent POSTs (status, latency, error), newest first",
        example="queuecore groups push attempts order.events billing --limit 20",
    )
    pa.add_argument("--limit", type=positive, default=50, help="1 to 1000 (default 50)")
    add_table_option(pa)
    pa.set_defaults(run=cmd_attempts)
    for parser in (ps, po, pr, pa):
        parser.add_argument("topic")
        parser.add_argument("group")
