"""Corruption, failed writes and real crashes (``loader``, ``committer``, ``manager``).

* Corruption: bytes flipped in, or cut from, the tail of the active segment are found by CRC at the next
  start; recovery cuts back to the last whole batch, says what it cut, and appends go on from there.
* Uncommitted transactions: batches of a multi-partition append without a commit record are cut on
  every partition.
* Failed writes: an fsync error takes the engine offline, never reports success.
* SIGKILL: a child process appends continuously (single records, batches, multi-partition atomic
  appends, from several tasks) and prints what was acknowledged; the parent kills it at random moments
  and restarts it on the same directory; after each restart every acknowledged record must be there,
  byte-identical, and no multi-partition append may be visible in part. The kills must have caught
  transactions before their commit record (cut at restart), and every third restart finds a torn write
  at a partition's tail (what a power loss leaves; a SIGKILL leaves whole writes) and must cut it.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import textwrap
import time
from pathlib import Path

import pytest

from app.stores.log.local import files
from app.stores.log.local.files import BlockFile
from app.stores.log.local.reads import DamagedRecords
from app.stores.log.local.records import encode_batch
from app.stores.log.protocol import EngineUnavailable, RecordIn, TopicLogConfig
from tests.stores.log.conftest import crash, open_local, start_child


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def active_log(root: Path, topic: str, partition: int) -> Path:
    return max((root / f"{topic}-{partition}").glob("*.log"))


async def filled(tmp_path, topic: str = "top_x", partitions: int = 1, appends: int = 10, **settings):
    engine = await open_local(tmp_path, **settings)
    await engine.create_topic(topic, partitions, TopicLogConfig())
    for i in range(appends):
        await engine.append(
            topic, {p: [RecordIn(value=f"{i}.{j}".encode() * 30) for j in range(3)] for p in [0]}
        )
    return engine


class TestCorruptTail:
    async def test_flipped_byte_in_the_last_batch_is_cut(self, tmp_path, caplog):
        engine = await filled(tmp_path, segment_bytes=1 << 20)
        crash(engine)
        path = active_log(tmp_path, "top_x", 0)
        data = bytearray(path.read_bytes())
        size = len(data)
        batch = size // 10  # ten equal batches
        data[size - 5] ^= 0x01
        path.write_bytes(bytes(data))
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        try:
            assert f"recovery cut {batch} bytes from {path} at position {size - batch}" in caplog.text
            assert "CRC mismatch" in caplog.text
            assert (await engine.partition_info("top_x", 0)).latest_offset == 27
            assert await engine.append("top_x", {0: [RecordIn(value=b"next")]}) == {0: 27}
            records = await engine.read("top_x", 0, 25)
            assert [(r.offset, r.value) for r in records] == [
                (25, b"8.1" * 30),
                (26, b"8.2" * 30),
                (27, b"next"),
            ]
        finally:
            await engine.close()

    async def test_torn_write_is_cut(self, tmp_path, caplog):
        engine = await filled(tmp_path, segment_bytes=1 << 20)
        crash(engine)
        path = active_log(tmp_path, "top_x", 0)
        size = path.stat().st_size
        batch = size // 10
        os.truncate(path, size - 40)
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        try:
            assert f"recovery cut {batch - 40} bytes from {path} at position {size - batch}" in caplog.text
            assert path.stat().st_size == size - batch
            assert await engine.append("top_x", {0: [RecordIn(value=b"next")] * 2}) == {0: 27}
        finally:
            await engine.close()

    async def test_write_torn_inside_the_first_header_of_a_segment_is_cut(self, tmp_path, caplog):
        # A power loss just after a roll leaves the new segment with less than one batch header.
        engine = await filled(tmp_path, segment_bytes=1 << 20)
        await engine.manager.log("top_x", 0).roll()
        crash(engine)
        path = active_log(tmp_path, "top_x", 0)
        assert path.name == f"{30:020d}.log" and path.stat().st_size == 0
        append_bytes(path, encode_batch([RecordIn(value=b"torn")], 30, now_ms=1).header[:7])
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        try:
            assert f"recovery cut 7 bytes from {path} at position 0" in caplog.text
            assert path.stat().st_size == 0
            assert await engine.append("top_x", {0: [RecordIn(value=b"next")]}) == {0: 30}
            assert [r.value for r in await engine.read("top_x", 0, 29)] == [b"9.2" * 30, b"next"]
        finally:
            await engine.close()

    async def test_zeroed_tail_is_cut(self, tmp_path, caplog):
        engine = await filled(tmp_path, segment_bytes=1 << 20)
        crash(engine)
        path = active_log(tmp_path, "top_x", 0)
        size = path.stat().st_size
        append_bytes(path, b"\x00" * 4096)
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        try:
            assert f"recovery cut 4096 bytes from {path} at position {size}" in caplog.text
            assert await engine.append("top_x", {0: [RecordIn(value=b"next")]}) == {0: 30}
        finally:
            await engine.close()

    async def test_a_cut_in_an_earlier_segment_deletes_the_later_ones_and_names_them(self, tmp_path, caplog):
        engine = await filled(tmp_path, segment_bytes=1 << 20)
        await engine.manager.log("top_x", 0).roll()
        await engine.append("top_x", {0: [RecordIn(value=b"after the roll")]})
        crash(engine)
        first, second = sorted((tmp_path / "top_x-0").glob("*.log"))
        second_size = second.stat().st_size
        # Without a recovery point, recovery scans from the first segment on (the flusher may not have
        # written one yet: it runs on its own schedule).
        (tmp_path / files.RECOVERY_POINT_CHECKPOINT).unlink(missing_ok=True)
        data = bytearray(first.read_bytes())
        data[-5] ^= 0x01  # the first segment's last batch
        first.write_bytes(bytes(data))
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        try:
            assert f"recovery cut {len(data) // 10} bytes from {first}" in caplog.text
            assert f"recovery deleted segment {second} ({second_size} bytes after a cut)" in caplog.text
            assert not second.exists()
            assert await engine.append("top_x", {0: [RecordIn(value=b"next")]}) == {0: 27}
        finally:
            await engine.close()

    async def test_corruption_after_a_clean_close_is_found_too(self, tmp_path, caplog):
        engine = await filled(tmp_path, segment_bytes=1 << 20)
        await engine.close()
        path = active_log(tmp_path, "top_x", 0)
        data = bytearray(path.read_bytes())
        size = len(data)
        data[-3] ^= 0xFF
        path.write_bytes(bytes(data))
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        try:
            # A clean start reads only the tail after the last index entry, but checks its CRCs.
            assert f"recovery cut {size // 10} bytes from {path}" in caplog.text
            assert (await engine.partition_info("top_x", 0)).latest_offset == 27
        finally:
            await engine.close()


class TestDamagedSealedSegment:
    """A bit flipped in a sealed segment after recovery trusted it (a failing disk): reads that reach the
    damaged batch fail with 503 (``DamagedRecords``) instead of handing out other bytes than were written;
    the rest of the partition reads as before, and health says degraded."""

    async def test_a_read_of_the_damaged_batch_fails_and_the_others_are_served(self, tmp_path, caplog):
        engine = await filled(tmp_path, appends=40, segment_bytes=2048)
        await engine.close()
        first = min((tmp_path / "top_x-0").glob("*.log"))
        assert len(list((tmp_path / "top_x-0").glob("*.log"))) > 2, "the first segment must be sealed"
        data = bytearray(first.read_bytes())
        data[len(data) // 2] ^= 0x10  # inside a record of a batch in the middle of the first segment
        first.write_bytes(bytes(data))
        engine = await open_local(tmp_path, segment_bytes=2048)
        try:
            assert await engine.health() == "ok"  # sealed segments are trusted at start: nothing read yet
            with pytest.raises(DamagedRecords) as damaged:
                await engine.read("top_x", 0, 0, max_records=1000)
            assert isinstance(damaged.value, EngineUnavailable) and "CRC mismatch" in str(damaged.value)
            assert "top_x" not in damaged.value.message  # the wire message is generic
            assert await engine.health() == "degraded"
            assert "damaged data in" in caplog.text
            # Past the damaged segment every record is still served, byte for byte.
            later = await engine.read("top_x", 0, 60, max_records=1000)
            assert [r.offset for r in later] == list(range(60, 120))
            assert later[0].value == b"20.0" * 30
        finally:
            await engine.close()


class TestDamagedIndex:
    """A bit flipped in a sealed segment's index that load's sanity checks miss (entries still increasing)
    used to send reads to a later batch, silently skipping records, or into the middle of a batch (an
    empty read). Every read and every seek by time must give the right answer whatever bit flipped."""

    async def _flip_and_check(self, tmp_path: Path, suffix: str, bits: list[int]) -> int:
        engine = await open_local(tmp_path, segment_bytes=8192, index_interval_bytes=256)
        await engine.create_topic("top_x", 1, TopicLogConfig())
        for i in range(200):  # a timestamp per batch, 10 ms apart
            batch = [
                RecordIn(value=f"{i}.{j}".encode() * 30, timestamp_ms=1_000_000 + 10 * i) for j in range(3)
            ]
            await engine.append("top_x", {0: batch})
        await engine.close()
        index = min((tmp_path / "top_x-0").glob(f"*.{suffix}"))
        clean = index.read_bytes()
        assert len(list((tmp_path / "top_x-0").glob("*.log"))) > 2 and len(clean) > 32
        count = 0
        for bit in bits:
            damaged = bytearray(clean)
            damaged[(bit // 8) % len(clean)] ^= 1 << (bit % 8)
            index.write_bytes(bytes(damaged))
            engine = await open_local(tmp_path, segment_bytes=8192, index_interval_bytes=256)
            try:
                for offset in range(0, 90, 7):
                    read = await engine.read("top_x", 0, offset, max_records=2)
                    assert [r.offset for r in read] == [offset, offset + 1], (bit, offset)
                    assert read[0].value == f"{offset // 3}.{offset % 3}".encode() * 30
                for batch in range(40):
                    for before in (9, 5, 1):
                        found = await engine.offset_for_time("top_x", 0, 1_000_000 + 10 * batch - before)
                        assert found == 3 * batch, (bit, batch)
            finally:
                await engine.close()
            count += 1
        index.write_bytes(clean)
        return count

    async def test_offset_index(self, tmp_path):
        bits = random.Random(7).sample(range(8 * 144), 40)
        assert await self._flip_and_check(tmp_path, "index", bits) == 40

    async def test_time_index(self, tmp_path):
        # Every bit of the first two entries (12 bytes each): a timestamp flipped lower sends a seek for a
        # time just above it past the records it wants (the old reader answered offset 3 for batch 0).
        assert await self._flip_and_check(tmp_path, "timeindex", list(range(8 * 24))) == 8 * 24


class TestUncommittedTransactions:
    async def test_batches_without_a_commit_record_are_cut_everywhere(self, tmp_path, caplog):
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        await engine.create_topic("top_t", 3, TopicLogConfig())
        await engine.append(
            "top_t", {0: [RecordIn(value=b"a")], 1: [RecordIn(value=b"b")] * 2, 2: [RecordIn(value=b"c")]}
        )
        committed_txn = engine.manager.txn_log.next_txn_id - 1
        crash(engine)
        # A transaction that wrote to partitions 0 and 1, then died before its commit record.
        for partition, base in [(0, 1), (1, 2)]:
            batch = encode_batch([RecordIn(value=b"ghost")] * 2, base, txn_id=committed_txn + 1, now_ms=1)
            append_bytes(active_log(tmp_path, "top_t", partition), batch.header + batch.body)
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        try:
            assert caplog.text.count(f"uncommitted transaction {committed_txn + 1}") == 2
            infos = [await engine.partition_info("top_t", p) for p in range(3)]
            assert [i.latest_offset for i in infos] == [1, 2, 1]
            bases = await engine.append("top_t", {0: [RecordIn(value=b"x")], 1: [RecordIn(value=b"y")]})
            assert bases == {0: 1, 1: 2}
            assert engine.manager.txn_log.next_txn_id > committed_txn + 2  # the ghost's id is not reused
        finally:
            await engine.close()

    async def test_committed_transactions_survive_a_crash(self, tmp_path):
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        await engine.create_topic("top_k", 2, TopicLogConfig())
        for i in range(5):
            await engine.append("top_k", {0: [RecordIn(value=b"a%d" % i)], 1: [RecordIn(value=b"b%d" % i)]})
        crash(engine)
        engine = await open_local(tmp_path, segment_bytes=1 << 20)
        try:
            assert [(await engine.partition_info("top_k", p)).latest_offset for p in range(2)] == [5, 5]
        finally:
            await engine.close()

    async def test_the_transaction_log_is_collected(self, tmp_path):
        engine = await open_local(tmp_path)
        try:
            await engine.create_topic("top_g", 2, TopicLogConfig())
            for _i in range(50):
                await engine.append("top_g", {0: [RecordIn(value=b"a")], 1: [RecordIn(value=b"b")]})
            await engine.checkpoint()
            await engine.checkpoint()
            txn_dir = tmp_path / files.TXN_DIR
            logs = sorted(txn_dir.glob("*.txnlog"))
            assert len(logs) == 1 and logs[0].stat().st_size == 0
            assert engine.manager.txn_log.resolved == engine.manager.txn_log.next_txn_id - 1
        finally:
            await engine.close()


class TestFailedWrites:
    async def test_an_fsync_error_is_never_reported_as_success(self, tmp_path, monkeypatch):
        engine = await open_local(tmp_path)
        await engine.create_topic("top_f", 2, TopicLogConfig())
        await engine.append("top_f", {0: [RecordIn(value=b"ok")]})
        original = BlockFile.sync

        def failing_sync(self):
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(BlockFile, "sync", failing_sync)
        with pytest.raises(EngineUnavailable):
            await engine.append("top_f", {0: [RecordIn(value=b"lost")]})
        with pytest.raises(EngineUnavailable):
            await engine.append("top_f", {0: [RecordIn(value=b"a")], 1: [RecordIn(value=b"b")]})
        assert await engine.check() is False
        # Committed data is still served; the failed append is not visible.
        assert [r.value for r in await engine.read("top_f", 0, 0)] == [b"ok"]
        monkeypatch.setattr(BlockFile, "sync", original)
        await engine.close()
        engine = await open_local(tmp_path)
        try:
            assert await engine.check() is True
            assert await engine.append("top_f", {0: [RecordIn(value=b"again")]}) in ({0: 1}, {0: 2})
        finally:
            await engine.close()


# -- SIGKILL ---------------------------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, hashlib, os, random, sys
    from pathlib import Path
    from app.stores.log.local import LocalLogConfig, LocalLogEngine
    from app.stores.log.protocol import RecordIn, TopicLogConfig

    root, dump, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    TOPIC, PARTS = "top_crash", 4

    def sha(value):
        return hashlib.sha1(value).hexdigest()[:16]

    def ack(partition, base, values):
        sys.stdout.write("".join(f"A {partition} {base + i} {sha(v)}\\n" for i, v in enumerate(values)))
        sys.stdout.flush()

    def value(kind, run, task, n, i, parts, size):
        return f"{kind}:{run}.{task}.{n}:{parts}:{i}|".encode() + os.urandom(size).hex().encode()

    async def single(engine, run):
        n = 0
        while True:
            v = value("S", run, 0, n, 0, "", rng.randrange(1, 80))
            bases = await engine.append(TOPIC, {0: [RecordIn(value=v, key=None if n % 2 else b"k")]})
            ack(0, bases[0], [v])
            n += 1

    async def batches(engine, run):
        n = 0
        while True:
            count = rng.randrange(1, 40)
            vs = [value("B", run, 1, n, i, "", rng.randrange(1, 200)) for i in range(count)]
            bases = await engine.append(TOPIC, {1: [RecordIn(value=v, headers=b"h") for v in vs]})
            ack(1, bases[1], vs)
            n += 1

    async def multi(engine, run, task):
        n = 0
        while True:
            parts = sorted(rng.sample(range(PARTS), rng.randrange(2, PARTS + 1)))
            counts = {p: rng.randrange(1, 20) for p in parts}
            tag = ",".join(f"{p}x{counts[p]}" for p in parts)
            vs = {p: [value("M", run, task, n, i, tag, rng.randrange(1, 100)) for i in range(counts[p])] for p in parts}
            bases = await engine.append(TOPIC, {p: [RecordIn(value=v) for v in vs[p]] for p in parts})
            for p in parts:
                ack(p, bases[p], vs[p])
            n += 1

    async def main():
        config = LocalLogConfig(segment_bytes=64 * 1024, index_interval_bytes=2048, open_files=24)
        engine = LocalLogEngine(root, config)
        await engine.start()
        await engine.create_topic(TOPIC, PARTS, TopicLogConfig())
        lines = []
        for p in range(PARTS):
            offset = 0
            while True:
                chunk = await engine.read(TOPIC, p, offset, max_records=5000, max_bytes=8 << 20)
                if not chunk:
                    break
                for r in chunk:
                    lines.append(f"{p} {r.offset} {sha(r.value)} {r.value.split(b'|')[0].decode()}\\n")
                offset = chunk[-1].offset + 1
        tmp = dump.with_suffix(".tmp")
        tmp.write_text("".join(lines))
        os.replace(tmp, dump)
        print("READY", flush=True)
        run = seed
        await asyncio.gather(single(engine, run), batches(engine, run), multi(engine, run, 2), multi(engine, run, 3))

    asyncio.run(main())
    """
)


