"""``queuecore``: QueueCore from the shell, a kcat for QueueCore. Output is JSON, one object per line, in
the API's wire form (camelCase), ready for ``jq``.

    queuecore topics list|create|describe|update|delete ...
    queuecore publish TOPIC '{"orderId": "ord_1"}'        # one message
    queuecore publish TOPIC - < events.jsonl               # one message per line, batched
    queuecore messages get TOPIC MESSAGE_ID
    queuecore read TOPIC --partition 0 --from-offset 0 --limit 10
    queuecore groups list|describe|reset-offsets TOPIC [GROUP] [--to earliest|latest|N]
    queuecore offsets get|seek|reset TOPIC --group G [--partition N] [--offset N|--timestamp T] [--to ...]
    queuecore consume TOPIC --group G [--from earliest] [--count N] [--no-ack]   # JSON lines, acked
    queuecore dlq list|replay|replay-all|delete|audit TOPIC --group G [--message-id ID] [--rate R]
    queuecore alerts set --url URL [--secret S] | show | delete | test | deliveries
    queuecore health

The key comes from ``QUEUECORE_API_KEY`` (or ``--api-key``), the server from ``QUEUECORE_BASE_URL`` (or
``--base-url``). Exit codes: 0 success; 1 the API refused the call (the error names its request id);
2 bad usage or input; 3 the server could not be reached (after retries); 128 + the signal number after
``consume`` stopped gracefully on a signal: 130 for SIGINT (Ctrl-C), 143 for SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

from ._client import QueueCore
from ._constants import MAX_BATCH_SIZE
from ._consumer import Consumer
from ._exceptions import APIConnectionError, APIError, APIStatusError, QueueCoreError
from ._models import BaseModel
from ._version import __version__
from .types.batch_message import BatchMessage

__all__ = ["main"]

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_CONNECTION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# A batch body is at most 10 MiB; stay well under it whatever the per-item overhead.
_MAX_BATCH_BYTES = 8 * 1024 * 1024
_ITEM_OVERHEAD = 128
_PROGRESS_EVERY = 0.5


class UsageError(Exception):
    """Bad arguments or input: exit 2."""


def _emit(payload: Any, out: IO[str]) -> None:
    out.write(json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n")


def _emit_model(model: BaseModel, out: IO[str]) -> None:
    _emit(model.to_wire(), out)


def _parse_headers(pairs: Sequence[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    headers: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--header expects NAME=VALUE, got {pair!r}")
        headers[name] = value
    return headers


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where} is not valid JSON: {exc}") from None


# -- commands ---------------------------------------------------------------------------------------------


def cmd_topics_list(client: QueueCore, args: argparse.Namespace) -> int:
    for topic in client.topics.list(limit=args.page_size):
        _emit_model(topic, sys.stdout)
    return EXIT_OK


def cmd_topics_create(client: QueueCore, args: argparse.Namespace) -> int:
    topic = client.topics.create(
        args.name, retention=args.retention, delivery=args.delivery, partitions=args.partitions
    )
    _emit_model(topic, sys.stdout)
    return EXIT_OK


def cmd_topics_describe(client: QueueCore, args: argparse.Namespace) -> int:
    _emit_model(client.topics.describe(args.name), sys.stdout)
    return EXIT_OK


def cmd_topics_update(client: QueueCore, args: argparse.Namespace) -> int:
    if args.partitions is None and args.retention is None:
        raise UsageError("topics update needs --partitions and/or --retention")
    topic = client.topics.update(args.name, partitions=args.partitions, retention=args.retention)
    _emit_model(topic, sys.stdout)
    return EXIT_OK


def cmd_topics_delete(client: QueueCore, args: argparse.Namespace) -> int:
    client.topics.delete(args.name)
    _emit({"name": args.name, "deleted": True}, sys.stdout)
    return EXIT_OK


def cmd_messages_get(client: QueueCore, args: argparse.Namespace) -> int:
    _emit_model(client.messages.get(args.topic, args.message_id), sys.stdout)
    return EXIT_OK


def cmd_read(client: QueueCore, args: argparse.Namespace) -> int:
    """Print messages of one partition from a start point, to ``--limit`` or to the end."""
    remaining: int | None = args.limit
    from_offset: int | None = args.from_offset
    from_timestamp: str | None = args.from_timestamp
    while remaining is None or remaining > 0:
        page_size = MAX_BATCH_SIZE if remaining is None else min(MAX_BATCH_SIZE, remaining)
        page = client.messages.read(
            args.topic,
            args.partition,
            from_offset=from_offset,
            from_timestamp=from_timestamp,
            limit=page_size,
        )
        for message in page.data:
            _emit_model(message, sys.stdout)
        sys.stdout.flush()
        if not page.data or (from_offset is not None and page.next_offset <= from_offset):
            break
        if remaining is not None:
            remaining -= len(page.data)
        from_offset, from_timestamp = page.next_offset, None
    return EXIT_OK


def _reset_target(text: str) -> str | int:
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be earliest, latest or an offset") from None
    if value < 0:
        raise argparse.ArgumentTypeError("an offset must be 0 or more")
    return value


def cmd_groups_list(client: QueueCore, args: argparse.Namespace) -> int:
    for group in client.consumer_groups.list(args.topic):
        _emit_model(group, sys.stdout)
    return EXIT_OK


def cmd_groups_describe(client: QueueCore, args: argparse.Namespace) -> int:
    _emit_model(client.consumer_groups.describe(args.topic, args.group), sys.stdout)
    return EXIT_OK


def cmd_groups_reset_offsets(client: QueueCore, args: argparse.Namespace) -> int:
    for position in client.consumer_groups.reset_offsets(args.topic, args.group, to=args.to):
        _emit_model(position, sys.stdout)
    return EXIT_OK


def cmd_offsets_get(client: QueueCore, args: argparse.Namespace) -> int:
    if args.partition is not None:
        _emit_model(client.offsets.get(args.topic, group=args.group, partition=args.partition), sys.stdout)
        return EXIT_OK
    for offset in client.offsets.get(args.topic, group=args.group):
        _emit_model(offset, sys.stdout)
    return EXIT_OK


def cmd_offsets_seek(client: QueueCore, args: argparse.Namespace) -> int:
    if (args.offset is None) == (args.timestamp is None):
        raise UsageError("offsets seek needs exactly one of --offset and --timestamp")
    timestamp: str | int | None = args.timestamp
    if isinstance(timestamp, str) and timestamp.isdigit():
        timestamp = int(timestamp)
    result = client.offsets.seek(
        args.topic, group=args.group, partition=args.partition, offset=args.offset, timestamp=timestamp
    )
    _emit_model(result, sys.stdout)
    return EXIT_OK


def cmd_offsets_reset(client: QueueCore, args: argparse.Namespace) -> int:
    for position in client.offsets.reset(args.topic, group=args.group, to=args.to, partition=args.partition):
        _emit_model(position, sys.stdout)
    return EXIT_OK


def cmd_consume(client: QueueCore, args: argparse.Namespace) -> int:
    """Print each message as a JSON line (and ack it, unless ``--no-ack``) until ``--count`` or Ctrl-C."""
    consumer = client.consume(
        args.topic,
        group=args.group,
        start_from=args.start_from,
        max_in_flight=args.max_in_flight,
        transport=args.transport,
    )
    printed = 0
    # Handlers of different partitions run at once (sync handlers in worker threads): check, print, ack
    # and count as one step, or two of them pass the check together and --count is overshot.
    lock = threading.Lock()

    def handle(message: Any) -> None:
        nonlocal printed
        with lock:
            if args.count is not None and printed >= args.count:
                return  # arrived while stopping: not acked, the group gets it again
            _emit(message.to_wire(), sys.stdout)
            sys.stdout.flush()
            if not args.no_ack:
                message.ack()
            printed += 1
            if args.count is not None and printed >= args.count:
                consumer.stop()

    def on_error(error: BaseException) -> None:
        # Refusals end start() with the error (reported by main); the rest is survived and retried.
        if not (isinstance(error, APIStatusError) and error.status in (400, 401, 403, 404)):
            _error(f"{error} (retrying)")

    consumer.on("message", handle).on("error", on_error)
    stopped_by = _stop_on_signals(consumer)
    consumer.start()
    return EXIT_OK if stopped_by.signum is None else 128 + stopped_by.signum


class _SignalStop:
    """Which signal asked the consumer to stop, if any."""

    signum: int | None = None


def _stop_on_signals(consumer: Consumer) -> _SignalStop:
    """SIGINT and SIGTERM stop the consumer gracefully (running handlers finish, acks are confirmed, the
    member leaves); a second signal aborts at once. Installed before ``start()``: asyncio.run keeps a
    SIGINT handler that is not Python's default."""
    stopped = _SignalStop()

    def on_signal(signum: int, frame: object) -> None:
        if stopped.signum is not None:
            _error("interrupted again: aborting")
            os._exit(128 + signum)
        stopped.signum = signum
        # From another thread: stop() then wakes the consumer's event loop through its self-pipe.
        threading.Thread(target=consumer.stop, daemon=True).start()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    return stopped


