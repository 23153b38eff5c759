"""Capacity model: from a target load to the number of API processes, NATS servers, Postgres primaries and
Redis instances it needs, and which of them saturates first.

The model is a sum of measured unit costs (``Capacities``; defaults are the figures measured on this
machine, ``bench/results/scaling_probes.json`` and the publish/consume/limiter results, see
``docs/scaling.md``) times the rates a load implies (``Load``): CPU seconds per request, per message, per
append, per stream replica; bytes of memory per stream replica; fsyncs per append. Each component is sized
so that no resource runs above ``Capacities.utilisation`` of what its units have. Everything is linear in
the message rates once the topic layout is fixed, which is what lets ``saturation`` say at what load a
given fleet runs out, and of what.

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
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

AckMode = Literal["push-exactly-once", "push-at-least-once", "pull"]
ACK_MODES: tuple[str, ...] = ("push-exactly-once", "push-at-least-once", "pull")
COMPONENTS: tuple[str, ...] = ("api", "nats", "postgres", "redis")
REPLICA_CHOICES = (1, 3, 5)
GIB = 1 << 30
PROBES = Path(__file__).resolve().parent / "results" / "scaling_probes.json"


class InvalidInput(ValueError):
    """A load or capacity the model refuses (negative rates, replicas not 1/3/5, a zero capacity...)."""


@dataclass(frozen=True, slots=True)
class Load:
    """What the fleet must carry. Rates are averages over the busiest minute, not peaks of one partition."""

    msgs_in_per_s: float
    # Deliveries per second over all consumer groups (a message read by two groups counts twice);
    # None: one group reads everything (= msgs_in_per_s).
    msgs_out_per_s: float | None = None
    message_bytes: int = 200
    topics: int = 1
    partitions_per_topic: int = 1
    replicas: int = 3
    consumers: int = 1  # connected consumer members (WebSockets or pull members), all groups together
    ack_mode: AckMode = "push-exactly-once"
    publish_batch: int = 100  # messages per publish request (1: single publishes)
    ack_batch: int = 100  # ids per ack frame / ack call; for pull also messages per poll
    # Share of publish requests whose messages span several partitions (they add the commit record).
    cross_partition_share: float = 0.0

    @property
    def out_per_s(self) -> float:
        return self.msgs_in_per_s if self.msgs_out_per_s is None else self.msgs_out_per_s

    @property
    def streams(self) -> int:
        """Partition streams, plus the transaction stream."""
        return self.topics * self.partitions_per_topic + 1

    def scaled(self, factor: float) -> Load:
        """The same shape at ``factor`` times the message rates."""
        return dataclasses.replace(
            self,
            msgs_in_per_s=self.msgs_in_per_s * factor,
            msgs_out_per_s=None if self.msgs_out_per_s is None else self.msgs_out_per_s * factor,
        )


@dataclass(frozen=True, slots=True)
class Capacities:
    """Unit costs and unit sizes. Defaults: measured on this 2-core machine (``docs/scaling.md`` says
    which probe gave each); the sizes of a unit (cores of a NATS server, ...) are assumptions to override.

    CPU costs are seconds of one core. The measured ones come from a box where clients and servers share
    two cores, so they overstate what a dedicated core spends (contention is in them).
    """

    # -- API process (one Python process = one event loop = at most one core) --
    # One HTTP request end to end (FastAPI, auth, one single publish): publish.md, single publishes, one
    # worker; stands for the HTTP share of pull calls too (the pull probe runs the broker without HTTP).
    api_cpu_per_request: float = 1 / 2_034
    api_cpu_per_published_msg: float = 1 / 129_590  # publish.md: batches of 1,000, one worker
    api_cpu_per_delivered_msg: float = 1 / 94_961  # consume.md: WebSocket consume + ack, one consumer
    api_cpu_per_pull_cycle: float = 0.012  # scaling_probes: poll of 100 + ack of them (API side)
    api_cpu_per_limiter_decision: float = 0.74 / 13_012  # limiter.md: client CPU per Redis decision
    api_cpu_per_js_append: float = 3.8e-05  # scaling_probes: engine client CPU per append call
    api_cpu_per_js_appended_msg: float = 5e-06  # scaling_probes: engine client CPU per record appended
    api_cpu_per_js_read_msg: float = 5.9e-06  # scaling_probes: engine client CPU per record read
    api_cpu_per_push_beat: float = 0.0058  # scaling_probes: a push member's beat, API side
    # -- NATS server --
    nats_cpu_per_append_replica: float = 1.6e-05  # per append call, per replica (leader + followers)
    nats_cpu_per_msg_replica: float = 6e-06  # per record stored, per replica
    nats_cpu_per_read_msg: float = 4.5e-06  # per record read (one replica answers)
    nats_idle_cpu_per_stream_replica: float = 8.2e-05  # Raft heartbeats of an idle stream, per replica
    nats_rss_per_stream_replica: float = 170_000.0  # bytes resident per stream replica
    nats_fsyncs_per_s: float = 9_100.0  # replica writes one server's disk absorbs (sync_interval: always)
    nats_cores: int = 8  # cores of one NATS server (assumption)
    nats_memory_bytes: int = 32 * GIB  # memory of one NATS server (assumption)
    nats_memory_reserved: int = 4 * GIB  # OS, page cache floor, message buffers: not for streams
    nats_network_bytes_per_s: float = 1.25e9  # 10 Gbit/s NIC (assumption)
    # -- Postgres (one primary takes every write of its shard) --
    pg_cpu_per_checkpoint: float = 0.00021  # scaling_probes: a push checkpoint (one UPDATE, commit)
    pg_cpu_per_pull_cycle: float = 0.005  # scaling_probes: poll of 100 + ack of them (two commits)
    pg_cpu_per_push_beat: float = 0.0013  # scaling_probes: a push member's beat (heartbeat, scan, claim)
    pg_cores: int = 16  # cores of one Postgres primary (assumption)
    # -- Redis (single-threaded: one instance = one core) --
    redis_cpu_per_decision: float = 1.9e-05  # scaling_probes: Redis CPU per limiter decision
    # -- sizing --
    utilisation: float = 0.6  # plan every resource to run at most this busy (headroom for peaks, failover)
    checkpoint_coalesce_s: float = 0.05  # at-least-once acks are written within 50 ms (consuming.md)
    push_beat_interval_s: float = 0.5  # every WebSocket member beats this often (push.BEAT_EVERY)
    pull_idle_polls_per_member_s: float = 0.1  # a pull member with nothing to read: long polls (assumption)

    @classmethod
    def from_probes(cls, probes: dict[str, Any], **overrides: float) -> Capacities:
        """The measured unit costs out of ``bench/results/scaling_probes.json`` (the rest: defaults)."""
        js, st, pg = probes["jetstream"], probes["streams"], probes["postgres"]
        replicas = st["replicas"]  # every JetStream probe writes R=3 streams

        def cpu(row: dict[str, Any], side: str) -> float:
            return float(row[f"{side}_cpu_per_item"])

        batched = [js[f"engine_batch1000_p{p}"] for p in (1, 4, 16, 64)]
        single = js["engine_single_64_in_flight"]
        read = js["engine_read_1000_per_call"]
        per_msg_replica = statistics.median(cpu(row, "server") for row in batched) / replicas
        appended_msg = cpu(js["engine_batch1000_p1"], "client")
        pull = pg["pull_poll100_ack_4_members"]
        measured = {
            "api_cpu_per_js_append": max(0.0, cpu(single, "client") - appended_msg),
            "api_cpu_per_js_appended_msg": appended_msg,
            "api_cpu_per_js_read_msg": cpu(read, "client"),
            "api_cpu_per_pull_cycle": cpu(pull, "client"),
            "nats_cpu_per_append_replica": max(0.0, cpu(single, "server") / replicas - per_msg_replica),
            "nats_cpu_per_msg_replica": per_msg_replica,
            "nats_cpu_per_read_msg": cpu(read, "server"),
            "nats_idle_cpu_per_stream_replica": st["idle_core_per_1000_streams"] / 1000 / replicas,
            "nats_rss_per_stream_replica": st["rss_bytes_per_stream_all_replicas"] / replicas,
            # Three replicas on this one disk each wrote every single append: a floor for one disk.
            "nats_fsyncs_per_s": single["per_s"] * replicas,
            "pg_cpu_per_checkpoint": statistics.median(
                cpu(pg[f"checkpoint_express_w{w}"], "server") for w in (1, 4, 16)
            ),
            "pg_cpu_per_pull_cycle": cpu(pull, "server"),
            "api_cpu_per_push_beat": cpu(pg["push_beat_4_groups"], "client"),
            "pg_cpu_per_push_beat": cpu(pg["push_beat_4_groups"], "server"),
            "redis_cpu_per_decision": probes["redis"]["limiter_2_processes"]["redis_cpu_seconds_per_100k"]
            / 100_000,
        }
        assert set(measured) == set(MEASURED_BY_PROBES)
        return cls(**{**measured, **overrides})


# The capacities ``Capacities.from_probes`` derives from the probes (the others come from publish.md,
# consume.md and limiter.md, or are assumptions about the size of a unit).
MEASURED_BY_PROBES: tuple[str, ...] = (
    "api_cpu_per_js_append",
    "api_cpu_per_js_appended_msg",
    "api_cpu_per_js_read_msg",
    "api_cpu_per_pull_cycle",
    "nats_cpu_per_append_replica",
    "nats_cpu_per_msg_replica",
    "nats_cpu_per_read_msg",
    "nats_idle_cpu_per_stream_replica",
    "nats_rss_per_stream_replica",
    "nats_fsyncs_per_s",
    "pg_cpu_per_checkpoint",
    "pg_cpu_per_pull_cycle",
    "api_cpu_per_push_beat",
    "pg_cpu_per_push_beat",
    "redis_cpu_per_decision",
)


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


def validate(load: Load, caps: Capacities) -> None:
    """Refuse what the model cannot answer for; raises ``InvalidInput``."""
    numbers = {
        "msgs_in_per_s": load.msgs_in_per_s,
        "msgs_out_per_s": load.out_per_s,
        "cross_partition_share": load.cross_partition_share,
    }
    for name, value in numbers.items():
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
            or value < 0
        ):
            raise InvalidInput(f"{name} must be a finite number >= 0, got {value!r}")
    counts = {
        "message_bytes": load.message_bytes,
        "topics": load.topics,
        "partitions_per_topic": load.partitions_per_topic,
        "publish_batch": load.publish_batch,
        "ack_batch": load.ack_batch,
    }
    for name, value in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidInput(f"{name} must be an integer >= 1, got {value!r}")
    if not isinstance(load.consumers, int) or isinstance(load.consumers, bool) or load.consumers < 0:
        raise InvalidInput(f"consumers must be an integer >= 0, got {load.consumers!r}")
    if load.out_per_s > 0 and load.consumers < 1:
        raise InvalidInput("messages are delivered but there are no consumers")
    if load.publish_batch > 1000 or load.ack_batch > 1000:
        raise InvalidInput("publish_batch and ack_batch are at most 1000 (the API's limits)")
    if load.replicas not in REPLICA_CHOICES:
        raise InvalidInput(f"replicas must be 1, 3 or 5, got {load.replicas!r}")
    if load.ack_mode not in ACK_MODES:
        raise InvalidInput(f"ack_mode must be one of {', '.join(ACK_MODES)}, got {load.ack_mode!r}")
    if load.cross_partition_share > 1:
        raise InvalidInput("cross_partition_share is a share: 0 to 1")
    for f in dataclasses.fields(caps):
        value = getattr(caps, f.name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise InvalidInput(f"capacity {f.name} must be a finite number >= 0, got {value!r}")
    for name in (
        "nats_cores",
        "nats_memory_bytes",
        "nats_network_bytes_per_s",
        "nats_fsyncs_per_s",
        "pg_cores",
        "push_beat_interval_s",
        "checkpoint_coalesce_s",
    ):
        if getattr(caps, name) <= 0:
            raise InvalidInput(f"capacity {name} must be > 0")
    if not 0 < caps.utilisation <= 1:
        raise InvalidInput("utilisation must be in (0, 1]")
    if caps.nats_memory_reserved >= caps.nats_memory_bytes:
        raise InvalidInput("nats_memory_reserved leaves no memory for streams")


def demand(load: Load, caps: Capacities) -> dict[str, dict[str, float]]:
    """Total demand per component and resource for ``load`` (validated by the caller)."""
    n_in, n_out, r = load.msgs_in_per_s, load.out_per_s, load.replicas
    publish_requests = n_in / load.publish_batch
    # A publish lands in one partition (one atomic append) unless it spans several: then one append per
    # partition it touches (at most partitions_per_topic) plus the commit record, which is replicated too.
    spread = min(load.partitions_per_topic, load.publish_batch)
    appends_per_request = 1 + load.cross_partition_share * spread  # ``spread`` parts + 1 record - 1
    appends = publish_requests * appends_per_request
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
        + appends * caps.api_cpu_per_js_append
        + stored_msgs * caps.api_cpu_per_js_appended_msg
        + api_consume
        + n_out * caps.api_cpu_per_js_read_msg
        + decisions * caps.api_cpu_per_limiter_decision
    )
    stream_replicas = load.streams * r
    nats_cores = (
        appends * r * caps.nats_cpu_per_append_replica
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
            "fsyncs": appends * r,
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
