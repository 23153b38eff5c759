"""The local engine's ``committer`` (``app/stores/log/local/committer.py``): ``GroupCommitter``'s batching
(what arrives while a write is in flight goes into the next one), its completion order and errors, and
``TransactionLog``'s commit records on disk: load, commit, checkpoint and garbage collection, a torn
tail cut at load, and txn ids that are never handed out twice.

Writes run in a real worker thread; a test holds a write in flight with a ``threading.Event`` the write
function waits on, and waits for it with a bounded wait (a hang guard, not a speed requirement).
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c

from app.stores.log.local import files
from app.stores.log.local.committer import GroupCommitter, Transaction, TransactionLog

# How long a test waits for a worker thread before it fails instead of hanging.
HANG_GUARD = 20.0
RECORD = struct.Struct("<QI")


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(2, thread_name_prefix="test-committer")
    yield pool
    pool.shutdown(wait=True)


class Writes:
    """A write function that records its calls, can hold one in flight, and can fail on demand."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.done: list[tuple[list[str], Any, BaseException | None]] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.fail_on: set[str] = set()

    def hold(self) -> None:
        self.entered.clear()
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    async def in_flight(self) -> None:
        """Until a write has entered the write function (it waits at the gate)."""
        assert await asyncio.to_thread(self.entered.wait, HANG_GUARD), "no write started"

    def write(self, items: list[str]) -> int:
        self.calls.append(list(items))
        self.entered.set()
        assert self.gate.wait(HANG_GUARD)
        if self.fail_on & set(items):
            raise OSError(5, "Input/output error")
        return len(items)

    def on_done(self, items: list[str], result: Any, error: BaseException | None) -> None:
        self.done.append((list(items), result, error))


def committer(writes: Writes, executor: ThreadPoolExecutor) -> GroupCommitter[str, int]:
    return GroupCommitter(writes.write, writes.on_done, executor)


async def write_a_then_b_c(group: GroupCommitter[str, int], writes: Writes) -> None:
    """``a`` written alone while ``b`` and ``c`` queue behind it (the write held until both are in), then
    everything finished."""
    writes.hold()
    group.submit("a")
    await writes.in_flight()
    group.submit("b")
    group.submit("c")
    writes.release()
    await group.wait_idle()


class TestGroupCommitter:
    async def test_items_submitted_during_a_write_go_together_into_the_next_one(self, executor):
        writes = Writes()
        group = committer(writes, executor)
        writes.hold()
        group.submit("a")
        await writes.in_flight()
        assert group.busy
        for item in ("b", "c", "d"):
            group.submit(item)
        assert writes.calls == [["a"]]  # nothing else starts while one write is in flight
        writes.release()
        await group.wait_idle()
        assert writes.calls == [["a"], ["b", "c", "d"]]
        assert group.writes == 2
        assert not group.busy

    async def test_completions_are_reported_in_submission_order_with_the_write_result(self, executor):
        writes = Writes()
        group = committer(writes, executor)
        await write_a_then_b_c(group, writes)
        assert writes.done == [(["a"], 1, None), (["b", "c"], 2, None)]

    async def test_a_failed_write_reports_its_error_for_every_item_and_the_next_write_still_runs(
        self, executor
    ):
        writes = Writes()
        writes.fail_on = {"b"}
        group = committer(writes, executor)
        await write_a_then_b_c(group, writes)
        writes.hold()
        group.submit("d")
        await writes.in_flight()
        writes.release()
        await group.wait_idle()
        assert [(items, result) for items, result, _ in writes.done] == [
            (["a"], 1),
            (["b", "c"], None),
            (["d"], 1),
        ]
        errors = [error for _, _, error in writes.done]
        assert errors[0] is None and errors[2] is None
        assert isinstance(errors[1], OSError) and errors[1].errno == 5
        assert group.writes == 3

    async def test_wait_idle_returns_at_once_when_idle_and_after_the_last_write_otherwise(self, executor):
        writes = Writes()
        group = committer(writes, executor)
        await group.wait_idle()  # nothing submitted: does not wait
        assert group.writes == 0
        writes.hold()
        group.submit("a")
        await writes.in_flight()
        group.submit("b")
        waiters = [asyncio.create_task(group.wait_idle()) for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)  # the write is held: nobody is released
        writes.release()
        await asyncio.wait_for(asyncio.gather(*waiters), HANG_GUARD)
        # Every waiter saw both writes done, not only the one in flight when it started waiting.
        assert [items for items, _, _ in writes.done] == [["a"], ["b"]]

    async def test_a_submit_after_idle_starts_a_new_write(self, executor):
        writes = Writes()
        group = committer(writes, executor)
        for item in ("a", "b"):
            group.submit(item)
            await group.wait_idle()
        assert writes.calls == [["a"], ["b"]]
        assert group.writes == 2


# -- the transaction log --------------------------------------------------------------------------------------


@pytest.fixture
def txn_dir(tmp_path: Path) -> Path:
    return tmp_path / files.TXN_DIR