def cmd_dlq_list(client: QueueCore, args: argparse.Namespace) -> int:
    cursor: str | None = None
    shown = 0
    while True:
        page = client.dlq.inspect(
            args.topic, group=args.group, limit=min(1000, args.limit or 100), cursor=cursor
        )
        for entry in page.data:
            if args.limit is not None and shown >= args.limit:
                return EXIT_OK
            _emit_model(entry, sys.stdout)
            shown += 1
        cursor = page.next_cursor
        if cursor is None:
            return EXIT_OK


def cmd_dlq_replay(client: QueueCore, args: argparse.Namespace) -> int:
    _emit_model(client.dlq.replay(args.topic, args.group, message_id=args.message_id), sys.stdout)
    return EXIT_OK


def cmd_dlq_replay_all(client: QueueCore, args: argparse.Namespace) -> int:
    _emit_model(client.dlq.replay_all(args.topic, args.group, rate=args.rate), sys.stdout)
    return EXIT_OK


def cmd_dlq_delete(client: QueueCore, args: argparse.Namespace) -> int:
    client.dlq.delete(args.topic, args.group, message_id=args.message_id)
    _emit({"messageId": args.message_id, "deleted": True}, sys.stdout)
    return EXIT_OK


def cmd_dlq_audit(client: QueueCore, args: argparse.Namespace) -> int:
    cursor: str | None = None
    while True:
        page = client.dlq.audit(args.topic, args.group, limit=100, cursor=cursor)
        for entry in page.data:
            _emit(entry.model_dump(mode="json", by_alias=True, exclude_none=True), sys.stdout)
        cursor = page.next_cursor
        if cursor is None:
            return EXIT_OK


