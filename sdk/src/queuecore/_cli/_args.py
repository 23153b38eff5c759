"""Argument types and subcommand construction shared by the command modules.

argparse names a type function in its message (``invalid _positive value: 'six'``); the types here raise
``ArgumentTypeError`` instead, which argparse prints after the option's name
(``argument --partitions: must be a whole number of 1 or more, got 'six'``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._constants import MAX_BATCH_SIZE

__all__ = [
    "OUTPUT_FORMATS",
    "Subcommands",
    "add_command",
    "add_group",
    "add_output_option",
    "add_table_option",
    "batch_size",
    "default_format",
    "non_negative",
    "partitions",
    "positive",
    "rate",
    "reset_target",
    "seconds",
]

OUTPUT_FORMATS = ("json", "data", "raw", "human")

# The subparsers object argparse returns is private API (``argparse._SubParsersAction``).
Subcommands = Any


def add_command(
    sub: Subcommands, name: str, *, help: str, example: str, description: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` ends with an example (kept as written: one command per line)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=description or help[:1].upper() + help[1:] + ".",
        epilog="Example:\n" + "\n".join("  " + line for line in example.strip().splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def add_group(sub: Subcommands, name: str, *, help: str, example: str) -> Subcommands:
    """A command with actions (``topics list``, ``topics create`` ...): returns its subparsers."""
    parser = add_command(sub, name, help=help, example=example)
    return parser.add_subparsers(dest="action", required=True, metavar="ACTION")


def add_output_option(parser: argparse.ArgumentParser, formats: tuple[str, ...] = OUTPUT_FORMATS) -> None:
    """``-o/--output``; unset it means ``human`` on a terminal and ``json`` otherwise (``default_format``)."""
    parser.add_argument(
        "-o",
        "--output",
        choices=formats,
        help="output format (default: human on a terminal, json otherwise)",
    )


def add_table_option(parser: argparse.ArgumentParser) -> None:
    """``-o json|human`` of a list command; unset, a table on a terminal and JSON lines otherwise."""
    parser.add_argument(
        "-o",
        "--output",
        choices=("json", "human"),
        help="json lines, or a human table (default: a table on a terminal, json otherwise)",
    )


def default_format(chosen: str | None) -> str:
    """The ``-o`` value, or its default: ``human`` when stdout is a terminal, else ``json`` (scripts, pipes)."""
    if chosen is not None:
        return chosen
    return "human" if sys.stdout.isatty() else "json"


def _whole(text: str, low: int, high: int | None = None) -> int:
    span = f"{low} or more" if high is None else f"{low} to {high}"
    try:
        value: int | None = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"must be a whole number of {span}, got {text!r}")
    return value


def positive(text: str) -> int:
    """A whole number of 1 or more."""
    return _whole(text, 1)


def non_negative(text: str) -> int:
    """A whole number of 0 or more (an offset, a partition)."""
    return _whole(text, 0)


def batch_size(text: str) -> int:
    """Messages per batch request: 1 to 1000."""
    return _whole(text, 1, MAX_BATCH_SIZE)


def partitions(text: str) -> list[int]:
    """One partition or a comma-separated list (``-p 0,2``); the option is repeatable too."""
    return [_whole(part.strip(), 0) for part in text.split(",")]


def _more_than_zero(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be {what} more than 0, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A positive number of seconds."""
    return _more_than_zero(text, "a number of seconds")


def rate(text: str) -> float:
    """A positive number of messages per second."""
    return _more_than_zero(text, "a number of messages per second")


def reset_target(text: str) -> str | int:
    """``earliest``, ``latest`` or an offset."""
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be earliest, latest or an offset, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"an offset must be 0 or more, got {text!r}")
    return value
