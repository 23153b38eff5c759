"""``queuecore groups``: list, describe, create, update, delete consumer groups and reset a stopped group's
offsets. ``create`` and ``update`` (alias ``set``) set the config a group otherwise only gets from code:
ack and session timeouts, the dead-letter queue (retries, retry delay, alert threshold), and flow control
(``--max-in-flight``, ``--rate``, ``--filter``; ``--no-…`` removes each)."""

from __future__ import annotations

import argparse
from typing import Any

from .._client import QueueCore
from .._exceptions import NotFoundError
from ..types.consumer_group import DeadLetter
from . import _push
from ._args import (
    Subcommands,
    add_command,
    add_group,
    add_table_option,
    default_format,
    non_negative,
    positive,
    reset_target,
)
from ._errors import EXIT_API, EXIT_OK, UsageError
from ._output import emit, emit_model, error, listing

__all__ = ["register"]


def cmd_list(client: QueueCore, args: argparse.Namespace) -> int:
    """The topic's groups with members and lag: a table on a terminal, JSON lines otherwise."""
    columns = [("GROUP", "name"), ("CONSUMERS", "consumers"), ("LAG", "lag")]
    listing(default_format(args.output), columns, client.consumer_groups.list(args.topic))
    return EXIT_OK


def cmd_describe(client: QueueCore, args: argparse.Namespace) -> int:
    """A group's partitions (consumer, offset, lag) and config."""
    emit_model(client.consumer_groups.describe(args.topic, args.group))
    return EXIT_OK


def _config_changes(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if args.ack_timeout is not None:
        changes["ack_timeout"] = args.ack_timeout
    if args.session_timeout is not None:
        changes["session_timeout"] = args.session_timeout
    tuned = {
        name: value
        for name, value in (
            ("max_retries", args.max_retries),
            ("retry_delay", args.retry_delay),
            ("alert_threshold", args.alert_threshold),
        )
        if value is not None
    }
    if args.dead_letter is False:
        if tuned:
            raise UsageError(
                "--no-dead-letter cannot be combined with --max-retries, --retry-delay or --alert-threshold"
            )
        changes["dead_letter"] = None
    elif args.dead_letter or tuned:  # tuning the DLQ turns it on
        changes["dead_letter"] = DeadLetter(**tuned)
    for name, value, removed in (
        ("max_in_flight", args.max_in_flight, args.no_max_in_flight),
        ("rate", args.rate, args.no_rate),
        ("filter", args.filter, args.no_filter),
    ):
        if value is not None and removed:
            flag = name.replace("_", "-")
            raise UsageError(f"--{flag} cannot be combined with --no-{flag}")
        if removed:
            changes[name] = None
        elif value is not None:
            changes[name] = value
    return changes


def cmd_create(client: QueueCore, args: argparse.Namespace) -> int:
    """Create a group with a config; refused if it exists (use ``update``)."""
    try:
        client.consumer_groups.describe(args.topic, args.group)
    except NotFoundError as exc:
        if exc.code != "GROUP_NOT_FOUND":
            raise
    else:
        error(f"the group {args.group!r} of {args.topic} exists; change it with: queuecore groups update")
        return EXIT_API
    emit_model(client.consumer_groups.update(args.topic, args.group, **_config_changes(args)))
    return EXIT_OK


def cmd_update(client: QueueCore, args: argparse.Namespace) -> int:
    """Merge settings into a group's config (creating the group if needed); omitted ones are kept."""
    changes = _config_changes(args)
    if not changes:
        raise UsageError(
            "groups update needs at least one of --ack-timeout, --session-timeout, --dead-letter, "
            "--no-dead-letter, --max-retries, --retry-delay, --alert-threshold, --max-in-flight, --rate, "
            "--filter (or their --no-… forms)"
        )
    emit_model(client.consumer_groups.update(args.topic, args.group, **changes))
    return EXIT_OK


def cmd_delete(client: QueueCore, args: argparse.Namespace) -> int:
    """Delete a group with its offsets (refused while members are connected)."""
    client.consumer_groups.delete(args.topic, args.group)
    emit({"topic": args.topic, "group": args.group, "deleted": True})
    return EXIT_OK


def cmd_reset_offsets(client: QueueCore, args: argparse.Namespace) -> int:
    """Move every partition of a stopped group."""
    for position in client.consumer_groups.reset_offsets(args.topic, args.group, to=args.to):
        emit_model(position)
    return EXIT_OK


def cmd_pause(client: QueueCore, args: argparse.Namespace) -> int:
    """Pause a group: no member receives messages until ``--until`` or ``groups resume``."""
    paused = client.consumer_groups.pause(args.topic, args.group, until=args.until)
    emit({"topic": args.topic, "group": args.group, **paused.model_dump(mode="json")})
    return EXIT_OK


def cmd_resume(client: QueueCore, args: argparse.Namespace) -> int:
    """End a group's pause (a user's or the DLQ breaker's)."""
    resumed = client.consumer_groups.resume(args.topic, args.group)
    emit({"topic": args.topic, "group": args.group, "paused": resumed.paused})
    return EXIT_OK


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ack-timeout", metavar="DURATION", help="unacked this long, a message is redelivered (1s-12h)"
    )
    parser.add_argument(
        "--session-timeout", metavar="DURATION", help="a silent member is dropped after (2s-5m)"
    )
    parser.add_argument(
        "--dead-letter",
        action=argparse.BooleanOptionalAction,
        help="give the group a dead-letter queue (--no-dead-letter removes it)",
    )
    parser.add_argument(
        "--max-retries", type=non_negative, help="retries before a message is dead-lettered (0-100)"
    )
    parser.add_argument("--retry-delay", metavar="DURATION", help="first retry delay, doubling (0s-1h)")
    parser.add_argument(
        "--alert-threshold", type=non_negative, help="DLQ depth that triggers the alert webhook"
    )
    parser.add_argument(
        "--max-in-flight", type=positive, metavar="N", help="unacked messages across all members (1-100000)"
    )
    parser.add_argument("--no-max-in-flight", action="store_true", help="remove the group's max in flight")
    parser.add_argument(
        "--rate", type=positive_rate, metavar="PER_SECOND", help="messages per second to the group (> 0)"
    )
    parser.add_argument("--no-rate", action="store_true", help="remove the group's rate")
    parser.add_argument(
        "--filter",
        metavar="EXPR",
        help='deliver only matching messages, e.g. \'headers.type = "order" AND hasPrefix(key, "eu-")\'',
    )
    parser.add_argument("--no-filter", action="store_true", help="remove the group's filter")