def cmd_alerts_set(client: QueueCore, args: argparse.Namespace) -> int:
    _emit(
        client.alerts.set(url=args.url, secret=args.secret).model_dump(
            mode="json", by_alias=True, exclude_none=True
        ),
        sys.stdout,
    )
    return EXIT_OK


def cmd_alerts_show(client: QueueCore, args: argparse.Namespace) -> int:
    try:
        endpoint = client.alerts.get()
    except APIStatusError as exc:
        if exc.code != "ALERT_ENDPOINT_NOT_FOUND":
            raise
        # The API's message tells an API caller which call sets one; a CLI user needs the command.
        _error(
            f"Request {exc.request_id}: 404 ALERT_ENDPOINT_NOT_FOUND: this project has no alert endpoint; "
            "set one with: queuecore alerts set --url URL"
        )
        return EXIT_API
    _emit(endpoint.model_dump(mode="json", by_alias=True, exclude_none=True), sys.stdout)
    return EXIT_OK


def cmd_alerts_delete(client: QueueCore, args: argparse.Namespace) -> int:
    client.alerts.delete()
    _emit({"deleted": True}, sys.stdout)
    return EXIT_OK


def cmd_alerts_test(client: QueueCore, args: argparse.Namespace) -> int:
    _emit_model(client.alerts.send_test_event(), sys.stdout)
    return EXIT_OK


