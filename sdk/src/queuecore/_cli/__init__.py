"""``queuecore``: QueueCore from the shell, a kcat for QueueCore. Results go to stdout: JSON, one object per
line, in the API's wire form (camelCase), ready for ``jq`` (messages read or consumed may be printed as
``-o data|raw|human`` too; ``human`` is the default on a terminal). Progress, summaries and errors go to
stderr.

    queuecore topics list|create|describe|update|delete ...
    queuecore publish TOPIC '{"orderId": "ord_1"}'        # one message
    queuecore publish TOPIC - < events.jsonl               # one message per line, checked first, batched
    queuecore messages get TOPIC MESSAGE_ID
    queuecore read TOPIC [-p N,...] [--from earliest|latest | --from-offset N | --from-timestamp T] [-f|-e]
    queuecore consume TOPIC --group G [--from earliest] [--count N] [-e] [--no-ack | --nack --reason R]
    queuecore groups list|describe|create|update|delete|reset-offsets TOPIC [GROUP] [config options]
    queuecore groups push set|off|rotate-secret|attempts TOPIC GROUP  # POST a group's messages to a URL
    queuecore offsets get|seek|reset TOPIC --group G [--partition N] [--offset N|--timestamp T] [--to ...]
    queuecore overview TOPIC                              # partitions, groups, lag on one screen
    queuecore dlq list|replay|replay-all|delete|audit TOPIC --group G [--message-id ID] [--rate R]
    queuecore alerts set --url URL [--secret S] | show | delete | test | deliveries
    queuecore bench TOPIC --messages N --size BYTES --batch-size B [--consume]
    queuecore context add|list|use|remove NAME            # saved servers and keys
    queuecore health

The key comes from ``--api-key``, a ``--context``, ``QUEUECORE_API_KEY`` or the current context, in that
order (the server likewise, from ``--base-url``/``QUEUECORE_BASE_URL``). Exit codes: 0 success; 1 the API
refused the call (the error names its request id); 2 bad usage or input; 3 the server could not be
reached (after retries); 128 + the signal number after ``consume`` (gracefully) or ``read -f`` stopped on a signal: 130 for
SIGINT (Ctrl-C), 143 for SIGTERM.

Modules: ``_parser`` (global options), one module per command family (``_topics``, ``_publish``,
``_messages`` with ``read``, ``_consume``, ``_groups``, ``_offsets``, ``_overview``, ``_dlq``, ``_alerts``,
``_bench``, ``_context``, ``_health``), ``_output`` (formats, tables, progress), ``_config`` (the contexts
file), ``_args`` (argument types), ``_errors`` (exit codes).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from .._client import QueueCore
from .._exceptions import APIConnectionError, APIError, APIStatusError, QueueCoreError
from ._config import Config
from ._errors import EXIT_API, EXIT_CONNECTION, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UsageError
from ._output import error
from ._parser import build_parser

__all__ = ["main"]


def _client_options(args: argparse.Namespace) -> dict[str, Any]:
    """Key and server by precedence: flags, an explicit --context, the variables, the current context."""
    api_key: str | None = args.api_key
    base_url: str | None = args.base_url
    named = args.context or None
    env_key = os.environ.get("QUEUECORE_API_KEY") or None
    env_url = os.environ.get("QUEUECORE_BASE_URL") or None
    if named is not None or (api_key is None and env_key is None) or (base_url is None and env_url is None):
        config = Config.load()
        chosen = named or config.current
        context = config.get(chosen) if chosen is not None else None
        if context is not None:
            if named is not None:  # chosen on the command line: it outranks the variables
                api_key = api_key or context.api_key
                base_url = base_url or context.base_url
            else:
                api_key = api_key or env_key or context.api_key
                base_url = base_url or env_url or context.base_url
    options: dict[str, Any] = {"api_key": api_key, "base_url": base_url}
    if args.timeout is not None:
        options["timeout"] = args.timeout
    if args.max_retries is not None:
        options["max_retries"] = args.max_retries
    return options


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        if not getattr(args, "client", True):
            code: int = args.run(args)
            return code
        client = QueueCore(**_client_options(args))
    except UsageError as exc:
        error(str(exc))
        return EXIT_USAGE
    except QueueCoreError as exc:  # no API key, or one that cannot be a key (inner whitespace)
        if "No API key" in str(exc):  # the SDK's wording names api_key=, which a CLI user never types
            error(
                "no API key: give --api-key, set QUEUECORE_API_KEY, "
                "or save a context (queuecore context add NAME --api-key-file FILE)"
            )
        else:
            error(str(exc))
        return EXIT_USAGE
    except OSError as exc:  # --api-key-file not readable, the config file not writable
        error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED
    try:
        with client:
            code = args.run(client, args)
            return code
    except UsageError as exc:
        error(str(exc))
        return EXIT_USAGE
    except APIStatusError as exc:
        error(str(exc))
        for detail in exc.details or ():
            error(f"  {detail.get('field')}: {detail.get('issue')}")
        return EXIT_API
    except APIConnectionError as exc:
        error(f"{exc}. Is the server at {client.base_url} up?")
        return EXIT_CONNECTION
    except APIError as exc:
        error(str(exc))
        return EXIT_API
    except QueueCoreError as exc:  # refused by the SDK before any request
        error(str(exc))
        return EXIT_USAGE
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        _silence_stdout()
        return EXIT_OK
    except OSError as exc:  # --file not readable
        error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED


def _silence_stdout() -> None:
    # Python flushes stdout at exit; to a closed pipe that would print a second error.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
