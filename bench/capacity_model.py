"""Capacity model: from a target load to the number of API processes, NATS servers, Postgres primaries and
Redis instances it needs, and which of them saturates first.

The model is a sum of measured unit costs (``Capacities``; defaults are the figures measured on this
machine, ``bench/results/scaling_probes.json`` and the publish/consume/limiter results, see
``docs/scaling.md``) times the rates a load implies (``Load``): CPU seconds per request, per message, per
append, per stream replica; bytes of memory per stream replica; fsyncs per append. Each component is sized
so that no resource runs above ``Capacities.utilisation`` of what its units have. Everything is linear in
the message rates once the topic layout is fixed, which is what lets ``saturation`` say at what load a
given fleet runs out, and of what. The inputs (``Load``, ``Capacities``, their validation) are
``capacity_inputs.py``; this module sizes the fleet from them, and is the CLI.

    .venv/bin/python bench/capacity_model.py --in 1000000 --out 1000000 --topics 100000   # the docs' example
    .venv/bin/python bench/capacity_model.py --in 50000 --ack-mode pull --set nats_cores=4

From Python::

    from bench.capacity_model import Capacities, Load, plan
    result = plan(Load(msgs_in_per_s=1_000_000, msgs_out_per_s=1_000_000, topics=100_000))
    result.units["nats"], result.first_to_saturate
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Run as a script or imported as ``bench.capacity_model``: its inputs module sits beside it.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from capacity_inputs import (
    ACK_MODES,
    GIB,
    PROBES,
    Capacities,
    InvalidInput,
    Load,
    validate,
)

__all__ = [
    "ACK_MODES",
    "COMPONENTS",
    "Capacities",
    "Component",
    "InvalidInput",
    "Load",
    "Plan",
    "main",
    "plan",
    "render",
    "saturation",
    "single_publish_fleet",
    "size",
    "unit_figures",
    "validate",
]

COMPONENTS: tuple[str, ...] = ("api", "nats", "postgres", "redis")


@dataclass(frozen=True, slots=True)
class Component:
    """One kind of node: how many, how busy each resource is at that count, and which resource set it."""

    name: str
    units: int
    demand: dict[str, float]  # resource -> total demand (cores, bytes, fsyncs/s, bytes/s, decisions/s)
    per_unit: dict[str, float]  # resource -> what one unit offers (before the utilisation target)
    utilisation: dict[str, float]  # resource -> demand / (units * per_unit)
    binding: str  # the resource that set ``units``
    # resource -> the part of ``demand`` no message causes (streams' Raft heartbeats, members' beats)
    idle: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    """The fleet a load needs, and where the smallest fleet gives out first."""

    load: Load
    capacities: Capacities
    components: dict[str, Component]
    # Load (msgs_in/s, same shape) at which each component of ``reference`` reaches the utilisation target.
    saturation: dict[str, float] = field(default_factory=dict)
    reference: dict[str, int] = field(default_factory=dict)
    # Share of the reference fleet's target capacity that the load-independent demand (streams, members'
    # beats) takes on its own, per component: above 1, that component is short before any message.
    idle_share: dict[str, float] = field(default_factory=dict)

    @property
    def units(self) -> dict[str, int]:
        return {name: c.units for name, c in self.components.items()}

    @property
    def first_to_saturate(self) -> str:
        """The component of the reference fleet that runs out at the lowest load (of those already short
        without any message, the one furthest over)."""
        return min(self.saturation, key=lambda name: (self.saturation[name], -self.idle_share[name]))


def demand(load: Load, caps: Capacities) -> dict[str, dict[str, float]]:
    """Total demand per component and resource for ``load`` (validated by the caller)."""
    n_in, n_out, r = load.msgs_in_per_s, load.out_per_s, load.replicas
    publish_requests = n_in / load.publish_batch
    # A publish lands in one partition (one atomic append) unless it spans several: then one append per
    # partition it touches (at most partitions_per_topic) plus the commit record, which is replicated too.
    spread = min(load.partitions_per_topic, load.publish_batch)
    appends_per_request = 1 + load.cross_partition_share * spread  # ``spread`` parts + 1 record - 1
    appends = publish_requests * appends_per_request
    # What each Raft round costs is paid per write: the group commit puts ``group_commit`` appends in one.
    writes = appends / load.group_commit
    stored_msgs = n_in * (1 + load.cross_partition_share)  # the commit record holds the batch once more

    if load.ack_mode == "pull":
        pull_cycles = n_out / load.ack_batch
        # Members with nothing to read still long-poll: a poll that finds nothing (half a cycle).
        idle_polls = load.consumers * caps.pull_idle_polls_per_member_s
        consume_requests = 2 * pull_cycles + idle_polls  # each poll and ack is a request and a decision
        api_consume = (
            pull_cycles + idle_polls / 2
        ) * caps.api_cpu_per_pull_cycle + consume_requests * caps.api_cpu_per_request
        pg_consume = (pull_cycles + idle_polls / 2) * caps.pg_cpu_per_pull_cycle
    else:
        consume_requests = 0.0  # push: one WebSocket per member, frames are not requests
        # Every member beats (heartbeat, due-lease scan, claim read) whether messages flow or not.
        beats = load.consumers / caps.push_beat_interval_s
        api_consume = n_out * caps.api_cpu_per_delivered_msg + beats * caps.api_cpu_per_push_beat
        checkpoints = n_out / load.ack_batch
        if load.ack_mode == "push-at-least-once":
            # Written within 50 ms per partition, whatever number of ack frames arrived meanwhile.
            consumed_partitions = load.topics * load.partitions_per_topic
            checkpoints = min(checkpoints, consumed_partitions / caps.checkpoint_coalesce_s)
        pg_consume = checkpoints * caps.pg_cpu_per_checkpoint + beats * caps.pg_cpu_per_push_beat
    decisions = publish_requests + consume_requests

    api_cores = (
        publish_requests * caps.api_cpu_per_request
        + n_in * caps.api_cpu_per_published_msg
        + writes * caps.api_cpu_per_js_append
        + stored_msgs * caps.api_cpu_per_js_appended_msg
        + api_consume
        + n_out * caps.api_cpu_per_js_read_msg
        + decisions * caps.api_cpu_per_limiter_decision
    )
    stream_replicas = load.streams * r
    nats_cores = (
        writes * r * caps.nats_cpu_per_append_replica
        + stored_msgs * r * caps.nats_cpu_per_msg_replica
        + n_out * caps.nats_cpu_per_read_msg
        + stream_replicas * caps.nats_idle_cpu_per_stream_replica
    )
    wire = load.message_bytes + 64  # subject, headers and framing of a record
    return {
        "api": {"cores": api_cores},
        "nats": {
            "cores": nats_cores,
            "memory": stream_replicas * caps.nats_rss_per_stream_replica,
            "fsyncs": writes * r,
            # in from publishers, out to followers (r - 1 copies), out to readers
            "network": stored_msgs * wire * r + n_out * wire,
        },
        "postgres": {"cores": pg_consume},
        "redis": {"cores": decisions * caps.redis_cpu_per_decision, "decisions": decisions},
    }


def per_unit(caps: Capacities) -> dict[str, dict[str, float]]:
    """What one unit of each component offers, per resource."""
    return {
        "api": {"cores": 1.0},
        "nats": {
            "cores": float(caps.nats_cores),
            "memory": float(caps.nats_memory_bytes - caps.nats_memory_reserved),
            "fsyncs": caps.nats_fsyncs_per_s,
            "network": caps.nats_network_bytes_per_s,
        },
        "postgres": {"cores": float(caps.pg_cores)},
        "redis": {"cores": 1.0, "decisions": math.inf},
    }


def minimum_units(load: Load) -> dict[str, int]:
    """The smallest fleet that works at all: NATS needs as many servers as replicas, and three for a
    JetStream meta group that survives one loss."""
    return {"api": 1, "nats": max(3, load.replicas), "postgres": 1, "redis": 1}


def size(load: Load, caps: Capacities) -> dict[str, Component]:
    """Units per component so that every resource stays at or below ``caps.utilisation``."""
    needs, offers, floor = demand(load, caps), per_unit(caps), minimum_units(load)
    fixed = demand(load.scaled(0.0), caps)
    out: dict[str, Component] = {}
    for name in COMPONENTS:
        units, binding = floor[name], "minimum"
        for resource, amount in needs[name].items():
            offer = offers[name][resource]
            if math.isinf(offer):
                continue
            need = math.ceil(amount / (offer * caps.utilisation) - 1e-9)
            if need > units:
                units, binding = need, resource
        utilisation = {
            res: (amount / (units * offers[name][res]) if not math.isinf(offers[name][res]) else 0.0)
            for res, amount in needs[name].items()
        }
        out[name] = Component(name, units, needs[name], offers[name], utilisation, binding, fixed[name])
    return out


def saturation(load: Load, caps: Capacities, fleet: dict[str, int]) -> dict[str, float]:
    """For each component of ``fleet``: the inbound rate (same shape as ``load``) at which one of its
    resources reaches the utilisation target. Demand is affine in the rates: fixed (streams, members)
    plus variable, so the crossing point is exact. 0 means the fleet is short before any message."""
    fixed = demand(load.scaled(0.0), caps)
    unit = demand(load.scaled(1.0), caps)
    offers = per_unit(caps)
    out: dict[str, float] = {}
    for name in COMPONENTS:
        best = math.inf
        for resource, total in unit[name].items():
            offer = offers[name][resource]
            if math.isinf(offer):
                continue
            room = fleet[name] * offer * caps.utilisation - fixed[name][resource]
            variable = total - fixed[name][resource]
            if room <= 0:
                best = 0.0
            elif variable > 0:
                best = min(best, room / variable)
        out[name] = best * load.msgs_in_per_s if load.msgs_in_per_s > 0 else (0.0 if best == 0 else math.inf)
    return out


def idle_share(load: Load, caps: Capacities, fleet: dict[str, int]) -> dict[str, float]:
    """Per component, the largest share of ``fleet``'s target capacity the load-independent demand takes."""
    fixed, offers = demand(load.scaled(0.0), caps), per_unit(caps)
    return {
        name: max(
            (
                amount / (fleet[name] * offers[name][res] * caps.utilisation)
                for res, amount in fixed[name].items()
                if not math.isinf(offers[name][res])
            ),
            default=0.0,
        )
        for name in COMPONENTS
    }