def positive_rate(text: str) -> float:
    """A number of messages per second above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def register(sub: Subcommands) -> None:
    """Add ``groups list|describe|create|update|delete|reset-offsets|pause|resume``."""
    groups = add_group(
        sub,
        "groups",
        help="consumer groups of a topic",
        example="queuecore groups list order.events\n"
        "queuecore groups update order.events order-processing --max-retries 3 --retry-delay 10s",
    )
    gl = add_command(
        groups,
        "list",
        help="the topic's groups with members and lag, one per line",
        example="queuecore groups list order.events",
    )
    gl.add_argument("topic")
    add_table_option(gl)
    gl.set_defaults(run=cmd_list)
    gd = add_command(
        groups,
        "describe",
        help="a group's partitions (consumer, offset, lag) and config",
        example="queuecore groups describe order.events order-processing",
    )
    gd.add_argument("topic")
    gd.add_argument("group")
    gd.set_defaults(run=cmd_describe)
    gc = add_command(
        groups,
        "create",
        help="create a group with its config (refused if it exists)",
        example="queuecore groups create order.events order-processing --ack-timeout 60s --dead-letter",
    )
    gu = add_command(
        groups,
        "update",
        help="change a group's config (omitted settings are kept; a missing group is created)",
        example="queuecore groups update order.events order-processing --max-retries 3 --retry-delay 10s\n"
        "queuecore groups update order.events order-processing --no-dead-letter",
    )
    gs = add_command(
        groups,
        "set",
        help="change a group's config, as update does",
        example="queuecore groups set order.events order-processing --max-in-flight 500 --rate 50\n"
        'queuecore groups set order.events order-processing --filter \'headers.region IN ("eu", "uk")\'\n'
        "queuecore groups set order.events order-processing --no-filter --no-rate",
    )
    for parser, run in ((gc, cmd_create), (gu, cmd_update), (gs, cmd_update)):
        parser.add_argument("topic")
        parser.add_argument("group")
        _add_config_options(parser)
        parser.set_defaults(run=run)
    gx = add_command(
        groups,
        "delete",
        help="delete a group and its offsets (no members may be connected)",
        example="queuecore groups delete order.events old-reporting",
    )
    gx.add_argument("topic")
    gx.add_argument("group")
    gx.set_defaults(run=cmd_delete)
    gr = add_command(
        groups,
        "reset-offsets",
        help="move every partition of a stopped group",
        example="queuecore groups reset-offsets order.events order-processing --to earliest",
    )
    gr.add_argument("topic")
    gr.add_argument("group")
    gr.add_argument("--to", type=reset_target, required=True, help="earliest, latest or an offset")
    gr.set_defaults(run=cmd_reset_offsets)
    _push.register(groups)
    gp = add_command(
        groups,
        "pause",
        help="pause a group: no member receives messages until --until or groups resume",
        example="queuecore groups pause order.events order-processing\n"
        "queuecore groups pause order.events order-processing --until 2026-12-01T08:00:00Z",
    )
    gp.add_argument("topic")
    gp.add_argument("group")
    gp.add_argument("--until", metavar="TIME", help="resume by itself then (ISO-8601 with a time zone)")
    gp.set_defaults(run=cmd_pause)
    gm = add_command(
        groups,
        "resume",
        help="end a group's pause (by a user or by the DLQ breaker)",
        example="queuecore groups resume order.events order-processing",
    )
    gm.add_argument("topic")
    gm.add_argument("group")
    gm.set_defaults(run=cmd_resume)
