"""``queuecore topics``: list, create, describe, update, delete."""

from __future__ import annotations

import argparse

from .._client import QueueCore
from ._args import Subcommands, add_command, add_group, add_table_option, default_format, positive
from ._errors import EXIT_OK, UsageError
from ._output import emit, emit_model, listing, table

__all__ = ["register"]


def cmd_list(client: QueueCore, args: argparse.Namespace) -> int:
    """Every topic: a table on a terminal, one JSON line each otherwise."""
    columns = [
        ("NAME", "name"),
        ("PARTITIONS", "partitions"),
        ("REPLICAS", "replicas"),
        ("RETENTION", "retention"),
        ("DELIVERY", "delivery"),
        ("STATUS", "status"),
        ("CREATED", "createdAt"),
    ]
    listing(default_format(args.output), columns, client.topics.list(limit=args.page_size))
    return EXIT_OK


def cmd_create(client: QueueCore, args: argparse.Namespace) -> int:
    """Create a topic."""
    emit_model(
        client.topics.create(
            args.name,
            retention=args.retention,
            delivery=args.delivery,
            partitions=args.partitions,
            replicas=args.replicas,
        )
    )
    return EXIT_OK


def cmd_describe(client: QueueCore, args: argparse.Namespace) -> int:
    """A topic with per-partition offsets and where each partition's copies live: one JSON object, or
    (``-o human``, the default on a terminal) its settings, then a table of the partitions and one of the
    copies (server, zone, leader or follower, caught up, lag)."""
    detail = client.topics.describe(args.name)
    if default_format(args.output) == "json":
        emit_model(detail)
        return EXIT_OK
    copies = f"{detail.replicas} replica" + ("" if detail.replicas == 1 else "s")
    print(
        f"{detail.name}  {detail.partitions} partitions, {copies}, retention {detail.retention}, "
        f"{detail.delivery}, {detail.status}, created {detail.to_wire()['createdAt']}"
    )
    print()
    table(
        ["PARTITION", "EARLIEST", "LATEST", "MESSAGES", "BYTES"],
        [[p.id, p.earliest_offset, p.latest_offset, p.messages, p.bytes] for p in detail.partition_details],
    )
    print()
    table(
        ["PARTITION", "SERVER", "ZONE", "ROLE", "CURRENT", "LAG"],
        [
            [
                p.id,
                r.server,
                r.zone or "-",
                "leader" if r.leader else "follower",
                "yes" if r.current else "no",
                "-" if r.lag is None else r.lag,
            ]
            for p in detail.partition_details
            for r in p.replicas
        ],
    )
    return EXIT_OK


def cmd_update(client: QueueCore, args: argparse.Namespace) -> int:
    """Add partitions or change retention."""
    if args.partitions is None and args.retention is None:
        raise UsageError("topics update needs --partitions and/or --retention")
    emit_model(client.topics.update(args.name, partitions=args.partitions, retention=args.retention))
    return EXIT_OK


def cmd_delete(client: QueueCore, args: argparse.Namespace) -> int:
    """Delete a topic with its messages, groups and DLQs."""
    client.topics.delete(args.name)
    emit({"name": args.name, "deleted": True})
    return EXIT_OK


def register(sub: Subcommands) -> None:
    """Add ``topics list|create|describe|update|delete``."""
    topics = add_group(
        sub,
        "topics",
        help="manage topics",
        example="queuecore topics create order.events --partitions 6 --retention 30d\nqueuecore topics list",
    )
    tl = add_command(
        topics, "list", help="every topic, one per line", example="queuecore topics list | jq -r .name"
    )
    tl.add_argument("--page-size", type=positive, help="topics fetched per request (1-1000)")
    add_table_option(tl)
    tl.set_defaults(run=cmd_list)
    tc = add_command(
        topics,
        "create",
        help="create a topic",
        example="queuecore topics create order.events --partitions 6 --retention 30d --delivery at-least-once",
    )
    tc.add_argument("name")
    tc.add_argument("--retention", help="<n>m|h|d, 1m-365d (default 7d)")
    tc.add_argument("--delivery", choices=["exactly-once", "at-least-once"])
    tc.add_argument("--partitions", type=positive, help="1-256 (default 3)")
    tc.add_argument(
        "--replicas",
        type=positive,
        choices=(1, 3, 5),
        help="copies of each message, fixed at creation (default 3 on JetStream, 1 on the local engine)",
    )
    tc.set_defaults(run=cmd_create)
    td = add_command(
        topics,
        "describe",
        help="a topic with per-partition offsets and where each partition's copies live (server, zone)",
        example="queuecore topics describe order.events -o human\n"
        "queuecore topics describe order.events | jq '.partitionDetails[].replicas[] | select(.leader) | .zone'",
    )
    td.add_argument("name")
    td.add_argument(
        "-o",
        "--output",
        choices=("json", "human"),
        help="one JSON object, or tables of the partitions and their copies (default: tables on a "
        "terminal, json otherwise)",
    )
    td.set_defaults(run=cmd_describe)
    tu = add_command(
        topics,
        "update",
        help="increase partitions, change retention",
        example="queuecore topics update order.events --partitions 12 --retention 14d",
    )
    tu.add_argument("name")
    tu.add_argument("--partitions", type=positive)
    tu.add_argument("--retention")
    tu.set_defaults(run=cmd_update)
    tx = add_command(
        topics,
        "delete",
        help="delete a topic and its messages",
        example="queuecore topics delete order.events",
    )
    tx.add_argument("name")
    tx.set_defaults(run=cmd_delete)
