"""Coordinated power loss: every process that stores data loses, at once, what it had not fsync'd.

SIGKILL alone cannot show this (the OS page cache outlives a killed process). Here every data directory
of the deployment - the API process's (the local log engine's segments, and SQLite on the embedded
deployment) and, on the JetStream deployment, every NATS node's store - is a lazy file system
(tests/system/faults/lazyfs.py). ``POWER_LOSS`` SIGKILLs every such process at once, drops every write
not synced on every one of those file systems, then starts them all again on what is left: the NATS nodes
first (each recovers its store and the cluster elects leaders), then the API process. The run's checker
(history.py) then judges: nothing acknowledged lost, no acked message of the exactly-once topic delivered
again, order per partition, batches whole. Redis (limits) stays outside the loss. On the Postgres and
JetStream deployments the metadata's Postgres is a private cluster whose data directory is a lazy file system
too (``lazy_postgres``): it is SIGKILLed with the rest, loses what it had not synced, and starts first (its
crash recovery replays the WAL) - as a single machine, or a rack, losing power would leave it.

This is what Jepsen's NATS 2.12.1 analysis did with lazyfs ("coordinated power loss"), in small: the loss
is whole (every unsynced write gone, nothing torn), and directory operations other than creates are durable
at once (lazyfs.py says what is and is not modelled). ``POWER_LOSS_TORN`` is the same loss as a disk's
write-back can leave it: a random part of the unsynced writes kept, sector by sector, files at one of the
sizes they had, renames and unlinks not yet made durable undone past a random point of their journal.

``POWER_LOSS_NODE`` is the common case beside it: one machine of the JetStream cluster loses power (the
node leading the most streams, SIGKILLed and its unsynced writes dropped) while the other nodes and the API
process run on; it starts again on what its disk kept and catches up from the others. A quorum kept every
acknowledged write, so nothing acknowledged may be lost even where the nodes do not fsync every write.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.fixtures.postgres import PrivatePostgres
from tests.system.faults.lazyfs import LazyFS
from tests.system.faults.load import Fault, Target
from tests.system.faults.nats_faults import leading_node

NODE_READY_S = 90.0  # a hang guard on the nodes' recovery, not a speed claim


@contextlib.contextmanager
def lazy_disks(*mountpoints: Path) -> Iterator[list[LazyFS]]:
    """A lazy file system mounted at each of ``mountpoints`` (backed by ``<mountpoint>.disk`` beside it),
    unmounted afterwards: mount before anything writes there (the CLI's migrate, a node's first start)."""
    disks: list[LazyFS] = []
    try:
        for mountpoint in mountpoints:
            disks.append(LazyFS(mountpoint).mount())
        yield disks
    finally:
        for disk in reversed(disks):
            disk.unmount()


@contextlib.contextmanager
def lazy_postgres() -> Iterator[tuple[PrivatePostgres, LazyFS]]:
    """A private Postgres (started) whose data directory is a lazy file system, and that file system."""
    root = Path(tempfile.mkdtemp(prefix="qc-faults-pg-"))
    root.chmod(0o755)  # the postgres user goes through it to its mount
    disk = LazyFS(root / "pg")
    disk.backing.mkdir()
    shutil.chown(disk.backing, "postgres", "postgres")  # the mount's root is its backing directory's
    try:
        disk.mount()
        postgres = PrivatePostgres(directory=disk.mountpoint)
        try:
            postgres.start()
            yield postgres, disk
        finally:
            postgres.remove()
    finally:
        disk.unmount()
        shutil.rmtree(root, ignore_errors=True)


async def _power_loss(target: Target, torn: bool = False) -> str:
    if not target.disks:
        raise RuntimeError("a power loss needs the deployment's data on lazy file systems (lazy_disks)")
    server = target.api_server
    processes = [server.process] + [n.process for n in (target.cluster.nodes if target.cluster else [])]
    for process in processes:  # at once: no process outlives another's loss
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
    if target.postgres is not None:
        await asyncio.to_thread(target.postgres.kill)
    for process in processes:
        if process is not None:
            await asyncio.to_thread(process.wait)
    server.process = None
    seed = secrets.randbits(32)
    lost = [
        await asyncio.to_thread(disk.lose_unsynced, torn, seed + i) for i, disk in enumerate(target.disks)
    ]
    if target.postgres is not None:  # first: the API process migrates nothing, but it connects at start
        await asyncio.to_thread(target.postgres.start_after_power_loss)
    if target.cluster is not None:
        cluster = target.cluster
        for index in range(len(cluster.nodes)):
            cluster.restart(index, wait=False)
        await asyncio.to_thread(cluster.wait_ready, NODE_READY_S)
    await asyncio.to_thread(server.start)
    files = sum(d["files"] for d in lost)
    removed = sum(d["removed"] for d in lost)
    cut = sum(d["bytes"] for d in lost)
    undone = sum(d["undone"] for d in lost)
    names = sorted({name for d in lost for name in d["names"]})
    return (
        f"{len(lost)} disks: {files} files {'torn' if torn else 'cut back'} ({cut} bytes), "
        f"{removed} never-synced files gone"
        + (f", {undone} renames/unlinks undone, seed {seed}" if torn else "")
        + f" [{', '.join(names)}]"
    )


async def _power_loss_torn(target: Target) -> str:
    return await _power_loss(target, torn=True)


async def _power_loss_node(target: Target) -> str:
    cluster = target.cluster
    if cluster is None or not target.disks:
        raise RuntimeError("a node's power loss needs the JetStream nodes' stores on lazy file systems")
    index = await asyncio.to_thread(leading_node, cluster)
    store = cluster.nodes[index].store
    (disk,) = [d for d in target.disks if d.mountpoint == store]
    await asyncio.to_thread(cluster.kill, index)
    lost = await asyncio.to_thread(disk.lose_unsynced)
    await asyncio.to_thread(cluster.restart, index, False)
    await asyncio.to_thread(cluster.wait_ready, NODE_READY_S, [index])
    return (
        f"n{index} (leading most streams): {lost['files']} files cut back ({lost['bytes']} bytes), "
        f"{lost['removed']} never-synced files gone [{', '.join(sorted(lost['names']))}]"
    )


POWER_LOSS = Fault("power-loss", _power_loss)
POWER_LOSS_TORN = Fault("power-loss-torn", _power_loss_torn)
POWER_LOSS_NODE = Fault("power-loss-node", _power_loss_node)
