"""Rolling restarts under load, as a customer's SDK sees them (issue #36).

`make cluster`'s shape (infra/cluster.py: 3 NATS nodes, 3 API processes behind HAProxy, Postgres, Redis)
serves an exactly-once topic while the Python SDK (``AsyncQueueCore``, its retries as shipped) publishes
sequential values from two tasks and consumes them over WebSocket push with two members of one group, acking
each. Meanwhile the operator rolls: every API process in turn gets SIGTERM (it drains: health 503, members
told ``draining``, partitions handed over, in-flight requests finished), exits, and is started again; then,
when asked, every NATS server in turn is put in lame-duck mode (``nats-server --signal ldm``: it hands its
leaderships and clients over before it exits) and started again on its store.

What is checked (``Outcome``): the SDK callers saw no error (retries absorbed every 503 and reset), every
acknowledged publish was delivered, nothing was delivered twice (exactly-once: an acked message never
comes back; a message redelivered because its ack was cut would show as a second delivery), and what a
rollout costs: publish latency p50/p99 and the longest gap between two deliveries, per phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

from queuecore import AsyncQueueCore, QueueCoreError

from infra.cluster import Cluster

TOPIC = "rollout"
GROUP = "rollout"
PARTITIONS = 3


@dataclass
class Phase:
    """One stretch of the run: steady load, or one process restarting."""

    name: str
    started: float
    ended: float = 0.0


@dataclass
class Outcome:
    published: int
    delivered: int
    publish_errors: list[str]
    consumer_errors: list[str]
    lost: list[int]
    duplicates: list[int]
    phases: list[dict[str, object]] = field(default_factory=list)
    # Each duplicate's deliveries: (partition, offset, attempt); one offset twice is a redelivery.
    duplicate_deliveries: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.publish_errors or self.lost or self.duplicates)


@dataclass
class _Load:
    client: AsyncQueueCore
    running: bool = True
    next_value: int = 0
    acked_publishes: dict[int, float] = field(default_factory=dict)  # value -> when its answer came
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (answered at, seconds)
    deliveries: list[tuple[int, float]] = field(default_factory=list)  # (value, at)
    # value -> [(partition, offset, attempt)] of each delivery, to tell a redelivery from a second copy
    where: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    publish_errors: list[str] = field(default_factory=list)
    consumer_errors: list[str] = field(default_factory=list)

    async def publisher(self) -> None:
        while self.running:
            value, self.next_value = self.next_value, self.next_value + 1
            started = time.monotonic()
            try:
                await self.client.publish(TOPIC, {"v": value}, key=str(value))
            except QueueCoreError as exc:  # an error surfaced to the caller: what this run counts
                self.publish_errors.append(f"{type(exc).__name__}: {exc}")
                continue
            now = time.monotonic()
            self.acked_publishes[value] = now
            self.latencies.append((now, now - started))
            await asyncio.sleep(0.005)

    def consumer(self) -> object:
        consumer = self.client.consume(TOPIC, group=GROUP, start_from="earliest", max_in_flight=200)

        def handle(msg: object) -> None:
            value = int(msg.data["v"])  # type: ignore[attr-defined]
            self.deliveries.append((value, time.monotonic()))
            self.where.setdefault(value, []).append((msg.partition, msg.offset, msg.attempt))  # type: ignore[attr-defined]
            msg.ack()  # type: ignore[attr-defined]

        consumer.on("message", handle)
        # Errors the consumer survives (reconnects, draining) are reported, not raised: counted apart.
        consumer.on("error", lambda err: self.consumer_errors.append(f"{type(err).__name__}: {err}"))
        return consumer


async def run(
    cluster: Cluster, key: str, *, nats: bool, steady: float = 4.0, between: float = 3.0, drain: float = 60.0
) -> Outcome:
    """The load, ``steady`` seconds of it, each restart with ``between`` seconds of load after it, then a
    drain until every acknowledged publish was delivered (or ``drain`` seconds)."""
    async with AsyncQueueCore(api_key=key, base_url=cluster.url, max_retries=8) as client:
        await client.topics.create(TOPIC, partitions=PARTITIONS, delivery="exactly-once")
        load = _Load(client)
        consumers = [load.consumer() for _ in range(2)]
        tasks = [asyncio.create_task(c.start()) for c in consumers]  # type: ignore[attr-defined]
        tasks += [asyncio.create_task(load.publisher()) for _ in range(2)]
        phases = [Phase("steady", time.monotonic())]
        await asyncio.sleep(steady)
        steps = [(f"api-{i + 1} restart", cluster.restart_api, i) for i in range(len(cluster.api))]
        if nats:
            assert cluster.nats is not None
            steps += [
                (f"nats n{i} lame-duck restart", cluster.restart_nats, i)
                for i in range(len(cluster.nats.nodes))
            ]
        for name, restart, index in steps:
            phases[-1].ended = time.monotonic()
            phases.append(Phase(name, time.monotonic()))
            await asyncio.to_thread(restart, index)
            await asyncio.sleep(between)
        phases[-1].ended = time.monotonic()
        load.running = False
        await asyncio.gather(*tasks[2:])
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline and not set(load.acked_publishes) <= {
            v for v, _ in load.deliveries
        }:
            await asyncio.sleep(0.5)
        await asyncio.sleep(2)  # a redelivery after the last ack would show now
        for consumer in consumers:
            with contextlib.suppress(Exception):
                await consumer.stop()  # type: ignore[attr-defined]
        await asyncio.gather(*tasks[:2], return_exceptions=True)
    seen = Counter(v for v, _ in load.deliveries)
    return Outcome(
        published=len(load.acked_publishes),
        delivered=len(seen),
        publish_errors=load.publish_errors,
        consumer_errors=load.consumer_errors,
        lost=sorted(set(load.acked_publishes) - set(seen)),
        duplicates=sorted(v for v, n in seen.items() if n > 1),
        phases=[_figures(p, load) for p in phases],
        duplicate_deliveries={v: load.where[v] for v, n in seen.items() if n > 1},
    )


def _figures(phase: Phase, load: _Load) -> dict[str, object]:
    """Publish latency and the longest gap between deliveries within one phase."""
    latencies = sorted(s for at, s in load.latencies if phase.started <= at < phase.ended)
    delivered = sorted(at for _, at in load.deliveries if phase.started <= at < phase.ended)
    edges = [phase.started, *delivered, phase.ended]
    return {
        "phase": phase.name,
        "seconds": round(phase.ended - phase.started, 1),
        "publishes": len(latencies),
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 1)
        if len(latencies) >= 100
        else None,
        "max_ms": round(latencies[-1] * 1000, 1) if latencies else None,
        "deliveries": len(delivered),
        "longest_gap_ms": round(max(b - a for a, b in itertools.pairwise(edges)) * 1000, 1),
    }