def unit_figures(caps: Capacities | None = None) -> dict[str, float]:
    """What one unit of each component carries at the utilisation target, alone on one kind of work
    (the headline figures of docs/scaling.md; everything else at its cheapest)."""
    caps = caps or Capacities()
    u = caps.utilisation
    per_js_msg = caps.api_cpu_per_js_appended_msg + caps.api_cpu_per_js_append / 1000
    request = caps.api_cpu_per_request + caps.api_cpu_per_limiter_decision + caps.api_cpu_per_js_append
    nats_msg_r3 = 3 * (caps.nats_cpu_per_msg_replica + caps.nats_cpu_per_append_replica / 1000)
    return {
        "api: batch-published msgs/s (batches of 1,000)": u
        / (caps.api_cpu_per_published_msg + per_js_msg + request / 1000),
        "api: single publishes/s": u
        / (request + caps.api_cpu_per_published_msg + caps.api_cpu_per_js_appended_msg),
        "api: push-delivered msgs/s": u / (caps.api_cpu_per_delivered_msg + caps.api_cpu_per_js_read_msg),
        "api: pull-delivered msgs/s (polls of 100)": u
        / (
            (caps.api_cpu_per_pull_cycle + 2 * (caps.api_cpu_per_request + caps.api_cpu_per_limiter_decision))
            / 100
            + caps.api_cpu_per_js_read_msg
        ),
        "api: idle push members": u / (caps.api_cpu_per_push_beat / caps.push_beat_interval_s),
        "nats: record replicas/s stored per server (batches of 1,000; R=3 stores 3)": u
        * caps.nats_cores
        / (nats_msg_r3 / 3),
        "nats: idle stream replicas per server (CPU)": u
        * caps.nats_cores
        / caps.nats_idle_cpu_per_stream_replica,
        "nats: stream replicas per server (memory)": (caps.nats_memory_bytes - caps.nats_memory_reserved)
        / caps.nats_rss_per_stream_replica,
        "postgres: push checkpoints/s per primary": u * caps.pg_cores / caps.pg_cpu_per_checkpoint,
        "postgres: idle push members per primary": u
        * caps.pg_cores
        / (caps.pg_cpu_per_push_beat / caps.push_beat_interval_s),
        "postgres: pull-delivered msgs/s per primary (polls of 100)": u
        * caps.pg_cores
        / (caps.pg_cpu_per_pull_cycle / 100),
        "redis: limiter decisions/s per instance": u / caps.redis_cpu_per_decision,
    }


