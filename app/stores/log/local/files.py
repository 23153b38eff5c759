"""File names and low-level file access of the local log (Kafka's ``LogFileUtils``).

Layout under the engine root::

    <root>/
      recovery-point-offset-checkpoint    every partition's recovery point (see ``loader``)
      .clean_shutdown                     present only between a clean close and the next start
      __txn/                              the engine's transaction log (see ``committer``)
        00000000000000000001.txnlog       commit records, rolled at each checkpoint
        checkpoint                        "all txns <= N resolved" and the txn id floor
      <topic_id>-<partition>/             one directory per topic-partition
        partition.metadata                JSON: topic id, partition, retention config
        00000000000000000000.log          segment: record batches (format in ``records``)
        00000000000000000000.index        sparse offset index (4+4 bytes per entry)
        00000000000000000000.timeindex    sparse time index (8+4 bytes per entry)
        00000000000001048576.log          next segment, named by its base offset (20 digits)
        ...
      .deleting-<dir>-<hex>/              a partition being deleted (removed at start if left over)

Suffixes that only ever exist transiently: ``.deleted`` (a segment file renamed before its unlink by
retention), ``.swap`` and ``.tmp`` (a file being replaced atomically). The loader removes all three.

``BlockFile`` gives positioned reads and writes over any binary file object: ``os.pread``/``os.pwritev``
on real files (so a reader thread and the writer thread never share a file position), and seek+read
under a lock on objects without a descriptor (``io.BytesIO`` in unit tests).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from pathlib import Path
from typing import BinaryIO

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
SWAP_SUFFIX = ".swap"
TMP_SUFFIX = ".tmp"

PARTITION_METADATA = "partition.metadata"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEAN_SHUTDOWN = ".clean_shutdown"
TXN_DIR = "__txn"
DELETING_PREFIX = ".deleting-"

_IOV_MAX = 1024


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded base offset that names a segment's files."""
    return f"{offset:020d}"


def log_file(directory: Path, base_offset: int) -> Path:
    return directory / (filename_prefix(base_offset) + LOG_SUFFIX)


def index_file(directory: Path, base_offset: int) -> Path:
    return directory / (filename_prefix(base_offset) + INDEX_SUFFIX)


def time_index_file(directory: Path, base_offset: int) -> Path:
    return directory / (filename_prefix(base_offset) + TIME_INDEX_SUFFIX)


def offset_from_name(name: str) -> int | None:
    """The base offset of a segment file name, or None if the name is not ``<20 digits>.<suffix>``."""
    stem = name.split(".", 1)[0]
    # ASCII digits only: str.isdigit() is also true of '²' and other digits int() refuses.
    if len(stem) != 20 or not (stem.isascii() and stem.isdigit()):
        return None
    return int(stem)


def partition_dir_name(topic_id: str, partition: int) -> str:
    return f"{topic_id}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic_id, partition)`` of a partition directory name, or None for anything else."""
    if name.startswith(".") or name == TXN_DIR:
        return None
    topic_id, sep, partition = name.rpartition("-")
    if not sep or not topic_id or not (partition.isascii() and partition.isdigit()):
        return None
    return topic_id, int(partition)


def open_rw(path: Path) -> io.FileIO:
    """Open (creating if missing) for positioned reads and writes; never O_APPEND (pwrite would ignore
    the position)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    return io.FileIO(fd, "r+", closefd=True)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (created, renamed, removed files) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably: write a temp file, fsync it, rename, fsync the dir."""
    # A unique temp name: two writers of the same file never share (or rename away) a temp file.
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}{TMP_SUFFIX}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _datasync(fd: int) -> None:
    # fdatasync persists the data and the metadata needed to read it back (the file size), which is
    # what an append needs; it skips the mtime update fsync would also force.
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - macOS
        os.fsync(fd)


class BlockFile:
    """Positioned I/O over a binary file object (see the module docstring). Thread-safe."""

    __slots__ = ("_fd", "_file", "_lock")

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        fd: int | None
        try:
            fd = file.fileno()
        except (OSError, AttributeError, io.UnsupportedOperation):
            fd = None
        self._fd = fd
        self._lock = threading.Lock()

    @property
    def file(self) -> BinaryIO:
        return self._file

    def size(self) -> int:
        if self._fd is not None:
            return os.fstat(self._fd).st_size
        with self._lock:
            return self._file.seek(0, os.SEEK_END)

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (fewer at the end of the file)."""
        if size <= 0:
            return b""
        if self._fd is not None:
            data = os.pread(self._fd, size, position)
            if len(data) == size or not data:
                return data
            # A short read below the end of file (rare, large reads): finish it.
            parts = [data]
            got = len(data)
            while got < size:
                more = os.pread(self._fd, size - got, position + got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            return b"".join(parts)
        with self._lock:
            self._file.seek(position)
            return self._file.read(size)

    def write(self, position: int, buffers: list[bytes]) -> int:
        """Write ``buffers`` back to back at ``position`` (one ``pwritev`` per 1024 buffers)."""
        total = 0
        if self._fd is not None:
            fd = self._fd
            for start in range(0, len(buffers), _IOV_MAX):
                chunk = buffers[start : start + _IOV_MAX]
                want = sum(map(len, chunk))
                done = os.pwritev(fd, chunk, position + total)
                if done != want:
                    # Partial write (disk full, signal): write the rest buffer by buffer.
                    joined = memoryview(b"".join(chunk))
                    while done < want:
                        n = os.pwrite(fd, joined[done:], position + total + done)
                        if n <= 0:
                            raise OSError("short write")
                        done += n
                total += want
            return total
        with self._lock:
            self._file.seek(position)
            for buf in buffers:
                self._file.write(buf)
                total += len(buf)
        return total

    def truncate(self, size: int) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, size)
            return
        with self._lock:
            self._file.truncate(size)

    def sync(self) -> None:
        """fdatasync the file (a no-op for in-memory files)."""
        if self._fd is not None:
            _datasync(self._fd)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._file.close()
