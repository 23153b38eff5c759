"""``queuecore context``: save servers and keys under names, pick the current one (``kubectl config``
style). The file itself is ``_config.py``'s; keys are never printed whole."""

from __future__ import annotations

import argparse
import getpass
import sys

from ._args import Subcommands, add_command, add_group
from ._config import Config, Context, mask_key
from ._errors import EXIT_OK, UsageError
from ._output import emit, table

__all__ = ["register"]


def _read_key(args: argparse.Namespace) -> str:
    if args.context_api_key is not None and args.api_key_file is not None:
        raise UsageError("give --api-key or --api-key-file, not both")
    if args.context_api_key is not None:
        key = str(args.context_api_key)
    elif args.api_key_file is not None:
        with open(args.api_key_file, encoding="utf-8") as source:
            key = source.read()
    elif sys.stdin.isatty():
        key = getpass.getpass("API key: ")
    else:
        key = sys.stdin.read()
    key = key.strip()  # a key read from a file or a pipe ends with a newline
    if not key:
        raise UsageError("no API key given (--api-key, --api-key-file, or on stdin)")
    return key


def cmd_add(args: argparse.Namespace) -> int:
    """Save (or replace) a context; the first one saved becomes current."""
    config = Config.load()
    config.contexts[args.name] = Context(args.name, args.context_base_url, _read_key(args))
    if config.current is None or args.use:
        config.current = args.name
    config.save()
    emit({"name": args.name, "saved": True, "current": config.current == args.name})
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    """Every context, keys masked."""
    config = Config.load()
    rows = [
        {
            "name": c.name,
            "baseUrl": c.base_url,
            "apiKey": mask_key(c.api_key) if c.api_key else None,
            "current": c.name == config.current,
        }
        for c in sorted(config.contexts.values(), key=lambda c: c.name)
    ]
    if sys.stdout.isatty() and args.output != "json":
        table(
            ["", "NAME", "BASE URL", "API KEY"],
            [["*" if r["current"] else "", r["name"], r["baseUrl"] or "", r["apiKey"] or ""] for r in rows],
        )
    else:
        for row in rows:
            emit(row)
    return EXIT_OK


def cmd_use(args: argparse.Namespace) -> int:
    """Make a context current."""
    config = Config.load()
    config.get(args.name)
    config.current = args.name
    config.save()
    emit({"current": args.name})
    return EXIT_OK


def cmd_remove(args: argparse.Namespace) -> int:
    """Forget a context (and stop using it if it was current)."""
    config = Config.load()
    config.get(args.name)
    del config.contexts[args.name]
    if config.current == args.name:
        config.current = None
    config.save()
    emit({"name": args.name, "removed": True})
    return EXIT_OK


def register(sub: Subcommands) -> None:
    """Add ``context add|list|use|remove``."""
    context = add_group(
        sub,
        "context",
        help="saved servers and keys (contexts)",
        example="queuecore context add prod --base-url https://us-east-1.api.queuecore.cloud "
        "--api-key-file ~/.qc-prod\nqueuecore context use prod\nqueuecore --context staging topics list",
    )
    add = add_command(
        context,
        "add",
        help="save a server and key under a name (the key from --api-key, --api-key-file or stdin)",
        example="queuecore context add staging --base-url https://staging.example.com < key.txt",
    )
    add.add_argument("name")
    # Own dests: the global --api-key/--base-url would otherwise be overwritten by these defaults.
    add.add_argument("--base-url", dest="context_base_url", help="the server (default: the SDK's)")
    add.add_argument(
        "--api-key",
        dest="context_api_key",
        help="the key (it stays in shell history: prefer a file or stdin)",
    )
    add.add_argument("--api-key-file", help="read the key from this file")
    add.add_argument("--use", action="store_true", help="make it the current context")
    add.set_defaults(run=cmd_add, client=False)
    ls = add_command(
        context, "list", help="saved contexts, keys shown as prefix…last4", example="queuecore context list"
    )
    ls.add_argument("-o", "--output", choices=["json", "human"], help="default: a table on a terminal")
    ls.set_defaults(run=cmd_list, client=False)
    use = add_command(context, "use", help="make a context current", example="queuecore context use prod")
    use.add_argument("name")
    use.set_defaults(run=cmd_use, client=False)
    rm = add_command(context, "remove", help="forget a context", example="queuecore context remove old")
    rm.add_argument("name")
    rm.set_defaults(run=cmd_remove, client=False)