def plan(load: Load, caps: Capacities | None = None, reference: dict[str, int] | None = None) -> Plan:
    """Size the fleet for ``load`` and find what the reference fleet (default: the minimum) runs out of
    first. Raises ``InvalidInput`` for a load or capacities it cannot answer for."""
    caps = caps or Capacities()
    validate(load, caps)
    fleet = dict(reference or minimum_units(load))
    if set(fleet) != set(COMPONENTS) or any(not isinstance(v, int) or v < 1 for v in fleet.values()):
        raise InvalidInput(f"reference fleet needs a count >= 1 for each of {', '.join(COMPONENTS)}")
    return Plan(
        load, caps, size(load, caps), saturation(load, caps, fleet), fleet, idle_share(load, caps, fleet)
    )


def single_publish_fleet(
    rate: float, cluster_bench: dict[str, Any], caps: Capacities | None = None
) -> dict[str, dict[str, int]]:
    """API processes and NATS servers (R=3) for ``rate`` single publishes/s from what the cluster benchmark
    (``bench/results/cluster.json``) measured per publish on one partition, now and, when it ran with a
    baseline, before: the whole publish's CPU on the API process (HTTP, auth, limiter, engine client) and on
    the three NATS servers together. Each at most ``utilisation`` busy; NATS servers in threes."""
    caps = caps or Capacities()
    out: dict[str, dict[str, int]] = {}
    for side, figures in cluster_bench["median"].items():
        shape = figures["cluster_1p"]
        api_cores = rate * shape["api_cpu_ms"] / 1000
        nats_cores = rate * shape["nats_cpu_ms"] / 1000
        servers = math.ceil(nats_cores / (caps.nats_cores * caps.utilisation))
        out[side] = {
            "api": math.ceil(api_cores / caps.utilisation),
            "nats": 3 * max(1, math.ceil(servers / 3)),
        }
    return out


