"""One partition's log (``app/stores/log/local/partition_log.py``), built on its own as the manager
builds it: offsets assigned densely at enqueue in arrival order, group-committed writes, the
high-watermark moving only over batches whose fsync returned (and whose transaction committed), rolls by
size, by age and on request, going offline after a failed write and coming back at the same offsets,
waiting for offsets, and close.

Faults are injected in the file layer as ``test_recovery.py`` does (``break_fsync``); a write is held in
flight with a gate in ``BlockFile.sync`` that the test opens (bounded waits, no clock assertions).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from app.stores.log.local.committer import Transaction
from app.stores.log.local.config import LogConfig
from app.stores.log.local.files import BlockFile
from app.stores.log.local.loader import load_partition
from app.stores.log.local.partition_log import LogOffline, OffsetOutOfRange, PartitionLog
from app.stores.log.local.segments import OpenSegments
from app.stores.log.protocol import EngineUnavailable, RecordIn, TopicPartition, UnknownLog
from tests.stores.log.local.test_recovery import break_fsync

# How long a test waits for a worker thread before it fails instead of hanging (not a speed requirement).
HANG_GUARD = 20.0


class Harness:
    """A partition log over its own directory and threads, with what its callbacks were told."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.rolls = 0
        self.failures: list[BaseException] = []

    def on_roll(self, log: PartitionLog) -> None:
        self.rolls += 1

    def on_failure(self, error: BaseException) -> None:
        # What the manager does: the log goes offline and fails what it has not resolved.
        self.failures.append(error)
        self.log.fail(error)

    def segment_files(self) -> list[Path]:
        return sorted(self.log.directory.glob("*.log"))

    def on_disk(self) -> int:
        return sum(p.stat().st_size for p in self.segment_files())

    async def values(self, offset: int = 0) -> list[tuple[int, bytes]]:
        return [(r.offset, r.value) for r in await self.log.read(offset, 10_000, 1 << 26)]


OpenLog = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def open_log(tmp_path: Path) -> AsyncIterator[OpenLog]:
    """Opens partition logs (``LogConfig`` knobs as keywords) under ``tmp_path``; closes them at the end."""
    writers = ThreadPoolExecutor(2, thread_name_prefix="test-log-writer")
    readers = ThreadPoolExecutor(2, thread_name_prefix="test-log-reader")
    cache = OpenSegments(16)
    opened: list[PartitionLog] = []

    async def open_(name: str = "top_p-0", **knobs: Any) -> Harness:
        directory = tmp_path / name
        directory.mkdir(exist_ok=True)
        config = LogConfig(**knobs)
        loaded = await asyncio.to_thread(
            load_partition,
            directory,
            cache,
            index_interval_bytes=config.index_interval_bytes,
            recovery_point=None,
            clean=False,
        )
        harness: Harness
        log = PartitionLog(
            TopicPartition("top_p", 0),
            directory,
            config,
            loaded.segments,
            cache,
            write_executor=writers,
            read_executor=readers,
            on_roll=lambda log: harness.on_roll(log),
            on_failure=lambda error: harness.on_failure(error),
        )
        harness = Harness(log)
        opened.append(log)
        return harness

    yield open_
    for log in opened:
        if not log.closed:
            await log.close()
    writers.shutdown(wait=True)
    readers.shutdown(wait=True)


def records(*values: bytes) -> list[RecordIn]:
    return [RecordIn(value=v) for v in values]