class Commits:
    """``on_committed`` of a started transaction log: what it was told, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, BaseException | None]] = []

    def __call__(self, txn: Transaction, error: BaseException | None) -> None:
        self.seen.append((txn.txn_id, error))


async def opened(directory: Path, executor: ThreadPoolExecutor) -> tuple[TransactionLog, set[int], Commits]:
    """A loaded and started transaction log, the committed ids its load found, its commit callback."""
    log = TransactionLog(directory, executor)
    committed = await asyncio.get_running_loop().run_in_executor(executor, log.load)
    commits = Commits()
    log.start(commits)
    return log, committed, commits


@pytest.fixture
async def reopen(executor: ThreadPoolExecutor) -> AsyncIterator[Any]:
    """Opens transaction logs (``opened``), closing every one still open at the end."""
    logs: list[TransactionLog] = []

    async def open_(directory: Path) -> tuple[TransactionLog, set[int], Commits]:
        result = await opened(directory, executor)
        logs.append(result[0])
        return result

    yield open_
    for log in logs:
        await log.close()


async def commit(log: TransactionLog, count: int) -> list[int]:
    """``count`` transactions given new ids and committed in one go; their ids."""
    txns = [Transaction(log.new_txn_id(), lambda txn: None) for _ in range(count)]
    for txn in txns:
        log.commit(txn)
    await log.wait_idle()
    return [txn.txn_id for txn in txns]


def record(txn_id: int) -> bytes:
    """A commit record as the log writes it."""
    return RECORD.pack(txn_id, crc32c(struct.pack("<Q", txn_id)))


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def txn_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.txnlog"))


class TestTransactionLogLoadAndCommit:
    async def test_a_fresh_directory_starts_at_txn_1_with_one_empty_file(self, txn_dir, reopen):
        log, committed, _ = await reopen(txn_dir)
        assert committed == set()
        assert log.next_txn_id == 1
        assert txn_files(txn_dir) == [f"{1:020d}.txnlog"]
        assert (txn_dir / f"{1:020d}.txnlog").stat().st_size == 0

    async def test_commit_records_are_reported_in_order_and_read_back_after_a_restart(self, txn_dir, reopen):
        log, _, commits = await reopen(txn_dir)
        ids = await commit(log, 3)
        assert ids == [1, 2, 3]
        assert commits.seen == [(1, None), (2, None), (3, None)]
        data = (txn_dir / f"{1:020d}.txnlog").read_bytes()
        assert [RECORD.unpack_from(data, i)[0] for i in range(0, len(data), RECORD.size)] == [1, 2, 3]
        await log.close()
        log, committed, _ = await reopen(txn_dir)
        assert committed == {1, 2, 3}
        assert log.next_txn_id == 4

    async def test_a_torn_tail_is_cut_at_load_and_the_records_before_it_kept(self, txn_dir, reopen):
        log, _, _ = await reopen(txn_dir)
        await commit(log, 2)
        await log.close()
        path = txn_dir / f"{1:020d}.txnlog"
        append_bytes(path, record(3)[:7])  # a crash mid-record
        log, committed, _ = await reopen(txn_dir)
        assert committed == {1, 2}
        assert path.stat().st_size == 2 * RECORD.size  # cut, on disk
        assert log.next_txn_id == 3
        # The next record lands right after the kept ones and is read back.
        assert await commit(log, 1) == [3]
        await log.close()
        _, committed, _ = await reopen(txn_dir)
        assert committed == {1, 2, 3}

    async def test_a_record_with_a_bad_crc_ends_the_file_there(self, txn_dir, reopen):
        log, _, _ = await reopen(txn_dir)
        await commit(log, 3)
        await log.close()
        path = txn_dir / f"{1:020d}.txnlog"
        data = bytearray(path.read_bytes())
        data[RECORD.size + 8] ^= 0xFF  # record 2's CRC
        path.write_bytes(bytes(data))
        _, committed, _ = await reopen(txn_dir)
        assert committed == {1}  # record 3 follows a corrupt one: not trusted either
        assert path.stat().st_size == RECORD.size

    async def test_leftover_temporary_files_are_removed_at_load(self, txn_dir, reopen):
        txn_dir.mkdir(parents=True)
        leftover = txn_dir / f"checkpoint.123-456{files.TMP_SUFFIX}"
        leftover.write_bytes(b"{")
        await reopen(txn_dir)
        assert not leftover.exists()

    async def test_an_unreadable_checkpoint_is_ignored(self, txn_dir, reopen):
        log, _, _ = await reopen(txn_dir)
        await commit(log, 2)
        await log.close()
        (txn_dir / "checkpoint").write_bytes(b"not json")
        log, committed, _ = await reopen(txn_dir)
        assert committed == {1, 2}
        assert (log.resolved, log.next_txn_id) == (0, 3)

    async def test_observed_ids_are_never_handed_out_again(self, txn_dir, reopen):
        log, _, _ = await reopen(txn_dir)
        log.observe_txn_id(41)  # a batch in some partition's tail carries txn 41
        log.observe_txn_id(7)  # lower: changes nothing
        assert log.new_txn_id() == 42

    async def test_a_failed_write_reports_the_error_for_each_transaction_of_it(
        self, txn_dir, reopen, executor
    ):
        log, _, commits = await reopen(txn_dir)
        await commit(log, 1)
        path = txn_dir / f"{1:020d}.txnlog"
        assert log._fd is not None
        # The disk refuses the next write: a descriptor that cannot write (EBADF), as a failed device would.
        writable, log._fd = log._fd, os.open(path, os.O_RDONLY)
        try:
            txns = [Transaction(log.new_txn_id(), lambda txn: None) for _ in range(2)]
            for txn in txns:
                log.commit(txn)
            await log.wait_idle()
        finally:
            os.close(log._fd)
            log._fd = writable
        assert [txn_id for txn_id, _ in commits.seen] == [1, 2, 3]
        assert commits.seen[0][1] is None
        assert all(isinstance(error, OSError) for _, error in commits.seen[1:])
        assert path.stat().st_size == RECORD.size  # nothing of the failed write counted
        await log.close()
        _, committed, _ = await reopen(txn_dir)
        assert committed == {1}

    async def test_cut_unflushed_truncates_the_active_file_to_its_last_fsynced_record(self, txn_dir, reopen):
        log, _, _ = await reopen(txn_dir)
        await commit(log, 2)
        path = txn_dir / f"{1:020d}.txnlog"
        append_bytes(path, record(9))  # what a failed write may have left in the page cache
        await asyncio.to_thread(log.cut_unflushed)
        assert path.stat().st_size == 2 * RECORD.size
        await log.close()
        _, committed, _ = await reopen(txn_dir)
        assert committed == {1, 2}


class TestTransactionLogCheckpoint:
    async def test_a_checkpoint_records_resolved_and_the_next_id_and_starts_a_new_file(self, txn_dir, reopen):
        log, _, _ = await reopen(txn_dir)
        await commit(log, 2)
        await log.checkpoint(0)
        assert json.loads((txn_dir / "checkpoint").read_bytes()) == {"resolved": 0, "next_txn_id": 3}
        # The file with data stays (txn 1 and 2 are not resolved); appends go to a fresh one.
        assert txn_files(txn_dir) == [f"{1:020d}.txnlog", f"{2:020d}.txnlog"]
        assert log.file_count == 2
        await commit(log, 1)
        assert (txn_dir / f"{2:020d}.txnlog").stat().st_size == RECORD.size

    async def test_files_holding_only_resolved_txns_are_deleted(self, txn_dir, reopen):
        log, _, _ = await reopen(txn_dir)
        await commit(log, 2)  # file 1: txns 1, 2
        await log.checkpoint(0)
        await commit(log, 2)  # file 2: txns 3, 4
        await log.checkpoint(3)  # file 1 holds only resolved txns; file 2 still needs txn 4
        assert txn_files(txn_dir) == [f"{2:020d}.txnlog", f"{3:020d}.txnlog"]
        assert log.resolved == 3
        await log.close()
        log, committed, _ = await reopen(txn_dir)
        assert committed == {3, 4}
        assert (log.resolved, log.next_txn_id) == (3, 5)

    async def test_an_empty_active_file_is_reused_and_resolved_never_moves_back(self, txn_dir, reopen):
        log, _, _ = await reopen(txn_dir)
        await commit(log, 1)
        await log.checkpoint(1)
        assert txn_files(txn_dir) == [f"{2:020d}.txnlog"]  # file 1 gone, file 2 new and empty
        await log.checkpoint(0)  # an older answer: resolved stays 1, no new file for an empty one
        assert log.resolved == 1
        assert txn_files(txn_dir) == [f"{2:020d}.txnlog"]
        assert json.loads((txn_dir / "checkpoint").read_bytes())["resolved"] == 1

    async def test_ids_handed_out_are_not_reused_after_their_files_are_collected(self, txn_dir, reopen):
        log, _, _ = await reopen(txn_dir)
        await commit(log, 3)
        for _ in range(6):  # ids given to transactions that never committed (failed, cut)
            log.new_txn_id()
        assert log.next_txn_id == 10
        await log.checkpoint(3)
        assert txn_files(txn_dir) == [f"{2:020d}.txnlog"]
        await log.close()
        log, committed, _ = await reopen(txn_dir)
        assert committed == set()  # every commit record was collected ...
        assert log.next_txn_id == 10  # ... and the checkpoint still keeps the ids from coming back

    async def test_a_checkpoint_queued_with_commits_is_written_after_them(self, txn_dir, reopen):
        log, _, commits = await reopen(txn_dir)
        txns = [Transaction(log.new_txn_id(), lambda txn: None) for _ in range(2)]
        for txn in txns:
            log.commit(txn)
        await log.checkpoint(2)  # in the same or the next write: after the records either way
        assert commits.seen == [(1, None), (2, None)]
        assert json.loads((txn_dir / "checkpoint").read_bytes()) == {"resolved": 2, "next_txn_id": 3}
        assert txn_files(txn_dir) == [f"{2:020d}.txnlog"]
