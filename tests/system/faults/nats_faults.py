"""Faults of the JetStream deployment's NATS cluster and of the API process's links to it.

Each acts on a ``Target`` whose cluster runs its nodes on addresses and in cgroups of their own
(``start_cluster``), so links can be cut (tests/system/faults/network.py). The node a fault picks is the one that
leads the most of QueueCore's streams at that moment: the leader is where a pause, a kill or a partition
does the most harm (an election, writes in flight cut, a deposed leader that may still think it leads).

- ``NATS_PAUSE`` — SIGSTOP the leading node for longer than an election takes, then SIGCONT;
- ``NATS_KILL`` — SIGKILL it, restart it on its store a few seconds later;
- ``NATS_ISOLATE`` — cut it from the other two nodes (a minority of one; the API still reaches it), heal;
- ``NATS_BRIDGE`` — cut the link between the two other nodes only: the leader sees both, they do not see
  each other (Jepsen's "bridge");
- ``API_CUT`` — cut the API process from every node (it answers 503s meanwhile), heal;
- ``NATS_TRUNCATE`` / ``NATS_BITFLIP`` — with a follower (not the leader) stopped, truncate the last
  message block of one stream's store to half, or flip one bit in it, then restart it: a damaged disk on a
  minority of replicas.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import urllib.request
from collections import Counter
from pathlib import Path

from infra.nats_cluster import NatsCluster
from tests.fixtures.nats import free_base_port
from tests.system.faults.load import Fault, Target
from tests.system.faults.network import Links, Party

# NATS elects a new stream leader after 4–9 s without one (its election timeout): every pause and
# partition lasts longer than that, so each forces an election rather than a stall.
OUTAGE_SECONDS = 12.0
ADDRESSES = ("127.0.0.21", "127.0.0.22", "127.0.0.23")
API_ADDRESS = "127.0.0.1"


def start_cluster(
    root: Path, links: Links, sync_interval: str = "always"
) -> tuple[NatsCluster, list[Party], Party]:
    """A started 3-node cluster, each node on its own address and in its own cgroup; the nodes' parties,
    and a party for the API process to start in (``ServerProcess(cgroup=api.cgroup)``)."""
    nodes = [links.party(f"n{i}", [address]) for i, address in enumerate(ADDRESSES)]
    cluster = NatsCluster(
        root, base_port=free_base_port(ADDRESSES), hosts=ADDRESSES, sync_interval=sync_interval
    )
    for node, party in zip(cluster.nodes, nodes, strict=True):
        node.cgroup = party.cgroup
    cluster.start()
    api = links.party("api", [])  # it listens on 127.0.0.1 for clients; NATS nodes never dial it
    return cluster, nodes, api


def _stream_leaders(cluster: NatsCluster, among: list[int] | None = None) -> Counter[int]:
    """How many streams each node leads, as each node (of ``among``) that answers says of itself."""
    leaders: Counter[int] = Counter()
    names = {f"n{node.index}": node.index for node in cluster.nodes}
    for node in cluster.nodes if among is None else [cluster.nodes[i] for i in among]:
        url = f"http://{node.host}:{node.monitor_port}/jsz?streams=true"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                detail = json.load(answer)
        except OSError:
            continue
        for account in detail.get("account_details") or []:
            for stream in account.get("stream_detail") or []:
                leader = (stream.get("cluster") or {}).get("leader")
                if leader in names and node.index == names[leader]:
                    leaders[names[leader]] += 1
    return leaders


def leading_node(cluster: NatsCluster) -> int:
    """The node leading the most streams now (node 0 when none answers)."""
    leaders = _stream_leaders(cluster)
    return leaders.most_common(1)[0][0] if leaders else 0


def _leaders_note(cluster: NatsCluster, index: int, among: list[int]) -> str:
    """Which node led how many streams before, and which of ``among`` lead them now (elections seen)."""
    now = _stream_leaders(cluster, among)
    return f"n{index} led; during the fault n{', n'.join(map(str, among))} led: {dict(now) or 'none'}"


def _cluster(target: Target) -> NatsCluster:
    if target.cluster is None:
        raise RuntimeError("a NATS fault needs the JetStream deployment")
    return target.cluster


def _others(cluster: NatsCluster, index: int) -> list[int]:
    return [i for i in range(len(cluster.nodes)) if i != index]


async def _pause(target: Target) -> str:
    cluster = _cluster(target)
    index = leading_node(cluster)
    process = cluster.nodes[index].process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(OUTAGE_SECONDS)
        return await asyncio.to_thread(_leaders_note, cluster, index, _others(cluster, index))
    finally:
        process.send_signal(signal.SIGCONT)


async def _kill(target: Target) -> str:
    cluster = _cluster(target)
    index = leading_node(cluster)
    cluster.kill(index)
    await asyncio.sleep(3)
    await asyncio.to_thread(cluster.restart, index)
    return f"n{index} killed and restarted"


async def _isolate(target: Target) -> str:
    cluster = _cluster(target)
    assert target.links is not None
    index = leading_node(cluster)
    others = [party for i, party in enumerate(target.nodes) if i != index]
    target.links.isolate(target.nodes[index], others)
    try:
        await asyncio.sleep(OUTAGE_SECONDS)
        return await asyncio.to_thread(_leaders_note, cluster, index, _others(cluster, index))
    finally:
        target.links.heal()


async def _bridge(target: Target) -> str:
    cluster = _cluster(target)
    assert target.links is not None
    index = leading_node(cluster)
    a, b = (party for i, party in enumerate(target.nodes) if i != index)
    target.links.cut(a, b)
    try:
        await asyncio.sleep(OUTAGE_SECONDS)
        return f"{a.name} and {b.name} cut apart, n{index} between them"
    finally:
        target.links.heal()


async def _api_cut(target: Target) -> str:
    _cluster(target)
    assert target.links is not None and target.api is not None
    target.links.isolate(target.api, target.nodes)
    try:
        await asyncio.sleep(6.0)
        return "the API process cut from every node for 6 s"
    finally:
        target.links.heal()


def _last_block(store: Path) -> Path | None:
    """The newest message block of the largest QueueCore stream a node stores (None when it has none)."""
    blocks = [b for b in store.rglob("msgs/*.blk") if b.stat().st_size > 0]
    if not blocks:
        return None
    return max(blocks, key=lambda b: (b.stat().st_size, b.name))


def _damage(how: str) -> Fault:
    async def apply(target: Target) -> str:
        cluster = _cluster(target)
        leader = leading_node(cluster)
        index = random.choice([i for i in range(len(cluster.nodes)) if i != leader])
        cluster.kill(index)
        block = _last_block(cluster.nodes[index].store)
        what = "no message block to damage"
        if block is not None:
            data = bytearray(block.read_bytes())
            if how == "truncate":
                data = data[: len(data) // 2]
            else:
                bit = random.randrange(len(data) * 8)
                data[bit // 8] ^= 1 << (bit % 8)
            block.write_bytes(bytes(data))
            what = f"{how} of {block.relative_to(cluster.nodes[index].store)}"
        await asyncio.to_thread(cluster.restart, index)
        return f"n{index} (a follower) stopped, {what}, restarted"

    return Fault(f"nats-{how}(follower)", apply)


NATS_PAUSE = Fault("nats-sigstop(leader)", _pause)
NATS_KILL = Fault("nats-sigkill(leader)", _kill)
NATS_ISOLATE = Fault("nats-partition(leader|rest)", _isolate)
NATS_BRIDGE = Fault("nats-bridge", _bridge)
API_CUT = Fault("api-nats-cut", _api_cut)
NATS_TRUNCATE = _damage("truncate")
NATS_BITFLIP = _damage("bitflip")
