"""The log engine contract across an engine's life (``app/stores/log/protocol.py``), on every backend: a
restart, health through an outage of its storage, what it says it can do, a crash in the middle of a
cross-partition batch."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from app.kit.clock import now_ms
from app.stores.log.protocol import (
    LogEngine,
    TopicLogConfig,
)
from tests.stores.log import batch_writer
from tests.stores.log.conftest import BACKENDS, start_child
from tests.stores.log.scenarios import batch, every_engine, read_all


@every_engine
class TestRestart:
    async def test_close_and_reopen_keeps_everything(self, log_backend, engine, topic_id):
        topic = topic_id()
        await engine.create_topic(topic, 2, TopicLogConfig(retention_ms=86_400_000))
        for i in range(30):
            await engine.append(topic, {0: batch(f"a{i}", 3), 1: batch(f"b{i}", 1)})
        before = [await read_all(engine, topic, p) for p in range(2)]
        engine = await log_backend.reopen()
        assert [await read_all(engine, topic, p) for p in range(2)] == before
        assert (await engine.partition_info(topic, 0)).latest_offset == 90
        assert await engine.append(topic, {0: batch("after", 1)}) == {0: 90}
        assert await engine.append(topic, {1: batch("after", 1)}) == {1: 30}

    async def test_durability_and_health(self, engine):
        assert engine.durability in ("fsync",) or engine.durability.startswith("replicated:")
        assert await engine.check() is True
        assert await engine.health() == "ok"


async def health_settles(engine: LogEngine, state: str, within: float) -> str:
    """Ask ``health()`` until it says ``state`` or ``within`` seconds have passed; what it said last."""
    deadline = time.monotonic() + within
    while (said := await engine.health()) != state and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return said


@pytest.mark.parametrize("outage", BACKENDS, indirect=True)
class TestHealth:
    """``health()`` says ``ok`` while the engine's storage serves and ``down`` once it is gone (the local
    engine's disk takes no writes; JetStream has no server left to talk to). That it heals without a restart
    is a system test's (``tests/system/test_disk_outage.py``, ``test_nats_faults.py``): a JetStream cluster
    whose every server restarts takes ~7 s to answer again here."""

    async def test_down_once_the_storage_is_gone(self, outage):
        engine = await outage.open()
        assert await engine.health() == "ok"
        outage.inject()
        assert await health_settles(engine, "down", within=10) == "down"
        assert await engine.check() is False


@every_engine
class TestCapabilities:
    async def test_an_engine_shared_by_processes_shares_its_idempotency_records(self, engine, topic_id):
        """An engine other processes write to (not ``exclusive``) must keep idempotency records they all
        see; one that a single process owns has none (its publisher keeps keys in memory)."""
        records = engine.idempotency_records(60)
        if engine.exclusive:
            assert records is None
            return
        assert records is not None
        topic = topic_id()
        first = await records.claim(topic, "key-1", now_ms())
        assert first.state == "won"
        # Another process's view of the same records: the claim is there, pending.
        seen = await engine.idempotency_records(60).get(topic, "key-1")
        assert seen is not None and seen.state == "pending"
        await records.place(topic, "key-1", 0, 7, 1234, 5)
        again = await engine.idempotency_records(60).claim(topic, "key-1", now_ms())
        assert (again.state, again.partition, again.offset) == ("placed", 0, 7)


@every_engine
@pytest.mark.slow
class TestCrashMidBatch:
    """A process appending batches that span every partition (``batch_writer``) is SIGKILLed. Once an engine
    is open on the same storage again - recovered at its start (local), or once a commit record the dead
    process left is rolled forward (JetStream: by any node, ``recover_after_seconds`` after its commit) -
    every batch is in all of its partitions whole, or in none, and every batch that was answered is there.

    On the local engine the kill alone catches batches written to some partitions and not yet committed. On
    JetStream a kill alone almost never does (a batch's parts leave in one flush), so the last partition
    refuses records before the kill (``LogBackend.refusing``), as one without a leader would: the batches
    then committed are cut after their other parts, and only the roll-forward can make them whole."""

    async def test_every_batch_is_whole_or_absent_after_its_writer_is_killed(self, log_backend, topic_id):
        topic = topic_id()
        engine = await log_backend.open()
        await engine.create_topic(topic, batch_writer.PARTITIONS, TopicLogConfig())
        await log_backend.close()  # a local engine's directory has one owner at a time: now the writer
        child = start_child(
            "-m",
            "tests.stores.log.batch_writer",
            log_backend.kind,
            str(log_backend.root),
            log_backend.nats_url,
            topic,
        )
        lines: list[bytes] = []

        def read_until(kind: bytes, count: int) -> None:
            assert child.stdout is not None
            seen = 0
            while seen < count:
                line = child.stdout.readline()
                assert line, "the writer exited"
                lines.append(line)
                seen += line.startswith(kind)

        try:
            read_until(b"A ", 6)
            # Then the last partition refuses its parts for a while (JetStream; the local engine goes on as
            # it was), and the writer is killed with batches in flight.
            async with log_backend.refusing(topic, batch_writer.PARTITIONS - 1):
                read_until(b"S ", 2 * batch_writer.WRITERS)
                child.kill()
        finally:
            child.kill()
        out, err = child.communicate(timeout=10)
        assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]
        lines += out.splitlines(keepends=True)
        said = [(line[:2], line[2:-1].decode()) for line in lines if line.endswith(b"\n")]  # not one cut
        started = {tag for kind, tag in said if kind == b"S "}
        answered = {tag for kind, tag in said if kind == b"A "}
        assert started - answered, "the kill caught no batch in flight"

        engine = await log_backend.open(recover_after_seconds=1.0, recovery_interval_seconds=0.2)
        full = dict.fromkeys(range(batch_writer.PARTITIONS), batch_writer.RECORDS)
        deadline = time.monotonic() + 10
        rounds = 0
        while True:
            rounds += 1
            counts: dict[str, dict[int, int]] = {}
            for p in range(batch_writer.PARTITIONS):
                records = await read_to_end(engine, topic, p)
                assert [r.offset for r in records] == list(range(len(records)))
                for r in records:
                    found = counts.setdefault(batch_writer.tag_of(r.value), {})
                    found[p] = found.get(p, 0) + 1
            partial = {tag: found for tag, found in counts.items() if found != full}
            if not partial or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)  # JetStream: a commit record is rolled forward a second after its commit
        assert not partial, f"batches stored in part after their writer was killed: {partial}"
        assert not answered - counts.keys(), f"answered batches lost: {answered - counts.keys()}"
        assert not counts.keys() - started, f"batches never appended: {counts.keys() - started}"
        unanswered = started - answered
        print(
            f"{len(answered)} batches answered, {len(unanswered)} unanswered at the kill: "
            f"{len(unanswered & counts.keys())} of them stored whole; read {rounds} times"
        )


async def read_to_end(engine: LogEngine, topic: str, partition: int) -> list:
    """Every record up to the partition's latest offset, asked for again while a read comes back short (on
    JetStream a new engine may be answered by a replica that has not caught up with its leader yet)."""
    end = (await engine.partition_info(topic, partition)).latest_offset
    out: list = []
    for _ in range(500):
        if len(out) >= end:
            return out
        chunk = await engine.read(topic, partition, len(out), max_records=500)
        out.extend(chunk)
        if not chunk:
            await asyncio.sleep(0.01)
    raise AssertionError(f"partition {partition}: {len(out)} records read of {end}")
