"""``queuecore overview TOPIC``: one screen about a topic: its settings, per partition its offsets and size,
and its groups with consumers and per-partition lag. A table on a terminal, one JSON object otherwise."""

from __future__ import annotations

import argparse
from typing import Any

from .._client import QueueCore
from ._args import Subcommands, add_command, default_format
from ._errors import EXIT_OK
from ._output import emit, table

__all__ = ["register"]


def collect(client: QueueCore, topic: str) -> dict[str, Any]:
    """The overview as one JSON-ready object (wire field names)."""
    detail = client.topics.describe(topic)
    payload = detail.to_wire()
    partitions = payload.pop("partitionDetails")
    groups: list[dict[str, Any]] = []
    for summary in client.consumer_groups.list(topic):
        owners = {p.id: p.consumer for p in client.consumer_groups.describe(topic, summary.name).partitions}
        offsets = client.offsets.get(topic, group=summary.name)
        groups.append(
            {
                "name": summary.name,
                "consumers": summary.consumers,
                "lag": sum(o.lag for o in offsets),
                "partitions": [
                    {
                        "partition": o.partition,
                        "consumer": owners.get(o.partition),
                        "current": o.current,
                        "latest": o.latest,
                        "lag": o.lag,
                    }
                    for o in offsets
                ],
            }
        )
    return {"topic": payload, "partitions": partitions, "groups": groups}


def cmd_overview(client: QueueCore, args: argparse.Namespace) -> int:
    """Print the overview."""
    overview = collect(client, args.topic)
    if default_format(args.output) == "json":
        emit(overview)
        return EXIT_OK
    topic = overview["topic"]
    copies = f"{topic['replicas']} replica" + ("" if topic["replicas"] == 1 else "s")
    print(
        f"{topic['name']}  {topic['partitions']} partitions, {copies}, retention {topic['retention']}, "
        f"{topic['delivery']}, {topic['status']}, created {topic['createdAt']}"
    )
    print()
    table(
        ["PARTITION", "EARLIEST", "LATEST", "MESSAGES", "BYTES"],
        [
            [p["id"], p["earliestOffset"], p["latestOffset"], p["messages"], p["bytes"]]
            for p in overview["partitions"]
        ],
    )
    print()
    if not overview["groups"]:
        print("no consumer groups")
        return EXIT_OK
    table(
        ["GROUP", "CONSUMERS", "LAG"],
        [[g["name"], g["consumers"], g["lag"]] for g in overview["groups"]],
    )
    print()
    table(
        ["GROUP", "PARTITION", "CONSUMER", "CURRENT", "LATEST", "LAG"],
        [
            [g["name"], p["partition"], p["consumer"] or "-", p["current"], p["latest"], p["lag"]]
            for g in overview["groups"]
            for p in g["partitions"]
        ],
    )
    return EXIT_OK


def register(sub: Subcommands) -> None:
    """Add ``overview``."""
    overview = add_command(
        sub,
        "overview",
        help="a topic on one screen: partitions, offsets, groups and their lag",
        example="queuecore overview order.events\nqueuecore overview order.events -o json | jq '.groups[].lag'",
    )
    overview.add_argument("topic")
    overview.add_argument(
        "-o", "--output", choices=["json", "human"], help="default: a table on a terminal, json otherwise"
    )
    overview.set_defaults(run=cmd_overview)
