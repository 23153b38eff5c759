"""A lazy file system: what a process wrote and did not fsync is lost when the power goes.

SIGKILL does not test a durability promise: the OS page cache outlives a killed process, so a write that
was never fsync'd is still there when it restarts. Jepsen's lazyfs (a FUSE file system that keeps unsynced
writes in its own memory and drops them on demand) is how its NATS 2.12.1 analysis found acknowledged
writes lost under coordinated power loss. This is the same fault in small, over FUSE (the ``fusepy``
bindings to Debian's ``libfuse2``): ``LazyFS(mountpoint, backing).mount()`` serves ``backing`` at
``mountpoint`` from a subprocess, and ``lose_unsynced()`` - with every process that used the mount killed
first - turns ``backing`` into what a disk would hold after the power went: only what was synced.

How. A passthrough that writes through to ``backing`` at once and keeps, in memory, how to take back every
write not yet synced, instead of keeping the unsynced data itself (as lazyfs does) and writing it at fsync:
the same model seen from outside - every read sees every write at once, from any process, and after
``lose_unsynced`` only what was synced is left - with the data path a plain ``pwrite``, and nothing to
merge on a read. Per file, since its last sync:

* its size then (``synced_size``): bytes appended past it are cut at the loss;
* the bytes a write or a truncation replaced below that size (one undo record per call, put back in the
  reverse order at the loss);
* whether the file was made since its directory was last synced (``created``): removed at the loss.

What counts as a sync: ``fsync`` or ``fdatasync`` of the file (both the same here: file data and size) makes
every write to it durable, and the file's name too (as on ext4, where fsync of a new file commits the
journal that holds its directory entry); ``fsync`` of a directory makes the names made in it durable (the
files' unsynced data is still lost). A sync is bookkeeping only: ``backing`` is never fsync'd for real (this
machine does not lose power, so that would cost time and prove nothing).

Not modelled (said so, not hidden): renames, unlinks, ``mkdir`` and links are durable at once (a rename of
an unsynced file keeps the name and loses the data, ext4's old zero-length-file case); the loss is whole
(every unsynced write is dropped, never a random subset nor a torn page, which lazyfs can also do); writes
through a shared ``mmap`` reach the file system when the kernel writes the pages back (``lose_unsynced``
forces that first with ``syncfs``, so they count as unsynced and are dropped: SQLite's ``-shm`` index, the
one such file here, is rebuilt from the WAL after a crash anyway).

Run as a script it is the file system process itself (``python lazyfs.py BACKING MOUNTPOINT CONTROL``):
FUSE in the main thread, and a Unix socket at ``CONTROL`` taking one command a connection - ``lose``
(answered with what was dropped, as JSON) and ``stats``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

_HERE = Path(__file__).resolve()


def unavailable() -> str | None:
    """Why a lazy file system cannot be mounted here (None: it can)."""
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse"
    if os.geteuid() != 0:
        return "mounting a FUSE file system needs root here"
    try:
        import fuse  # type: ignore[import-untyped]  # noqa: F401
    except (ImportError, OSError) as exc:  # fusepy raises OSError when libfuse2 is missing
        return f"fusepy/libfuse2 not available ({exc}): make install"
    return None


class LazyFS:
    """A lazy file system at ``mountpoint`` over ``backing`` (made when missing), served by a subprocess.

    ``mount()`` returns once it is mounted; ``lose_unsynced()`` drops every write not synced (call it with
    every process that had files open on the mount killed: a live writer would race the undo); ``unmount()``
    ends it. A context manager mounts and unmounts."""

    def __init__(self, mountpoint: Path, backing: Path | None = None) -> None:
        self.mountpoint = Path(mountpoint)
        self.backing = (
            Path(backing)
            if backing is not None
            else self.mountpoint.with_name(self.mountpoint.name + ".disk")
        )
        self.control = self.backing.with_name(self.backing.name + ".control")
        self.log = self.backing.with_name(self.backing.name + ".lazyfs.log")
        self.process: subprocess.Popen[bytes] | None = None

    def mount(self, timeout: float = 15.0) -> Self:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.backing.mkdir(parents=True, exist_ok=True)
        self.control.unlink(missing_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(_HERE), str(self.backing), str(self.mountpoint), str(self.control)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the test run reaches it through unmount, not a signal
            )
        deadline = time.monotonic() + timeout
        while not (os.path.ismount(self.mountpoint) and self.control.exists()):
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"lazyfs exited ({self.process.returncode}): {self.log.read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                self.unmount()
                raise TimeoutError(f"lazyfs not mounted at {self.mountpoint} after {timeout} s")
            time.sleep(0.05)
        return self

    def _ask(self, command: str, timeout: float = 120.0) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.control))
            s.sendall(command.encode() + b"\n")
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer += chunk
        result: dict[str, Any] = json.loads(answer)
        if "error" in result:
            raise RuntimeError(f"lazyfs {command}: {result['error']}")
        return result

    def lose_unsynced(self) -> dict[str, Any]:
        """The power goes: every write not synced is dropped from the backing directory. Returns what was
        dropped: ``files`` cut back, ``removed`` (made and never synced), ``bytes`` cut off the ends, and
        ``names``: their paths with every word holding a digit as ``#``, one of each pattern."""
        # Dirty pages of a shared mmap (SQLite's -shm) are written back now, not after the loss.
        fd = os.open(self.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
        try:
            ctypes.CDLL(None, use_errno=True).syncfs(fd)
        finally:
            os.close(fd)
        return self._ask("lose")

    def stats(self) -> dict[str, Any]:
        """Files with unsynced writes now, and how many syncs and losses there were."""
        return self._ask("stats")

    def unmount(self) -> None:
        if self.process is None:
            return
        if os.path.ismount(self.mountpoint):
            done = subprocess.run(["umount", str(self.mountpoint)], capture_output=True, check=False)
            if done.returncode != 0:  # still busy (a process of someone's left in it): detach it
                subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True, check=False)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def __enter__(self) -> Self:
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.unmount()