def check_dump(dump: Path, acked: dict[tuple[int, int], str]) -> dict[int, int]:
    """Every acknowledged record is in the dump; offsets are dense; multi-partition appends are whole."""
    seen: dict[tuple[int, int], str] = {}
    latest = {p: 0 for p in range(4)}
    groups: dict[str, dict[int, int]] = {}
    expected: dict[str, dict[int, int]] = {}
    for line in dump.read_text().splitlines():
        p_s, o_s, digest, meta = line.split(" ", 3)
        p, o = int(p_s), int(o_s)
        assert o == latest[p], f"partition {p}: offset {o} where {latest[p]} was expected"
        latest[p] = o + 1
        seen[(p, o)] = digest
        kind, tag, parts, _ = meta.split(":")
        if kind == "M":
            groups.setdefault(tag, {}).setdefault(p, 0)
            groups[tag][p] += 1
            expected[tag] = {int(a): int(b) for a, b in (x.split("x") for x in parts.split(","))}
    missing = [(k, v) for k, v in acked.items() if seen.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {missing[:3]}"
    partial = [tag for tag, got in groups.items() if got != expected[tag]]
    assert not partial, (
        f"multi-partition appends visible in part: {partial[:3]} {[groups[t] for t in partial[:3]]}"
    )
    return latest


_CUT = re.compile(r"recovery cut (\d+) bytes from (\S+) at position (\d+): (.*)")
_DELETED = re.compile(r"recovery deleted segment (\S+) \(\d+ bytes after a cut\)")


def recovery_cuts(err: str) -> list[tuple[int, str, int, str]]:
    """The cuts a child's recovery reported: (bytes, segment path, position, reason)."""
    return [(int(b), path, int(at), why) for b, path, at, why in _CUT.findall(err)]


def recovery_deletions(err: str) -> set[str]:
    """The segments a child's recovery deleted whole, being after a cut in an earlier segment."""
    return set(_DELETED.findall(err))


def tear_a_tail(root: Path, rng: random.Random, next_offsets: dict[int, int]) -> tuple[str, int, int]:
    """Leave a torn write at the end of a partition's active segment: what a power loss leaves behind
    mid-write. (A SIGKILL alone leaves whole writes in the page cache; its cuts are batches of
    transactions that died before their commit record.) Returns (path, size before, bytes added)."""
    partition = rng.randrange(4)
    path = active_log(root, "top_crash", partition)
    batch = encode_batch(
        [RecordIn(value=b"torn" * rng.randrange(1, 50)) for _ in range(rng.randrange(1, 5))],
        next_offsets[partition],
        now_ms=1,
    )
    data = batch.header + batch.body
    torn = data[: rng.randrange(1, len(data))]
    size = path.stat().st_size
    append_bytes(path, torn)
    return str(path), size, len(torn)


@pytest.mark.slow
class TestSigkill:
    def test_acknowledged_appends_survive_random_kills(self, tmp_path):
        script = tmp_path / "child.py"
        script.write_text(CHILD)
        root = tmp_path / "log"
        dump = tmp_path / "dump.txt"
        rng = random.Random(1234)
        acked: dict[tuple[int, int], str] = {}
        kills = 0
        rounds = 0
        uncommitted = 0  # cuts of transactions the kill caught before their commit record
        torn: tuple[str, int, int] | None = None  # the tail torn before this round's restart
        torn_cut = 0
        while kills < 22 or rounds < 23:
            rounds += 1
            child = start_child(str(script), str(root), str(dump), str(rounds))
            # The restart recovered: everything acknowledged so far must be in the dump it wrote.
            latest = check_dump(dump, acked)
            if kills >= 22:
                child.send_signal(signal.SIGTERM)
                out, err = child.communicate(timeout=10)
            else:
                time.sleep(rng.uniform(0.05, 0.4))
                child.send_signal(signal.SIGKILL)
                out, err = child.communicate(timeout=10)
                kills += 1
                assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]
            cuts = recovery_cuts(err.decode())
            uncommitted += sum("uncommitted transaction" in why for *_, why in cuts)
            if torn is not None:
                # This round's start found the torn tail and cut all of it (the cut may begin earlier, at a
                # batch of a transaction the kill left without its commit record, even in an earlier
                # segment: then the torn one is deleted whole).
                path, size, added = torn
                deleted = recovery_deletions(err.decode())
                assert path in deleted or any(
                    p == path and at <= size and n >= added for n, p, at, _ in cuts
                ), f"the torn tail of {path} ({added} bytes at {size}) was not cut: {cuts}, deleted {deleted}"
                torn_cut += 1
                torn = None
            if child.returncode != -signal.SIGKILL:
                break
            new = 0
            ends = dict(latest)  # past the last acknowledged record of each partition
            for line in out.decode().splitlines():
                if not line.startswith("A ") or not line.endswith(tuple("0123456789abcdef")):
                    continue  # a line torn by the kill
                parts = line.split()
                if len(parts) != 4 or len(parts[3]) != 16:
                    continue
                key = (int(parts[1]), int(parts[2]))
                assert key[1] >= latest[key[0]], f"offset {key} acknowledged twice"
                acked[key] = parts[3]
                ends[key[0]] = max(ends[key[0]], key[1] + 1)
                new += 1
            assert new > 0 or rounds == 1, "no append was acknowledged after a restart"
            if kills % 3 == 0:
                torn = tear_a_tail(root, rng, ends)
        print(
            f"{kills} kills, {len(acked)} acknowledged records, {uncommitted} uncommitted transactions "
            f"and {torn_cut} torn tails cut at restart"
        )
        assert kills >= 20
        assert len(acked) > 1000
        # The kills did catch appends mid-way (else this test would prove nothing about recovery), and
        # every torn tail was found and cut.
        assert uncommitted > 0
        assert torn_cut == 22 // 3


def sha(value: bytes) -> str:
    return hashlib.sha1(value).hexdigest()[:16]