# -- CLI ---------------------------------------------------------------------------------------------------


def _fmt(resource: str, value: float) -> str:
    if resource == "memory":
        return f"{value / GIB:,.1f} GiB"
    if resource == "network":
        return f"{value * 8 / 1e9:,.2f} Gbit/s"
    if resource in ("fsyncs", "decisions"):
        return f"{value:,.0f}/s"
    return f"{value:,.1f} cores"


def render(result: Plan) -> str:
    load = result.load
    lines = [
        (
            f"load: {load.msgs_in_per_s:,.0f} msgs/s in, {load.out_per_s:,.0f} out, {load.message_bytes} B, "
            f"{load.topics:,} topics x {load.partitions_per_topic} partitions (R={load.replicas}, "
            f"{load.streams:,} streams), {load.consumers:,} consumers, {load.ack_mode}, "
            f"publish batch {load.publish_batch}, ack batch {load.ack_batch}"
            + (f", group commit {load.group_commit:g} appends per write" if load.group_commit != 1 else "")
        ),
        "",
        f"{'component':<10} {'units':>6}  {'set by':<9} demand (utilisation at that count)",
    ]
    for c in result.components.values():
        detail = ", ".join(
            f"{res} {_fmt(res, amount)} ({c.utilisation[res]:.0%})"
            + (f" of which idle {c.idle[res]:,.1f}" if res == "cores" and c.idle.get(res) else "")
            for res, amount in c.demand.items()
            if not math.isinf(c.per_unit[res])
        )
        lines.append(f"{c.name:<10} {c.units:>6}  {c.binding:<9} {detail}")
    ref = ", ".join(f"{n} {k}" for n, k in result.reference.items())
    lines += ["", f"reference fleet ({ref}) reaches {result.capacities.utilisation:.0%} busy at:"]
    for name, rate in sorted(result.saturation.items(), key=lambda kv: kv[1]):
        lines.append(
            f"  {name:<10} {rate:>14,.0f} msgs/s in" if math.isfinite(rate) else f"  {name:<10} never"
        )
    lines.append(f"first to saturate: {result.first_to_saturate}")
    return "\n".join(lines)