def cmd_alerts_deliveries(client: QueueCore, args: argparse.Namespace) -> int:
    for attempt in client.alerts.deliveries(limit=args.limit).data:
        _emit_model(attempt, sys.stdout)
    return EXIT_OK


def cmd_health(client: QueueCore, args: argparse.Namespace) -> int:
    health = client.health()
    _emit_model(health, sys.stdout)
    return EXIT_OK if health.ok else EXIT_API


def cmd_publish(client: QueueCore, args: argparse.Namespace) -> int:
    headers = _parse_headers(args.header)
    if args.message is not None and args.message != "-":
        if args.file is not None:
            raise UsageError("give either a JSON message or --file, not both")
        data = _parse_json(args.message, "the message")
        result = client.publish(
            args.topic,
            data,
            key=args.key,
            headers=headers,
            partition=args.partition,
            idempotency_key=args.idempotency_key,
        )
        if not args.quiet:
            _emit_model(result, sys.stdout)
        return EXIT_OK
    # The whole input is validated before anything is sent: a bad line part-way must not leave the lines
    # before it published (a rerun after fixing it would publish them twice without an idempotency key).
    if args.file is not None:
        with open(args.file, encoding="utf-8") as source:
            _validate_lines(source)
            source.seek(0)
            return _publish_lines(client, args, headers, source, show_progress=True)
    interactive = sys.stdin.isatty()
    if interactive:
        sys.stderr.write("queuecore: one JSON message per line; end with Ctrl-D\n")
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        _validate_lines(sys.stdin, spool)
        spool.seek(0)
        return _publish_lines(client, args, headers, spool, show_progress=not interactive)