class HeldFsync:
    """``BlockFile.sync`` waits at a gate: the bytes of a write are in the file, not yet durable."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reached = threading.Event()
        self.gate = threading.Event()
        original = BlockFile.sync

        def sync(block: BlockFile) -> None:
            self.reached.set()
            assert self.gate.wait(HANG_GUARD)
            original(block)

        monkeypatch.setattr(BlockFile, "sync", sync)

    async def wait_reached(self) -> None:
        assert await asyncio.to_thread(self.reached.wait, HANG_GUARD), "the writer never reached fsync"


class TestAppend:
    async def test_offsets_are_assigned_densely_at_enqueue_in_arrival_order(self, open_log):
        h = await open_log()
        log = h.log
        first = log.enqueue(log.encode(records(b"a", b"b")))
        second = log.enqueue(log.encode(records(b"c")))
        third = log.enqueue(log.encode(records(b"d", b"e", b"f")))
        assert [p.base_offset for p in (first, second, third)] == [0, 2, 3]
        assert log.next_offset == 6
        await asyncio.wait_for(asyncio.gather(first.future, second.future, third.future), HANG_GUARD)
        assert await h.values() == list(enumerate([b"a", b"b", b"c", b"d", b"e", b"f"]))

    async def test_encoding_assigns_nothing_until_the_batch_is_enqueued(self, open_log):
        log = (await open_log()).log
        log.encode(records(b"dropped", b"dropped"))  # encoded, never queued: no offsets taken
        assert log.next_offset == 0
        assert await log.append(records(b"kept")) == 0

    async def test_appends_arriving_during_a_write_share_the_next_write(self, open_log):
        h = await open_log()
        bases = await asyncio.wait_for(
            asyncio.gather(*(h.log.append(records(b"%d" % i)) for i in range(10))), HANG_GUARD
        )
        assert bases == list(range(10))
        # The first append's write was in flight while the other nine were queued: one more write for all.
        assert h.log.writes == 2
        assert [v for _, v in await h.values()] == [b"%d" % i for i in range(10)]

    async def test_a_negative_read_offset_is_refused(self, open_log):
        log = (await open_log()).log
        with pytest.raises(OffsetOutOfRange):
            await log.read(-1, 10, 1 << 20)


class TestHighWatermark:
    async def test_a_written_batch_is_invisible_until_its_fsync_returns(self, open_log, monkeypatch):
        h = await open_log()
        await h.log.append(records(b"durable"))
        before = h.on_disk()
        held = HeldFsync(monkeypatch)
        append = asyncio.ensure_future(h.log.append(records(b"in flight")))
        await held.wait_reached()
        assert h.on_disk() > before  # the bytes are in the file ...
        assert (h.log.next_offset, h.log.high_watermark) == (2, 1)  # ... but not committed
        assert h.log.info().latest_offset == 1
        assert await h.values() == [(0, b"durable")]
        assert not append.done()
        held.gate.set()
        assert await asyncio.wait_for(append, HANG_GUARD) == 1
        assert h.log.high_watermark == 2
        assert await h.values() == [(0, b"durable"), (1, b"in flight")]

    async def test_a_batch_of_an_uncommitted_transaction_holds_back_everything_after_it(self, open_log):
        h = await open_log()
        log = h.log
        await log.open_active()  # so the append below is queued at once, right behind the transaction's
        ready: list[int] = []
        txn = Transaction(7, lambda t: ready.append(t.txn_id))
        txn.waiting = 1
        pending = log.enqueue(log.encode(records(b"t0", b"t1"), txn_id=7), txn)
        after = asyncio.ensure_future(log.append(records(b"after")))
        await log.wait_idle()
        assert ready == [7]  # durable and at the head: the transaction may write its commit record
        assert log.high_watermark == 0
        assert await h.values() == []
        assert not after.done()
        txn.committed = True
        log.committed(txn, pending)
        assert log.high_watermark == 3
        assert list(log.txn_marks) == [(7, 2)]
        assert await asyncio.wait_for(after, HANG_GUARD) == 2
        assert await h.values() == [(0, b"t0"), (1, b"t1"), (2, b"after")]


class TestRoll:
    async def test_a_roll_of_an_empty_active_segment_is_a_no_op(self, open_log):
        h = await open_log()
        await h.log.roll()
        assert len(h.log.segments) == 1
        assert h.rolls == 0

    async def test_a_requested_roll_starts_a_segment_at_the_log_end(self, open_log):
        h = await open_log()
        await h.log.append(records(b"a", b"b"))
        await h.log.roll()
        assert [s.base_offset for s in h.log.segments] == [0, 2]
        assert h.rolls == 1
        assert await h.log.append(records(b"c")) == 2
        assert len(h.segment_files()) == 2
        assert await h.values() == [(0, b"a"), (1, b"b"), (2, b"c")]  # one read across both

    async def test_a_batch_that_would_overflow_the_segment_starts_a_new_one(self, open_log):
        h = await open_log(segment_bytes=1000)
        for i in range(3):
            await h.log.append(records(bytes([i]) * 600))  # two never fit in one segment
        assert [s.base_offset for s in h.log.segments] == [0, 1, 2]
        assert h.rolls == 2
        assert all(path.stat().st_size < 1000 for path in h.segment_files())
        assert [o for o, _ in await h.values()] == [0, 1, 2]

    async def test_small_batches_share_a_segment_until_it_is_full(self, open_log):
        h = await open_log(segment_bytes=1000)
        for i in range(6):
            await h.log.append(records(bytes([i]) * 200))
        bases = [s.base_offset for s in h.log.segments]
        assert 1 < len(bases) < 6  # several batches per segment, and more than one segment
        assert bases == sorted(bases) and bases[0] == 0

    async def test_a_segment_older_than_segment_ms_is_rolled_before_the_next_batch(self, open_log):
        h = await open_log(segment_ms=0)  # every non-empty active segment is due
        await h.log.append(records(b"a"))
        assert len(h.log.segments) == 1  # an empty segment takes its first batch
        await h.log.append(records(b"b"))
        assert [s.base_offset for s in h.log.segments] == [0, 1]
        assert h.rolls == 1


class TestOffline:
    async def test_a_failed_fsync_fails_the_append_and_everything_queued_behind_it(
        self, open_log, monkeypatch
    ):
        h = await open_log()
        await h.log.append(records(b"ok"))
        durable = h.on_disk()
        fault = break_fsync(monkeypatch)
        fault.on = True
        results = await asyncio.wait_for(
            asyncio.gather(h.log.append(records(b"x")), h.log.append(records(b"y")), return_exceptions=True),
            HANG_GUARD,
        )
        assert all(isinstance(r, LogOffline) and isinstance(r, EngineUnavailable) for r in results)
        assert len(h.failures) == 1  # reported once, however many writes were refused after it
        assert h.log.failed is h.failures[0]
        assert h.log.high_watermark == 1
        # Offline: nothing is taken, committed reads go on.
        with pytest.raises(LogOffline):
            h.log.encode(records(b"refused"))
        with pytest.raises(LogOffline):
            await h.log.roll()
        assert await h.values() == [(0, b"ok")]

        fault.on = False
        assert await h.log.cut_to_high_watermark() > 0
        assert h.on_disk() == durable  # the never-acknowledged bytes are gone from the file
        assert h.log.next_offset == 1
        with pytest.raises(LogOffline):  # still refused until resumed
            await h.log.append(records(b"early"))
        h.log.resume()
        assert await h.log.append(records(b"again")) == 1  # the failed appends' offsets, reused
        assert await h.values() == [(0, b"ok"), (1, b"again")]

    async def test_a_transaction_pending_on_a_failed_log_fails_with_it(self, open_log):
        h = await open_log()
        txn = Transaction(3, lambda t: None)
        txn.waiting = 2  # another partition has not written its batch yet
        h.log.enqueue(h.log.encode(records(b"t"), txn_id=3), txn)
        await h.log.wait_idle()
        h.log.fail(OSError(5, "Input/output error"))
        with pytest.raises(LogOffline):
            await asyncio.wait_for(txn.future, HANG_GUARD)
        assert h.log.high_watermark == 0


class TestWaiting:
    async def test_watch_wakes_once_when_the_offset_is_committed(self, open_log):
        log = (await open_log()).log
        woken: list[str] = []
        log.watch(1, lambda: woken.append("one"))
        cancel = log.watch(0, lambda: woken.append("cancelled"))
        cancel()
        await log.append(records(b"a"))
        assert woken == []  # offset 1 is not there yet
        await log.append(records(b"b"))
        assert woken == ["one"]
        await log.append(records(b"c"))
        assert woken == ["one"]
        log.watch(0, lambda: woken.append("at once"))  # already committed: fires before returning
        assert woken == ["one", "at once"]

    async def test_wait_for_answers_true_once_an_append_commits_the_offset(self, open_log):
        log = (await open_log()).log
        waiting = asyncio.ensure_future(log.wait_for(0, HANG_GUARD))
        await asyncio.sleep(0)
        assert not waiting.done()
        await log.append(records(b"a"))
        assert await asyncio.wait_for(waiting, HANG_GUARD) is True


class TestClose:
    async def test_close_wakes_waiters_and_refuses_appends(self, open_log):
        h = await open_log()
        await h.log.append(records(b"a"))
        waiting = asyncio.ensure_future(h.log.wait_for(5, HANG_GUARD))
        await asyncio.sleep(0)
        woken: list[bool] = []
        h.log.watch(9, lambda: woken.append(True))
        await h.log.close()
        assert await asyncio.wait_for(waiting, HANG_GUARD) is False  # woken by the close, not committed
        assert woken == [True]
        with pytest.raises(LogOffline, match="closed"):
            await h.log.append(records(b"late"))

    async def test_close_with_an_error_fails_what_is_unresolved_and_keeps_what_committed(self, open_log):
        h = await open_log()
        await h.log.append(records(b"a"))
        txn = Transaction(1, lambda t: None)
        txn.waiting = 2
        h.log.enqueue(h.log.encode(records(b"t"), txn_id=1), txn)
        await h.log.close(UnknownLog("topic top_p was deleted"))
        with pytest.raises(UnknownLog):
            await asyncio.wait_for(txn.future, HANG_GUARD)
        # Loaded again: the batch of the transaction that never committed is cut, the rest kept.
        reopened = await open_log()
        assert await reopened.values() == [(0, b"a")]
        assert reopened.log.next_offset == 1
