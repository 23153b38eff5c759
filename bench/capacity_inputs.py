"""What the capacity model (``capacity_model.py``) is fed: a target ``Load``, the unit costs and unit sizes
(``Capacities``, defaults measured on this machine or read from ``bench/results/scaling_probes.json``), and
the checks that refuse what the model cannot answer for (``validate``, raising ``InvalidInput``).

The model itself (demand, sizing, saturation, the CLI) is ``capacity_model.py``; it re-exports these names.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

AckMode = Literal["push-exactly-once", "push-at-least-once", "pull"]
ACK_MODES: tuple[str, ...] = ("push-exactly-once", "push-at-least-once", "pull")
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
    # Appends per JetStream write: the group commit's coalescing (1: every append its own Raft round, the
    # engine before #28; under load about half the appends in flight on a partition, bench/results/cluster.md).
    group_commit: float = 1.0

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


def validate(load: Load, caps: Capacities) -> None:
    """Refuse what the model cannot answer for; raises ``InvalidInput``."""
    numbers = {
        "msgs_in_per_s": load.msgs_in_per_s,
        "msgs_out_per_s": load.out_per_s,
        "cross_partition_share": load.cross_partition_share,
        "group_commit": load.group_commit,
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
    if load.group_commit < 1:
        raise InvalidInput(f"group_commit is appends per write: at least 1, got {load.group_commit!r}")
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