class _Progress:
    """A one-line progress report on stderr: rewritten in place on a terminal, else a line now and then."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.monotonic()
        self.last = 0.0
        self.shown = -1
        self.tty = sys.stderr.isatty()

    def update(self, published: int, replayed: int, batches: int, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if final and published == self.shown:
            if self.tty:
                sys.stderr.write("\n")
            return
        if not final and now - self.last < _PROGRESS_EVERY:
            return
        self.last, self.shown = now, published
        elapsed = max(now - self.started, 1e-9)
        rate = published / elapsed
        if replayed:  # a rerun: say what was written, not only what was sent
            what = f"{published - replayed} new, {replayed} replayed"
        else:
            what = f"published {published} messages"
        text = f"{what} in {batches} batches, {elapsed:.1f} s ({rate:.0f}/s)"
        if self.tty:
            sys.stderr.write("\r" + text + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


def _lines(source: IO[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(source, start=1):
        if line.strip():
            yield number, line


def _validate_lines(source: IO[str], spool: IO[str] | None = None) -> None:
    """Check that every non-blank line is JSON (copying each line to ``spool`` when given)."""
    for number, line in enumerate(source, start=1):
        if spool is not None:
            spool.write(line)
        if line.strip():
            _parse_json(line, f"line {number}")


def _publish_lines(
    client: QueueCore,
    args: argparse.Namespace,
    headers: dict[str, str] | None,
    source: IO[str],
    *,
    show_progress: bool,
) -> int:
    """One message per non-blank line of a validated input, published in order in batches of up to
    ``--batch-size``."""
    progress = _Progress(show_progress and not args.quiet)
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
                _emit(item.model_dump(mode="json", by_alias=True, exclude_none=True), sys.stdout)
            sys.stdout.flush()
        batch, batch_bytes = [], 0
        progress.update(published, replayed, batches)

    for number, line in _lines(source):
        data = _parse_json(line, f"line {number}")
        size = len(line.encode("utf-8")) + _ITEM_OVERHEAD
        if batch and (len(batch) >= args.batch_size or batch_bytes + size > _MAX_BATCH_BYTES):
            flush()
        key = f"{args.idempotency_key}:{number}" if args.idempotency_key else None
        batch.append(
            BatchMessage(
                data=data, key=args.key, headers=headers, partition=args.partition, idempotency_key=key
            )
        )
        batch_bytes += size
    flush()
    progress.update(published, replayed, batches, final=True)
    return EXIT_OK


# -- parsing and running ----------------------------------------------------------------------------------


# argparse names a type function in its message ("invalid _positive value"): these raise
# ArgumentTypeError instead, which argparse prints after the option's name.


def _whole(text: str, low: int, high: int | None = None) -> int:
    span = f"{low} or more" if high is None else f"{low} to {high}"
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"must be a whole number of {span}, got {text!r}")
    return value


def _positive(text: str) -> int:
    return _whole(text, 1)


def _batch_size(text: str) -> int:
    return _whole(text, 1, MAX_BATCH_SIZE)


def _non_negative(text: str) -> int:
    return _whole(text, 0)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds more than 0, got {text!r}")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of messages per second more than 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queuecore",
        description="QueueCore from the shell. Prints JSON lines. "
        "Key: QUEUECORE_API_KEY; server: QUEUECORE_BASE_URL.",
        epilog="Exit codes: 0 ok, 1 refused by the API, 2 bad usage or input, 3 server unreachable.",
    )
    parser.add_argument("--version", action="version", version=f"queuecore {__version__}")
    parser.add_argument("--api-key", help="the API key (default: $QUEUECORE_API_KEY)")
    parser.add_argument(
        "--base-url", help="the server (default: $QUEUECORE_BASE_URL or http://127.0.0.1:8080)"
    )
    parser.add_argument("--timeout", type=_seconds, help="seconds per attempt")
    parser.add_argument("--max-retries", type=_non_negative, help="retries of a failed attempt (default 2)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    topics = sub.add_parser("topics", help="manage topics").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    tl = topics.add_parser("list", help="every topic, one per line")
    tl.add_argument("--page-size", type=_positive, help="topics fetched per request (1-1000)")
    tl.set_defaults(run=cmd_topics_list)
    tc = topics.add_parser("create", help="create a topic")
    tc.add_argument("name")
    tc.add_argument("--retention", help="<n>m|h|d, 1m-365d (default 7d)")
    tc.add_argument("--delivery", choices=["exactly-once", "at-least-once"])
    tc.add_argument("--partitions", type=_positive, help="1-256 (default 3)")
    tc.set_defaults(run=cmd_topics_create)
    td = topics.add_parser("describe", help="a topic with per-partition offsets")
    td.add_argument("name")
    td.set_defaults(run=cmd_topics_describe)
    tu = topics.add_parser("update", help="increase partitions, change retention")
    tu.add_argument("name")
    tu.add_argument("--partitions", type=_positive)
    tu.add_argument("--retention")
    tu.set_defaults(run=cmd_topics_update)
    tx = topics.add_parser("delete", help="delete a topic and its messages")
    tx.add_argument("name")
    tx.set_defaults(run=cmd_topics_delete)

    pub = sub.add_parser(
        "publish",
        help="publish a JSON message, or one message per line of stdin (-) or --file",
        description="Publish one message given as JSON, or one message per non-blank line of stdin ('-', "
        "also when no message is given) or of --file, in batches of up to 1000. Lines mode prints one "
        "result per message and, when the input is not a terminal, progress on stderr.",
    )
    pub.add_argument("topic")
    pub.add_argument("message", nargs="?", help="the message's data as JSON, or - to read lines from stdin")
    pub.add_argument("--file", help="read one JSON message per line from this file")
    pub.add_argument("--key", help="the partitioning key (every message)")
    pub.add_argument("--header", action="append", metavar="NAME=VALUE", help="a header (repeatable)")
    pub.add_argument("--partition", type=_non_negative, help="an explicit partition")
    pub.add_argument(
        "--idempotency-key",
        help="the idempotency key; with lines, a prefix: line N gets PREFIX:N, so rerunning the same input "
        "publishes nothing twice",
    )
    pub.add_argument(
        "--batch-size", type=_batch_size, default=MAX_BATCH_SIZE, help="messages per request (1-1000)"
    )
    pub.add_argument("-q", "--quiet", action="store_true", help="print no results and no progress")
    pub.set_defaults(run=cmd_publish)

    messages = sub.add_parser("messages", help="messages by id").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    mg = messages.add_parser("get", help="one message by id")
    mg.add_argument("topic")
    mg.add_argument("message_id")
    mg.set_defaults(run=cmd_messages_get)

    read = sub.add_parser("read", help="messages of one partition, one per line")
    read.add_argument("topic")
    read.add_argument("--partition", "-p", type=_non_negative, required=True)
    read.add_argument("--from-offset", type=_non_negative, help="first offset (default: the earliest)")
    read.add_argument("--from-timestamp", help="first message at or after this ISO-8601 time or epoch ms")
    read.add_argument("--limit", type=_positive, help="at most this many messages (default: to the end)")
    read.set_defaults(run=cmd_read)

    groups = sub.add_parser("groups", help="consumer groups of a topic").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    gl = groups.add_parser("list", help="the topic's groups with members and lag, one per line")
    gl.add_argument("topic")
    gl.set_defaults(run=cmd_groups_list)
    gd = groups.add_parser("describe", help="a group's partitions (consumer, offset, lag) and config")
    gd.add_argument("topic")
    gd.add_argument("group")
    gd.set_defaults(run=cmd_groups_describe)
    gr = groups.add_parser("reset-offsets", help="move every partition of a stopped group")
    gr.add_argument("topic")
    gr.add_argument("group")
    gr.add_argument("--to", type=_reset_target, required=True, help="earliest, latest or an offset")
    gr.set_defaults(run=cmd_groups_reset_offsets)

    offsets = sub.add_parser("offsets", help="a group's offsets").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    og = offsets.add_parser("get", help="{current, latest, lag} of one partition, or of each")
    og.add_argument("topic")
    og.add_argument("--group", "-g", required=True)
    og.add_argument("--partition", "-p", type=_non_negative)
    og.set_defaults(run=cmd_offsets_get)
    os_ = offsets.add_parser("seek", help="move one partition to an offset or a time")
    os_.add_argument("topic")
    os_.add_argument("--group", "-g", required=True)
    os_.add_argument("--partition", "-p", type=_non_negative, required=True)
    os_.add_argument("--offset", type=_non_negative)
    os_.add_argument("--timestamp", help="ISO-8601 time or epoch milliseconds")
    os_.set_defaults(run=cmd_offsets_seek)
    orr = offsets.add_parser("reset", help="move every partition (or one) to earliest or latest")
    orr.add_argument("topic")
    orr.add_argument("--group", "-g", required=True)
    orr.add_argument("--to", choices=["earliest", "latest"], required=True)
    orr.add_argument("--partition", "-p", type=_non_negative)
    orr.set_defaults(run=cmd_offsets_reset)

    consume = sub.add_parser("consume", help="consume as a group member: one JSON line per message, acked")
    consume.add_argument("topic")
    consume.add_argument("--group", "-g", required=True)
    consume.add_argument(
        "--from",
        dest="start_from",
        choices=["earliest", "latest"],
        default="latest",
        help="where a group without committed offsets starts (default: latest)",
    )
    consume.add_argument("--count", "-n", type=_positive, help="exit after this many messages")
    consume.add_argument("--no-ack", action="store_true", help="print without acking (redelivered later)")
    consume.add_argument("--max-in-flight", type=_positive, default=100)
    consume.add_argument("--transport", choices=["websocket", "pull"], default="websocket")
    consume.set_defaults(run=cmd_consume)

    dlq = sub.add_parser("dlq", help="a group's dead-letter queue").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    dl = dlq.add_parser("list", help="the dead letters, oldest first, one per line")
    dl.add_argument("topic")
    dl.add_argument("--group", "-g", required=True)
    dl.add_argument("--limit", type=_positive, help="at most this many (default: all)")
    dl.set_defaults(run=cmd_dlq_list)
    dr = dlq.add_parser("replay", help="send one dead letter back to the group")
    dr.add_argument("topic")
    dr.add_argument("--group", "-g", required=True)
    dr.add_argument("--message-id", required=True)
    dr.set_defaults(run=cmd_dlq_replay)
    dra = dlq.add_parser("replay-all", help="send every dead letter back to the group")
    dra.add_argument("topic")
    dra.add_argument("--group", "-g", required=True)
    dra.add_argument("--rate", type=_rate, help="at most this many messages per second")
    dra.set_defaults(run=cmd_dlq_replay_all)
    dd = dlq.add_parser("delete", help="remove one dead letter for good")
    dd.add_argument("topic")
    dd.add_argument("--group", "-g", required=True)
    dd.add_argument("--message-id", required=True)
    dd.set_defaults(run=cmd_dlq_delete)
    da = dlq.add_parser("audit", help="who replayed or deleted what, newest first")
    da.add_argument("topic")
    da.add_argument("--group", "-g", required=True)
    da.set_defaults(run=cmd_dlq_audit)

    alerts = sub.add_parser("alerts", help="the project's alert webhook (DLQ depth)").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    als = alerts.add_parser("set", help="set the endpoint (a generated secret is printed once)")
    als.add_argument("--url", required=True)
    als.add_argument("--secret", help="your own signing secret, 16-255 characters")
    als.set_defaults(run=cmd_alerts_set)
    alerts.add_parser("show", help="the endpoint and its breaker state").set_defaults(run=cmd_alerts_show)
    alerts.add_parser("delete", help="remove the endpoint").set_defaults(run=cmd_alerts_delete)
    alerts.add_parser("test", help="send a signed test event").set_defaults(run=cmd_alerts_test)
    ald = alerts.add_parser("deliveries", help="delivery attempts, newest first")
    ald.add_argument("--limit", type=_positive, default=50)
    ald.set_defaults(run=cmd_alerts_deliveries)

    health = sub.add_parser("health", help="the service's readiness (exit 1 when down)")
    health.set_defaults(run=cmd_health)
    return parser


def _error(text: str) -> None:
    sys.stderr.write(f"queuecore: error: {text}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = build_parser().parse_args(argv)
    client_options: dict[str, Any] = {"api_key": args.api_key, "base_url": args.base_url}
    if args.timeout is not None:
        client_options["timeout"] = args.timeout
    if args.max_retries is not None:
        client_options["max_retries"] = args.max_retries
    try:
        client = QueueCore(**client_options)
    except QueueCoreError as exc:  # no API key, or one that cannot be a key (inner whitespace)
        _error(str(exc))
        return EXIT_USAGE
    try:
        with client:
            code: int = args.run(client, args)
            return code
    except UsageError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except APIStatusError as exc:
        _error(str(exc))
        for detail in exc.details or ():
            _error(f"  {detail.get('field')}: {detail.get('issue')}")
        return EXIT_API
    except APIConnectionError as exc:
        _error(f"{exc}. Is the server at {client.base_url} up?")
        return EXIT_CONNECTION
    except APIError as exc:
        _error(str(exc))
        return EXIT_API
    except QueueCoreError as exc:  # refused by the SDK before any request (a malformed key, say)
        _error(str(exc))
        return EXIT_USAGE
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        _silence_stdout()
        return EXIT_OK
    except OSError as exc:  # --file not readable
        _error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED


def _silence_stdout() -> None:
    # Python flushes stdout at exit; to a closed pipe that would print a second error.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
