"""``queuecore alerts``: the project's alert webhook (DLQ depth): set, show, delete, test, deliveries."""

from __future__ import annotations

import argparse

from .._client import QueueCore
from .._exceptions import APIStatusError
from ._args import Subcommands, add_command, add_group, positive
from ._errors import EXIT_API, EXIT_OK
from ._output import emit, emit_model, error, wire

__all__ = ["register"]


def cmd_set(client: QueueCore, args: argparse.Namespace) -> int:
    """Set the endpoint; a generated secret is printed once."""
    emit(wire(client.alerts.set(url=args.url, secret=args.secret)))
    return EXIT_OK


def cmd_show(client: QueueCore, args: argparse.Namespace) -> int:
    """The endpoint and its breaker state."""
    try:
        endpoint = client.alerts.get()
    except APIStatusError as exc:
        if exc.code != "ALERT_ENDPOINT_NOT_FOUND":
            raise
        # The API's message tells an API caller which call sets one; a CLI user needs the command.
        error(
            f"Request {exc.request_id}: 404 ALERT_ENDPOINT_NOT_FOUND: this project has no alert endpoint; "
            "set one with: queuecore alerts set --url URL"
        )
        return EXIT_API
    emit(wire(endpoint))
    return EXIT_OK


def cmd_delete(client: QueueCore, args: argparse.Namespace) -> int:
    """Remove the endpoint."""
    client.alerts.delete()
    emit({"deleted": True})
    return EXIT_OK


def cmd_test(client: QueueCore, args: argparse.Namespace) -> int:
    """Send a signed test event."""
    emit_model(client.alerts.send_test_event())
    return EXIT_OK


def cmd_deliveries(client: QueueCore, args: argparse.Namespace) -> int:
    """Delivery attempts, newest first."""
    for attempt in client.alerts.deliveries(limit=args.limit).data:
        emit_model(attempt)
    return EXIT_OK


def register(sub: Subcommands) -> None:
    """Add ``alerts set|show|delete|test|deliveries``."""
    alerts = add_group(
        sub,
        "alerts",
        help="the project's alert webhook (DLQ depth)",
        example="queuecore alerts set --url https://hooks.example.com/queuecore\nqueuecore alerts test",
    )
    als = add_command(
        alerts,
        "set",
        help="set the endpoint (a generated secret is printed once)",
        example="queuecore alerts set --url https://hooks.example.com/queuecore",
    )
    als.add_argument("--url", required=True)
    als.add_argument("--secret", help="your own signing secret, 16-255 characters")
    als.set_defaults(run=cmd_set)
    add_command(
        alerts, "show", help="the endpoint and its breaker state", example="queuecore alerts show"
    ).set_defaults(run=cmd_show)
    add_command(alerts, "delete", help="remove the endpoint", example="queuecore alerts delete").set_defaults(
        run=cmd_delete
    )
    add_command(
        alerts, "test", help="send a signed test event", example="queuecore alerts test"
    ).set_defaults(run=cmd_test)
    ald = add_command(
        alerts,
        "deliveries",
        help="delivery attempts, newest first",
        example="queuecore alerts deliveries --limit 5",
    )
    ald.add_argument("--limit", type=positive, default=50)
    ald.set_defaults(run=cmd_deliveries)
