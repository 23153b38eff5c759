"""``queuecore publish``: one message from the command line, or one per line of a file or stdin.

Lines are validated before anything is sent (a file in a first pass; stdin spooled to a temporary file
while it is checked), so a bad line part-way publishes nothing and a fixed input can simply be rerun. They
then go out in order in atomic batches of up to ``--batch-size`` (and under the 10 MiB body limit).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import IO, Any

from .._client import QueueCore
from .._constants import MAX_BATCH_SIZE
from ..types.batch_message import BatchMessage
from ._args import Subcommands, add_command, batch_size, non_negative
from ._errors import EXIT_OK, UsageError
from ._output import Progress, emit, emit_model, wire

__all__ = ["parse_json", "register"]

# A batch body is at most 10 MiB; stay well under it whatever the per-item overhead.
_MAX_BATCH_BYTES = 8 * 1024 * 1024
_ITEM_OVERHEAD = 128


def parse_json(text: str, where: str) -> Any:
    """JSON, or a usage error naming ``where`` it came from."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where} is not valid JSON: {exc}") from None


def parse_headers(pairs: Sequence[str] | None) -> dict[str, str] | None:
    """``NAME=VALUE`` pairs as a header map."""
    if not pairs:
        return None
    headers: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--header expects NAME=VALUE, got {pair!r}")
        headers[name] = value
    return headers


def duration(text: str) -> str | float:
    """``--delay`` / ``--ttl``: ``90s`` style, or a plain number of seconds (the server checks the range)."""
    try:
        return float(text)
    except ValueError:
        return text


def instant(text: str) -> int | str:
    """``--deliver-at`` / ``--expires-at``: epoch milliseconds, or ISO-8601."""
    return int(text) if text.isdigit() else text


def _timing(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "delay": args.delay,
        "deliver_at": args.deliver_at,
        "ttl": args.ttl,
        "expires_at": args.expires_at,
    }


def cmd_publish(client: QueueCore, args: argparse.Namespace) -> int:
    """Publish one message, or every line of ``--file`` or stdin."""
    headers = parse_headers(args.header)
    if args.message is not None and args.message != "-":
        if args.file is not None:
            raise UsageError("give either a JSON message or --file, not both")
        result = client.publish(
            args.topic,
            parse_json(args.message, "the message"),
            key=args.key,
            headers=headers,
            partition=args.partition,
            idempotency_key=args.idempotency_key,
            **_timing(args),
        )
        if not args.quiet:
            emit_model(result)
        return EXIT_OK
    # Validate everything first: a bad line part-way must not leave the lines before it published (a rerun
    # of the fixed input would publish them twice without an idempotency key).
    if args.file is not None:
        with open(args.file, encoding="utf-8") as source:
            total = _validate_lines(source)
            source.seek(0)
            return _publish_lines(client, args, headers, source, total=total, show_progress=True)
    interactive = sys.stdin.isatty()
    if interactive:
        sys.stderr.write("queuecore: one JSON message per line; end with Ctrl-D\n")
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        total = _validate_lines(sys.stdin, spool)
        spool.seek(0)
        return _publish_lines(client, args, headers, spool, total=total, show_progress=not interactive)


def _lines(source: IO[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(source, start=1):
        if line.strip():
            yield number, line


def _validate_lines(source: IO[str], spool: IO[str] | None = None) -> int:
    """Check that every non-blank line is JSON, copying lines to ``spool`` when given; the message count."""
    count = 0
    for number, line in enumerate(source, start=1):
        if spool is not None:
            spool.write(line)
        if line.strip():
            parse_json(line, f"line {number}")
            count += 1
    return count


def _publish_lines(
    client: QueueCore,
    args: argparse.Namespace,
    headers: dict[str, str] | None,
    source: IO[str],
    *,
    total: int,
    show_progress: bool,
) -> int:
    progress = Progress(show_progress and not args.quiet, total=total)
    batch: list[BatchMessage] = []
    batch_bytes = 0
    published = replayed = batches = 0

    def flush() -> None:
        nonlocal batch, batch_bytes, published, replayed, batches
        if not batch:
            return
        result = client.publish_batch(args.topic, batch)
        published += len(result.messages)
        replayed += sum(1 for item in result.messages if item.replayed)
        batches += 1
        if not args.quiet:
            for item in result.messages:
                emit(wire(item))
            sys.stdout.flush()
        batch, batch_bytes = [], 0
        progress.update(published, replayed=replayed, batches=batches)

    for number, line in _lines(source):
        size = len(line.encode("utf-8")) + _ITEM_OVERHEAD
        if batch and (len(batch) >= args.batch_size or batch_bytes + size > _MAX_BATCH_BYTES):
            flush()
        key = f"{args.idempotency_key}:{number}" if args.idempotency_key else None
        batch.append(
            BatchMessage(
                data=json.loads(line),
                key=args.key,
                headers=headers,
                partition=args.partition,
                idempotency_key=key,
                **_timing(args),
            )
        )
        batch_bytes += size
    flush()
    progress.update(published, replayed=replayed, batches=batches, final=True)
    return EXIT_OK


def register(sub: Subcommands) -> None:
    """Add ``publish``."""
    pub = add_command(
        sub,
        "publish",
        help="publish a JSON message, or one message per line of stdin (-) or --file",
        description="Publish one message given as JSON, or one message per non-blank line of stdin ('-', "
        "also when no message is given) or of --file, in atomic batches of up to 1000. The whole input is "
        "checked first: a line that is not JSON publishes nothing and names its line number. Lines mode "
        "prints one result per message and progress on stderr (a bar on a terminal); a rerun with the same "
        "--idempotency-key reports 'N new, M replayed'.",
        example='queuecore publish order.events \'{"orderId": "ord_1"}\' --key ord_1\n'
        'queuecore publish reminders \'{"userId": "u_1"}\' --delay 15m --ttl 1h\n'
        "queuecore publish order.events --file orders.jsonl --idempotency-key import-2026-03-28 -q",
    )
    pub.add_argument("topic")
    pub.add_argument("message", nargs="?", help="the message's data as JSON, or - to read lines from stdin")
    pub.add_argument("--file", help="read one JSON message per line from this file")
    pub.add_argument("--key", help="the partitioning key (every message)")
    pub.add_argument("--header", action="append", metavar="NAME=VALUE", help="a header (repeatable)")
    pub.add_argument("--partition", type=non_negative, help="an explicit partition")
    pub.add_argument(
        "--delay",
        type=duration,
        help="deliver to consumer groups this much later: 90s, 5m, 2h, 1d or seconds (at most 30d)",
    )
    pub.add_argument(
        "--deliver-at",
        type=instant,
        help="deliver from this time on: ISO-8601 or epoch ms (not with --delay)",
    )
    pub.add_argument(
        "--ttl",
        type=duration,
        help="never deliver once this long has passed since the publish (a DLQ gets it as 'expired')",
    )
    pub.add_argument(
        "--expires-at",
        type=instant,
        help="never deliver from this time on: ISO-8601 or epoch ms (not with --ttl)",
    )
    pub.add_argument(
        "--idempotency-key",
        help="the idempotency key; with lines, a prefix: line N gets PREFIX:N, so rerunning the same input "
        "publishes nothing twice",
    )
    pub.add_argument(
        "--batch-size", type=batch_size, default=MAX_BATCH_SIZE, help="messages per request (1-1000)"
    )
    pub.add_argument("-q", "--quiet", action="store_true", help="print no results and no progress")
    pub.set_defaults(run=cmd_publish)
