"""``queuecore health``: the service's readiness; exit 1 when it is not ok."""

from __future__ import annotations

import argparse

from .._client import QueueCore
from ._args import Subcommands, add_command
from ._errors import EXIT_API, EXIT_OK
from ._output import emit_model

__all__ = ["register"]


def cmd_health(client: QueueCore, args: argparse.Namespace) -> int:
    """Print the health answer; exit 1 unless ok."""
    health = client.health()
    emit_model(health)
    return EXIT_OK if health.ok else EXIT_API


def register(sub: Subcommands) -> None:
    """Add ``health``."""
    add_command(
        sub,
        "health",
        help="the service's readiness (exit 1 when down)",
        example="queuecore health && echo ready",
    ).set_defaults(run=cmd_health)