# --- the file system process ------------------------------------------------------------------------


@dataclass
class _Unsynced:
    """A file's writes since its last sync: how to take them back."""

    synced_size: int
    created: bool = False  # made since its directory (or itself) was last synced: gone at the loss
    undo: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, bytes it replaced), in order


def _pattern(path: str) -> str:
    """A path in the mount with every run of letters and digits that holds a digit as ``#``, so that one
    pattern stands for a kind of file: ``/log/t_3/00000000000000000042.log`` -> ``log/t_#/#.log``."""
    return re.sub(r"[A-Za-z0-9]*[0-9][A-Za-z0-9]*", "#", path.lstrip("/"))


def _serve(backing: Path, mountpoint: Path, control: Path) -> None:
    from fuse import FUSE, FuseOSError, Operations

    class Lazy(Operations):  # type: ignore[misc]
        use_ns = True

        def __init__(self) -> None:
            self.root = str(backing)
            self.mutex = threading.Lock()  # not "lock": that name is a FUSE operation
            self.unsynced: dict[str, _Unsynced] = {}  # by path in the mount ("/a/b")
            self.syncs = 0
            self.losses = 0

        def _full(self, path: str) -> str:
            return self.root + path

        def _file(self, path: str, fd: int) -> _Unsynced:
            state = self.unsynced.get(path)
            if state is None:
                state = self.unsynced[path] = _Unsynced(synced_size=os.fstat(fd).st_size)
            return state

        @staticmethod
        def _save(state: _Unsynced, fd: int, start: int, end: int) -> None:
            """Keep the bytes [start, end) replace below the synced size, to put back at the loss."""
            end = min(end, state.synced_size)
            if start < end:
                state.undo.append((start, os.pread(fd, end - start, start)))

        # files

        def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
            st = (
                os.fstat(fh.fh) if fh else os.lstat(self._full(path))
            )  # fh: a NULL pointer, or the file's info
            names = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_dev", "st_blocks")
            attrs: dict[str, Any] = {name: getattr(st, name) for name in names}
            attrs |= {"st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}
            return attrs

        def open(self, path: str, fi: Any) -> int:
            # Read and write through one descriptor, whatever the caller asked: saving the bytes a write
            # replaces reads them; O_APPEND off, the kernel gives every write its offset.
            flags = (
                fi.flags & ~(os.O_ACCMODE | os.O_APPEND | os.O_TRUNC | os.O_CREAT | os.O_EXCL)
            ) | os.O_RDWR
            fd = os.open(self._full(path), flags)
            if fi.flags & os.O_TRUNC:
                with self.mutex:
                    self._truncate(path, fd, 0)
            fi.fh = fd
            return 0

        def create(self, path: str, mode: int, fi: Any) -> int:
            full = self._full(path)
            with self.mutex:
                existed = os.path.lexists(full)
                if existed and fi.flags & os.O_EXCL:
                    raise FuseOSError(errno.EEXIST)
                fd = os.open(full, os.O_RDWR | os.O_CREAT, mode)
                if not existed:
                    self.unsynced[path] = _Unsynced(synced_size=0, created=True)
                elif fi.flags & os.O_TRUNC:
                    self._truncate(path, fd, 0)
            fi.fh = fd
            return 0

        def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
            return os.pread(fi.fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
            with self.mutex:
                state = self._file(path, fi.fh)
                self._save(state, fi.fh, offset, offset + len(data))
                return os.pwrite(fi.fh, data, offset)

        def _truncate(self, path: str, fd: int, length: int) -> None:
            state = self._file(path, fd)
            self._save(state, fd, length, os.fstat(fd).st_size)
            os.ftruncate(fd, length)

        def truncate(self, path: str, length: int, fh: Any = None) -> None:
            with self.mutex:
                if fh:
                    self._truncate(path, fh.fh, length)
                    return
                fd = os.open(self._full(path), os.O_RDWR)
                try:
                    self._truncate(path, fd, length)
                finally:
                    os.close(fd)

        def fsync(self, path: str, datasync: int, fi: Any) -> None:
            with self.mutex:
                self.unsynced.pop(path, None)  # all of it durable now, its name too
                self.syncs += 1

        def flush(self, path: str, fi: Any) -> None:
            return None

        def release(self, path: str, fi: Any) -> None:
            os.close(fi.fh)

        # names

        def fsyncdir(self, path: str, datasync: int, fh: Any) -> None:
            prefix = path.rstrip("/") + "/"
            with self.mutex:
                for name, state in self.unsynced.items():
                    if name.startswith(prefix) and "/" not in name[len(prefix) :]:
                        state.created = False
                self.syncs += 1

        def rename(self, old: str, new: str) -> None:
            with self.mutex:
                os.rename(self._full(old), self._full(new))
                self.unsynced.pop(new, None)
                for name in [n for n in self.unsynced if n == old or n.startswith(old + "/")]:
                    state = self.unsynced.pop(name)
                    state.created = False  # renames are durable at once (not modelled)
                    self.unsynced[new + name[len(old) :]] = state

        def unlink(self, path: str) -> None:
            with self.mutex:
                os.unlink(self._full(path))
                self.unsynced.pop(path, None)

        def rmdir(self, path: str) -> None:
            with self.mutex:
                os.rmdir(self._full(path))

        def mkdir(self, path: str, mode: int) -> None:
            os.mkdir(self._full(path), mode)

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(self._full(path))]

        def access(self, path: str, amode: int) -> None:
            if not os.access(self._full(path), amode):
                raise FuseOSError(errno.EACCES)

        def chmod(self, path: str, mode: int) -> None:
            os.chmod(self._full(path), mode)

        def chown(self, path: str, uid: int, gid: int) -> None:
            os.chown(self._full(path), uid, gid)

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
            os.utime(self._full(path), ns=times)

        def readlink(self, path: str) -> str:
            return os.readlink(self._full(path))

        def symlink(self, target: str, source: str) -> None:
            os.symlink(source, self._full(target))

        def link(self, target: str, source: str) -> None:
            os.link(self._full(source), self._full(target))

        def statfs(self, path: str) -> dict[str, Any]:
            st = os.statvfs(self._full(path))
            names = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                     "f_flag", "f_frsize", "f_namemax")  # fmt: skip
            return {name: getattr(st, name) for name in names}

        # the power

        def lose(self) -> dict[str, Any]:
            files = removed = cut = 0
            kinds: set[str] = set()  # what was lost, as path patterns (_pattern)
            with self.mutex:
                for path, state in self.unsynced.items():
                    full = self._full(path)
                    if not os.path.lexists(full):
                        continue
                    if state.created:
                        os.unlink(full)
                        removed += 1
                        kinds.add(_pattern(path) + " (gone)")
                        continue
                    fd = os.open(full, os.O_RDWR)
                    try:
                        cut += max(0, os.fstat(fd).st_size - state.synced_size)
                        for offset, data in reversed(state.undo):
                            os.pwrite(fd, data, offset)
                        os.ftruncate(fd, state.synced_size)
                    finally:
                        os.close(fd)
                    files += 1
                    kinds.add(_pattern(path))
                self.unsynced.clear()
                self.losses += 1
            return {"files": files, "removed": removed, "bytes": cut, "names": sorted(kinds)}

        def stats(self) -> dict[str, Any]:
            with self.mutex:
                return {"unsynced": sorted(self.unsynced), "syncs": self.syncs, "losses": self.losses}

    fs = Lazy()

    def answer(conn: socket.socket) -> None:
        with conn:
            command = conn.makefile("rb").readline().decode().strip()
            try:
                result = fs.lose() if command == "lose" else fs.stats() if command == "stats" else None
                reply = result if result is not None else {"error": f"unknown command {command!r}"}
            except OSError as exc:
                reply = {"error": repr(exc)}
            conn.sendall(json.dumps(reply).encode() + b"\n")

    def listen() -> None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(control) + ".tmp")
        server.listen(8)
        os.rename(str(control) + ".tmp", control)  # exists only once it takes connections
        while True:
            conn, _ = server.accept()
            answer(conn)

    def ready() -> None:
        # The control socket appears once the kernel serves the mount, so ``mount()`` waits for both.
        while not os.path.ismount(mountpoint):
            time.sleep(0.02)
        listen()

    threading.Thread(target=ready, daemon=True).start()
    # No attribute, name or negative-lookup caching in the kernel: after a loss a file's size changes under
    # it, and the restarted processes must see the file system as the loss left it.
    FUSE(
        fs,
        str(mountpoint),
        raw_fi=True,
        foreground=True,
        big_writes=True,
        max_write=131072,
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
        fsname="lazyfs",
    )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        _serve(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