def render_unit_figures(caps: Capacities) -> str:
    lines = [f"one unit at {caps.utilisation:.0%} busy carries:"]
    lines += [f"  {name:<78} {value:>12,.0f}" for name, value in unit_figures(caps).items()]
    return "\n".join(lines)


def _capacity_override(text: str) -> tuple[str, float]:
    name, _, value = text.partition("=")
    names = {f.name for f in dataclasses.fields(Capacities)}
    if name not in names:
        raise argparse.ArgumentTypeError(f"unknown capacity {name!r}; one of: {', '.join(sorted(names))}")
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: {value!r} is not a number") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Nodes needed for a target load (see docs/scaling.md).")
    parser.add_argument("--in", dest="msgs_in", type=float, help="messages published per second")
    parser.add_argument("--per-unit", action="store_true", help="print what one unit of each kind carries")
    parser.add_argument(
        "--out", dest="msgs_out", type=float, default=None, help="deliveries/s (default: = in)"
    )
    parser.add_argument("--bytes", type=int, default=200, help="message size")
    parser.add_argument("--topics", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--ack-mode", default="push-exactly-once", choices=ACK_MODES)
    parser.add_argument("--publish-batch", type=int, default=100)
    parser.add_argument("--ack-batch", type=int, default=100)
    parser.add_argument(
        "--group-commit", type=float, default=1.0, help="appends per JetStream write (1: none coalesced)"
    )
    parser.add_argument("--cross-partition-share", type=float, default=0.0)
    parser.add_argument(
        "--from-probes",
        nargs="?",
        const=PROBES,
        type=Path,
        help="unit costs from a scaling_probes.json (default: the committed one) instead of the defaults",
    )
    parser.add_argument(
        "--set", type=_capacity_override, action="append", default=[], metavar="CAPACITY=VALUE"
    )
    parser.add_argument(
        "--single-publishes",
        type=Path,
        metavar="CLUSTER_JSON",
        help="size API and NATS for --in single publishes/s from a cluster_bench.py result",
    )
    args = parser.parse_args(argv)
    if args.msgs_in is None and not args.per_unit:
        parser.error("--in is required (or --per-unit)")
    caps = (
        Capacities.from_probes(json.loads(args.from_probes.read_text())) if args.from_probes else Capacities()
    )
    for name, value in args.set:
        current = getattr(caps, name)
        caps = dataclasses.replace(caps, **{name: int(value) if isinstance(current, int) else value})
    if args.per_unit:
        print(render_unit_figures(caps))
        return 0
    if args.single_publishes:
        fleet = single_publish_fleet(args.msgs_in, json.loads(args.single_publishes.read_text()), caps)
        for side, units in fleet.items():
            print(
                f"{side}: {units['api']:,} API processes, {units['nats']:,} NATS servers ({caps.nats_cores} cores)"
            )
        return 0
    load = Load(
        msgs_in_per_s=args.msgs_in,
        msgs_out_per_s=args.msgs_out,
        message_bytes=args.bytes,
        topics=args.topics,
        partitions_per_topic=args.partitions,
        replicas=args.replicas,
        consumers=args.consumers,
        ack_mode=args.ack_mode,
        publish_batch=args.publish_batch,
        ack_batch=args.ack_batch,
        group_commit=args.group_commit,
        cross_partition_share=args.cross_partition_share,
    )
    try:
        result = plan(load, caps)
    except InvalidInput as error:
        print(f"capacity_model: {error}", file=sys.stderr)
        return 2
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
