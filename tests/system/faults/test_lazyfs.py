"""The lazy file system itself (tests/system/faults/lazyfs.py): a write is read back at once; at a power loss
what was fsync'd stays and what was not is gone - appended bytes cut, overwritten bytes put back,
truncations undone, files never synced removed - and a directory's fsync keeps the names made in it.
Writes go through a real FUSE mount, from this process and from a child killed before the loss."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.system.faults.lazyfs import LazyFS, unavailable

pytestmark = pytest.mark.slow


@pytest.fixture
def disk(tmp_path):
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    with LazyFS(tmp_path / "mnt") as fs:
        yield fs


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path, data, offset=None, sync=False):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if offset is None:
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, data)
        else:
            os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


class TestReads:
    def test_a_write_not_synced_is_read_back_at_once(self, disk):
        path = disk.mountpoint / "f"
        _write(path, b"hello")
        _write(path, b"J", offset=0)
        assert path.read_bytes() == b"Jello"
        assert path.stat().st_size == 5
        assert disk.stats()["unsynced"] == ["/f"]


class TestPowerLoss:
    def test_a_write_not_synced_is_gone_and_a_synced_one_stays(self, disk):
        path = disk.mountpoint / "f"
        _write(path, b"durable", sync=True)
        _write(path, b"+lost")
        lost = disk.lose_unsynced()
        assert path.read_bytes() == b"durable"
        assert (disk.backing / "f").read_bytes() == b"durable"
        assert lost == {"files": 1, "removed": 0, "bytes": 5, "undone": 0, "names": ["f"]}

    def test_an_overwrite_not_synced_is_put_back(self, disk):
        path = disk.mountpoint / "f"
        _write(path, b"aaaaaaaa", sync=True)
        _write(path, b"bb", offset=2)
        _write(path, b"cccc", offset=1)
        _write(path, b"dddd", offset=6)  # over the end: overwrite and append at once
        assert path.read_bytes() == b"accccadddd"
        disk.lose_unsynced()
        assert path.read_bytes() == b"aaaaaaaa"

    def test_a_truncation_not_synced_is_undone(self, disk):
        path = disk.mountpoint / "f"
        _write(path, b"0123456789", sync=True)
        os.truncate(path, 3)
        _write(path, b"xyz")
        assert path.read_bytes() == b"012xyz"
        disk.lose_unsynced()
        assert path.read_bytes() == b"0123456789"

    def test_fdatasync_counts_as_a_sync(self, disk):
        path = disk.mountpoint / "f"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"kept")
            os.fdatasync(fd)
            os.write(fd, b"-gone")
        finally:
            os.close(fd)
        disk.lose_unsynced()
        assert path.read_bytes() == b"kept"

    def test_a_file_never_synced_is_removed_unless_its_directory_was(self, disk):
        (disk.mountpoint / "d").mkdir()
        _write(disk.mountpoint / "d" / "never", b"x")
        _write(disk.mountpoint / "d" / "named", b"y")
        _fsync(disk.mountpoint / "d")  # keeps the name "named" (and "never"'s, made before it)
        _write(disk.mountpoint / "d" / "later", b"z")
        lost = disk.lose_unsynced()
        assert sorted(os.listdir(disk.mountpoint / "d")) == ["named", "never"]
        assert (disk.mountpoint / "d" / "named").read_bytes() == b""  # its data was never synced
        assert lost["removed"] == 1 and lost["names"] == ["d/later (gone)", "d/named", "d/never"]

    def test_what_a_killed_process_wrote_and_did_not_sync_is_gone(self, disk):
        # A writer in another process, SIGKILLed mid-stream: its page cache would outlive it on a real
        # disk (which is why SIGKILL alone proves nothing); here its unsynced writes go with the power.
        path = disk.mountpoint / "log"
        script = textwrap.dedent(
            f"""
            import os, sys
            fd = os.open({str(path)!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            for i in range(100):
                os.write(fd, b"%03d;" % i)
                if i == 49:
                    os.fsync(fd)
            print("written", flush=True)
            sys.stdin.read()
            """
        )
        child = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert child.stdout is not None and child.stdout.readline() == b"written\n"
        assert len(path.read_bytes()) == 400
        child.send_signal(signal.SIGKILL)
        child.wait()
        disk.lose_unsynced()
        assert path.read_bytes() == b"".join(b"%03d;" % i for i in range(50))

    def test_nothing_is_lost_twice(self, disk):
        path = disk.mountpoint / "f"
        _write(path, b"one", sync=True)
        disk.lose_unsynced()
        assert disk.lose_unsynced() == {"files": 0, "removed": 0, "bytes": 0, "undone": 0, "names": []}
        assert path.read_bytes() == b"one"


class TestTornPowerLoss:
    """``lose_unsynced(torn=True)``: what a disk's write-back can leave - never touching what was synced."""

    def test_a_torn_tail_is_sectors_of_the_write_or_zeros_and_the_synced_part_stays(self, disk):
        synced = bytes(range(256)) * 3  # 768 bytes: the tail starts inside a sector
        tails = {}
        for seed in range(12):
            path = disk.mountpoint / f"f{seed}"
            _write(path, synced, sync=True)
            tails[seed] = bytes([1 + seed]) * 5000
            _write(path, tails[seed][:2000])
            _write(path, tails[seed][2000:])
        disk.lose_unsynced(torn=True, seed=7)
        sizes = set()
        for seed, tail in tails.items():
            data = (disk.mountpoint / f"f{seed}").read_bytes()
            assert data[: len(synced)] == synced
            sizes.add(len(data))
            assert len(data) in (768, 768 + 2000, 768 + 5000)  # one of the sizes the file had
            for start in range(1024, len(data), 512):  # sectors wholly past the synced size
                sector = data[start : start + 512]
                assert sector in (tail[start - 768 : start - 768 + len(sector)], bytes(len(sector)))
        assert len(sizes) > 1  # twelve files, one draw each: not all the same

    def test_an_overwrite_comes_back_sector_by_sector(self, disk):
        path = disk.mountpoint / "f"
        _write(path, b"a" * 4096, sync=True)
        _write(path, b"b" * 4096, offset=0)
        disk.lose_unsynced(torn=True, seed=3)
        data = path.read_bytes()
        assert len(data) == 4096
        sectors = {data[i : i + 512] for i in range(0, 4096, 512)}
        assert sectors <= {b"a" * 512, b"b" * 512}

    def test_a_rename_not_made_durable_is_undone_with_the_file_it_replaced(self, disk):
        # write-then-rename, as files.write_atomic does, without the directory's fsync at the end
        (disk.mountpoint / "d").mkdir()
        target, temp = disk.mountpoint / "d" / "checkpoint", disk.mountpoint / "d" / "checkpoint.tmp"
        _write(target, b"old", sync=True)
        _fsync(disk.mountpoint / "d")
        _write(temp, b"new", sync=True)
        os.rename(temp, target)
        assert target.read_bytes() == b"new"
        lost = disk.lose_unsynced(torn=True, seed=1, journal=0)
        assert target.read_bytes() == b"old" and temp.read_bytes() == b"new"
        assert lost["undone"] == 1 and "d/checkpoint (rename undone)" in lost["names"]

    def test_a_rename_whose_directory_was_synced_stays(self, disk):
        (disk.mountpoint / "d").mkdir()
        target, temp = disk.mountpoint / "d" / "checkpoint", disk.mountpoint / "d" / "checkpoint.tmp"
        _write(target, b"old", sync=True)
        _write(temp, b"new", sync=True)
        os.rename(temp, target)
        _fsync(disk.mountpoint / "d")
        assert disk.lose_unsynced(torn=True, seed=1, journal=0)["undone"] == 0
        assert target.read_bytes() == b"new" and not temp.exists()

    def test_an_unlink_not_made_durable_is_undone(self, disk):
        path = disk.mountpoint / "segment"
        _write(path, b"records", sync=True)
        _fsync(disk.mountpoint)
        path.unlink()
        assert not path.exists()
        disk.lose_unsynced(torn=True, seed=1, journal=0)
        assert path.read_bytes() == b"records"

    def test_the_journal_keeps_a_prefix_of_the_operations(self, disk):
        for name in ("a", "b", "c"):
            _write(disk.mountpoint / name, name.encode(), sync=True)
        _fsync(disk.mountpoint)
        for name in ("a", "b", "c"):
            (disk.mountpoint / name).unlink()
        assert disk.lose_unsynced(torn=True, seed=1, journal=1)["undone"] == 2
        assert sorted(os.listdir(disk.mountpoint)) == ["b", "c"]

    def test_a_whole_loss_keeps_every_rename_and_unlink(self, disk):
        _write(disk.mountpoint / "gone", b"x", sync=True)
        _write(disk.mountpoint / "from", b"y", sync=True)
        _fsync(disk.mountpoint)
        (disk.mountpoint / "gone").unlink()
        os.rename(disk.mountpoint / "from", disk.mountpoint / "to")
        assert disk.lose_unsynced()["undone"] == 0
        assert sorted(os.listdir(disk.mountpoint)) == ["to"]
        assert sorted(os.listdir(str(disk.backing) + ".trash")) == []
