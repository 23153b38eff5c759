"""``queuecore schedules``: create, list, get, pause, resume, delete, runs."""

from __future__ import annotations

import argparse

from .._client import QueueCore
from ._args import Subcommands, add_command, add_group, add_table_option, default_format, positive
from ._errors import EXIT_OK, UsageError
from ._output import emit, emit_model, listing
from ._publish import parse_headers, parse_json

__all__ = ["register"]


def cmd_create(client: QueueCore, args: argparse.Namespace) -> int:
    """Create a schedule: exactly one of ``--cron`` and ``--every``."""
    if (args.cron is None) == (args.every is None):
        raise UsageError("schedules create needs exactly one of --cron and --every")
    emit_model(
        client.schedules.create(
            args.topic,
            data=parse_json(args.data, "--data"),
            cron=args.cron,
            every=args.every,
            timezone=args.timezone,
            key=args.key,
            headers=parse_headers(args.header),
        )
    )
    return EXIT_OK


def cmd_list(client: QueueCore, args: argparse.Namespace) -> int:
    """Every schedule: a table on a terminal, one JSON line each otherwise."""
    columns = [
        ("ID", "id"),
        ("TOPIC", "topic"),
        ("CRON", "cron"),
        ("EVERY", "every"),
        ("TIMEZONE", "timezone"),
        ("STATUS", "status"),
        ("NEXT RUN", "nextRunAt"),
    ]
    listing(default_format(args.output), columns, client.schedules.list(limit=args.page_size))
    return EXIT_OK


def cmd_get(client: QueueCore, args: argparse.Namespace) -> int:
    """One schedule."""
    emit_model(client.schedules.get(args.id))
    return EXIT_OK


def cmd_pause(client: QueueCore, args: argparse.Namespace) -> int:
    """Stop publishing runs until resumed."""
    emit_model(client.schedules.pause(args.id))
    return EXIT_OK


def cmd_resume(client: QueueCore, args: argparse.Namespace) -> int:
    """Publish again from the first due time after now."""
    emit_model(client.schedules.resume(args.id))
    return EXIT_OK


def cmd_delete(client: QueueCore, args: argparse.Namespace) -> int:
    """Delete a schedule."""
    client.schedules.delete(args.id)
    emit({"id": args.id, "deleted": True})
    return EXIT_OK


def cmd_runs(client: QueueCore, args: argparse.Namespace) -> int:
    """The last runs, newest first: a table on a terminal, one JSON line each otherwise."""
    columns = [("AT", "at"), ("MESSAGE", "messageId"), ("PARTITION", "partition"), ("OFFSET", "offset")]
    listing(default_format(args.output), columns, client.schedules.runs(args.id))
    return EXIT_OK


def register(sub: Subcommands) -> None:
    """Add ``schedules create|list|get|pause|resume|delete|runs``."""
    schedules = add_group(
        sub,
        "schedules",
        help="publish a message on a cron expression or a fixed period",
        example="queuecore schedules create reports --cron '0 9 * * MON-FRI' --timezone Europe/Berlin "
        '--data \'{"report": "daily"}\'\nqueuecore schedules list',
    )
    sc = add_command(
        schedules,
        "create",
        help="create a schedule (exactly one of --cron and --every)",
        example="queuecore schedules create heartbeats --every 30s --data '{\"ping\": true}'",
    )
    sc.add_argument("topic")
    sc.add_argument("--cron", help="five fields: minute hour day-of-month month day-of-week")
    sc.add_argument("--every", help="a period <n>ms|s|m|h|d of at least 1s")
    sc.add_argument("--timezone", help="an IANA time zone for --cron (default UTC)")
    sc.add_argument("--data", required=True, help="the message's data, JSON")
    sc.add_argument("--key", help="the message's key")
    sc.add_argument("--header", action="append", metavar="NAME=VALUE", help="a header (repeatable)")
    sc.set_defaults(run=cmd_create)
    sl = add_command(schedules, "list", help="every schedule", example="queuecore schedules list | jq -r .id")
    sl.add_argument("--page-size", type=positive, help="schedules fetched per request (1-1000)")
    add_table_option(sl)
    sl.set_defaults(run=cmd_list)
    for name, help_text, run in (
        ("get", "one schedule", cmd_get),
        ("pause", "stop publishing runs until resumed", cmd_pause),
        ("resume", "publish again from the next due time", cmd_resume),
        ("delete", "delete a schedule", cmd_delete),
    ):
        command = add_command(
            schedules, name, help=help_text, example=f"queuecore schedules {name} sch_8xk2m9q4a1b2c3d4"
        )
        command.add_argument("id", help="the schedule's id (sch_…)")
        command.set_defaults(run=run)
    sr = add_command(
        schedules,
        "runs",
        help="the last runs, newest first",
        example="queuecore schedules runs sch_8xk2m9q4a1b2c3d4",
    )
    sr.add_argument("id", help="the schedule's id (sch_…)")
    add_table_option(sr)
    sr.set_defaults(run=cmd_runs)
