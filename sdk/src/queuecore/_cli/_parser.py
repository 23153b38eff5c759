"""The argument parser: global options, then one ``register`` per command module."""

from __future__ import annotations

import argparse

from .._version import __version__
from . import (
    _alerts,
    _bench,
    _consume,
    _context,
    _dlq,
    _groups,
    _health,
    _messages,
    _offsets,
    _overview,
    _publish,
    _schedules,
    _topics,
)
from ._args import non_negative, seconds

__all__ = ["build_parser"]

_EPILOG = """\
Example:
  queuecore topics create order.events --partitions 6
  echo '{"orderId": "ord_1"}' | queuecore publish order.events
  queuecore read order.events -f
  queuecore consume order.events -g order-processing --from earliest -e

Configuration: --api-key/--base-url, then --context NAME, then $QUEUECORE_API_KEY/$QUEUECORE_BASE_URL,
then the current context (queuecore context use NAME).
Exit codes: 0 ok, 1 refused by the API, 2 bad usage or input, 3 server unreachable,
128 + N after a graceful stop on signal N (130 Ctrl-C, 143 SIGTERM)."""


def build_parser() -> argparse.ArgumentParser:
    """The ``queuecore`` parser with every command."""
    parser = argparse.ArgumentParser(
        prog="queuecore",
        description="QueueCore from the shell. Results on stdout (JSON lines in pipes), "
        "progress and errors on stderr.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"queuecore {__version__}")
    parser.add_argument("--api-key", help="the API key (default: $QUEUECORE_API_KEY, or the context's)")
    parser.add_argument(
        "--base-url",
        help="the server (default: $QUEUECORE_BASE_URL, the context's, or http://127.0.0.1:8080)",
    )
    parser.add_argument("--context", help="use this saved context (see queuecore context)")
    parser.add_argument("--timeout", type=seconds, help="seconds per attempt")
    parser.add_argument("--max-retries", type=non_negative, help="retries of a failed attempt (default 2)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        _topics,
        _publish,
        _messages,
        _consume,
        _groups,
        _offsets,
        _overview,
        _dlq,
        _alerts,
        _schedules,
        _bench,
        _context,
        _health,
    ):
        module.register(sub)
    return parser
