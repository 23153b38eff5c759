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

Two kinds of loss. ``lose_unsynced()`` is whole: every unsynced write is dropped, and renames and unlinks
are durable at once (a rename of an unsynced file keeps the name and loses the data, ext4's old
zero-length-file case). ``lose_unsynced(torn=True, seed=...)`` is what a disk's write-back can leave
instead (lazyfs's torn faults, and more): renames and unlinks not yet made durable - by an ``fsync`` of
their directories, or of the renamed file itself - form a journal of which only a random prefix survives
(the rest are undone: the old name back, a replaced or unlinked file restored from a trash directory
beside ``backing``); each unsynced file then ends at one of the sizes it had since its last sync, each
512-byte sector an unsynced write touched holds either the new bytes or what was there before (a sector
in the file's new tail may read as zeros: written back out of order), and a file never synced is removed
or kept with such a torn content. What was synced is never touched. ``mkdir``, ``rmdir`` and links stay
durable at once; writes through a shared ``mmap`` reach the file system when the kernel writes the pages
back (``lose_unsynced`` forces that first with ``syncfs``, so they count as unsynced and are dropped:
SQLite's ``-shm`` index, the one such file here, is rebuilt from the WAL after a crash anyway).

Run as a script it is the file system process itself (``python lazyfs.py BACKING MOUNTPOINT CONTROL``):
FUSE in the main thread, and a Unix socket at ``CONTROL`` taking one command a connection - ``lose``,
``lose torn SEED [JOURNAL]`` (answered with what was dropped, as JSON) and ``stats``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import random
import re
import shutil
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

    def lose_unsynced(self, torn: bool = False, seed: int = 0, journal: int | None = None) -> dict[str, Any]:
        """The power goes: every write not synced is dropped from the backing directory (``torn``: torn as
        the module's docstring says, drawn from ``seed``; ``journal``: how many of the pending renames and
        unlinks survive, drawn when None). Returns what was dropped: ``files`` cut back, ``removed`` (made
        and never synced), ``bytes`` cut off the ends, ``undone`` (renames and unlinks taken back), and
        ``names``: their paths with every word holding a digit as ``#``, one of each pattern."""
        # Dirty pages of a shared mmap (SQLite's -shm) are written back now, not after the loss.
        fd = os.open(self.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
        try:
            ctypes.CDLL(None, use_errno=True).syncfs(fd)
        finally:
            os.close(fd)
        if not torn:
            return self._ask("lose")
        return self._ask(f"lose torn {seed}" + ("" if journal is None else f" {journal}"))

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
    # (offset, bytes it replaced, a truncation?), in order
    undo: list[tuple[int, bytes, bool]] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # its size after each write or truncation, in order


@dataclass
class _Pending:
    """A rename or unlink not yet durable: undone at a torn loss unless the journal's kept part holds it."""

    kind: str  # "rename" or "unlink"
    old: str  # the path renamed or unlinked
    new: str | None  # the rename's new path
    dirs: set[str]  # directories whose fsync makes it durable
    trash: str | None = None  # where the file it replaced (rename) or removed (unlink) waits
    trash_state: _Unsynced | None = None  # that file's unsynced writes
    moved: list[tuple[str, str, bool]] = field(default_factory=list)  # (old, new, created) states moved


SECTOR = 512  # what a disk writes whole (or not at all) in a torn loss
_TRASH_LIMIT = 10_000  # pending operations kept undoable; older ones count as durable


def _pattern(path: str) -> str:
    """A path in the mount with every run of letters and digits that holds a digit as ``#``, so that one
    pattern stands for a kind of file: ``/log/t_3/00000000000000000042.log`` -> ``log/t_#/#.log``."""
    return re.sub(r"[A-Za-z0-9]*[0-9][A-Za-z0-9]*", "#", path.lstrip("/"))


def _own(full: str, context: tuple[int, int, int]) -> None:
    """What a process makes is its user's (the file system process is root; Postgres checks who owns its
    files)."""
    uid, gid, _ = context
    if (uid, gid) != (0, 0):
        os.lchown(full, uid, gid)


def _remove(full: str) -> None:
    if os.path.isdir(full) and not os.path.islink(full):
        shutil.rmtree(full)
    else:
        os.unlink(full)


def _drop(fd: int, state: _Unsynced) -> int:
    """A whole loss of a file's unsynced writes: every one undone. Returns the size left."""
    for offset, data, _ in reversed(state.undo):
        os.pwrite(fd, data, offset)
    os.ftruncate(fd, state.synced_size)
    return state.synced_size


def _tear(fd: int, state: _Unsynced, rng: random.Random) -> int:
    """A torn loss of a file's unsynced writes: it ends at one of the sizes it had since its sync; each
    sector a write replaced below the synced size keeps the new bytes or gets the old back (a truncation's
    bytes come back all or none); a sector past the synced size may read as zeros. Returns the size."""
    size = rng.choice([state.synced_size, *state.sizes])
    for offset, data, truncation in reversed(state.undo):
        if truncation:
            if rng.random() < 0.5:
                os.pwrite(fd, data, offset)
            continue
        first = offset - offset % SECTOR
        for start in range(first, offset + len(data), SECTOR):
            lo, hi = max(start, offset), min(start + SECTOR, offset + len(data))
            if rng.random() < 0.5:
                os.pwrite(fd, data[lo - offset : hi - offset], lo)
    os.ftruncate(fd, size)
    first = -(-state.synced_size // SECTOR) * SECTOR  # the first sector wholly past the synced size
    for start in range(first, size, SECTOR):
        if rng.random() < 0.1:
            os.pwrite(fd, bytes(min(SECTOR, size - start)), start)
    return size


def _serve(backing: Path, mountpoint: Path, control: Path) -> None:
    from fuse import FUSE, FuseOSError, Operations, fuse_get_context

    class Lazy(Operations):  # type: ignore[misc]
        use_ns = True

        def __init__(self) -> None:
            self.root = str(backing)
            self.mutex = threading.Lock()  # not "lock": that name is a FUSE operation
            self.unsynced: dict[str, _Unsynced] = {}  # by path in the mount ("/a/b")
            self.pending: list[_Pending] = []  # renames and unlinks not yet durable, in order
            self.trash = str(backing) + ".trash"  # beside the backing directory: same file system
            shutil.rmtree(self.trash, ignore_errors=True)
            os.makedirs(self.trash)
            self.trashed = 0
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
                state.undo.append((start, os.pread(fd, end - start, start), False))

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
                    _own(full, fuse_get_context())
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
                written = os.pwrite(fi.fh, data, offset)
                state.sizes.append(os.fstat(fi.fh).st_size)
                return written

        def _truncate(self, path: str, fd: int, length: int) -> None:
            state = self._file(path, fd)
            end = min(os.fstat(fd).st_size, state.synced_size)
            if length < end:
                state.undo.append((length, os.pread(fd, end - length, length), True))
            os.ftruncate(fd, length)
            state.sizes.append(length)

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
                self._durable(lambda op: op.kind == "rename" and op.new == path)
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
                directory = path.rstrip("/") or "/"
                for op in self.pending:
                    op.dirs.discard(directory)
                self._durable(lambda op: not op.dirs)
                self.syncs += 1

        def _to_trash(self, full: str) -> str:
            self.trashed += 1
            place = os.path.join(self.trash, str(self.trashed))
            os.rename(full, place)
            return place

        def _durable(self, which: Any) -> None:
            """The pending operations ``which`` picks are durable now: their trash goes."""
            kept = []
            for op in self.pending:
                if which(op):
                    if op.trash is not None:
                        os.unlink(op.trash)
                else:
                    kept.append(op)
            self.pending = kept
            if len(self.pending) > _TRASH_LIMIT:
                self._durable(lambda op: op is self.pending[0])

        def rename(self, old: str, new: str) -> None:
            with self.mutex:
                full_new = self._full(new)
                op = _Pending("rename", old, new, {os.path.dirname(old), os.path.dirname(new)})
                if os.path.lexists(full_new) and not os.path.isdir(full_new):
                    op.trash = self._to_trash(full_new)  # the file it replaces, back at a torn loss
                    op.trash_state = self.unsynced.pop(new, None)
                os.rename(self._full(old), full_new)
                self.unsynced.pop(new, None)
                for name in [n for n in self.unsynced if n == old or n.startswith(old + "/")]:
                    state = self.unsynced.pop(name)
                    op.moved.append((name, new + name[len(old) :], state.created))
                    state.created = False  # durable with the rename (a whole loss keeps every rename)
                    self.unsynced[new + name[len(old) :]] = state
                self.pending.append(op)

        def unlink(self, path: str) -> None:
            with self.mutex:
                state = self.unsynced.pop(path, None)
                if state is not None and state.created:  # its name was never durable: nothing to undo
                    os.unlink(self._full(path))
                    return
                op = _Pending("unlink", path, None, {os.path.dirname(path)})
                op.trash, op.trash_state = self._to_trash(self._full(path)), state
                self.pending.append(op)

        def rmdir(self, path: str) -> None:
            with self.mutex:
                os.rmdir(self._full(path))

        def mkdir(self, path: str, mode: int) -> None:
            os.mkdir(self._full(path), mode)
            _own(self._full(path), fuse_get_context())

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

        def _undo(self, op: _Pending) -> None:
            """Take a rename or unlink back, as a journal that never held it would."""
            if op.kind == "rename" and op.new is not None and os.path.lexists(self._full(op.new)):
                # (gone: removed by an rmdir since, which is durable at once)
                if os.path.lexists(self._full(op.old)):  # made there since: its name was not durable
                    _remove(self._full(op.old))
                    self.unsynced.pop(op.old, None)
                os.makedirs(os.path.dirname(self._full(op.old)), exist_ok=True)
                os.rename(self._full(op.new), self._full(op.old))
                for old, new, created in op.moved:
                    state = self.unsynced.pop(new, None)
                    if state is not None:
                        state.created = created
                        self.unsynced[old] = state
            if op.trash is not None:
                if os.path.lexists(self._full(op.new or op.old)):
                    _remove(self._full(op.new or op.old))
                os.makedirs(os.path.dirname(self._full(op.new or op.old)), exist_ok=True)
                os.rename(op.trash, self._full(op.new or op.old))
                self.unsynced.pop(op.new or op.old, None)
                if op.trash_state is not None:
                    self.unsynced[op.new or op.old] = op.trash_state

        def lose(self, torn: bool = False, seed: int = 0, journal: int | None = None) -> dict[str, Any]:
            files = removed = cut = 0
            kinds: set[str] = set()  # what was lost, as path patterns (_pattern)
            rng = random.Random(seed)
            with self.mutex:
                kept = len(self.pending) if not torn else journal
                if kept is None:
                    kept = rng.randint(0, len(self.pending))
                undone = self.pending[kept:]
                for op in reversed(undone):
                    self._undo(op)
                    kinds.add(_pattern(op.new or op.old) + f" ({op.kind} undone)")
                self.pending = self.pending[:kept]
                self._durable(lambda op: True)
                for path, state in self.unsynced.items():
                    full = self._full(path)
                    if not os.path.lexists(full):
                        continue
                    if state.created and not (torn and rng.random() < 0.5):
                        os.unlink(full)
                        removed += 1
                        kinds.add(_pattern(path) + " (gone)")
                        continue
                    fd = os.open(full, os.O_RDWR)
                    try:
                        size = os.fstat(fd).st_size
                        end = _tear(fd, state, rng) if torn else _drop(fd, state)
                        cut += max(0, size - end)
                    finally:
                        os.close(fd)
                    files += 1
                    kinds.add(_pattern(path) + (" (torn)" if torn else ""))
                self.unsynced.clear()
                self.losses += 1
            return {
                "files": files,
                "removed": removed,
                "bytes": cut,
                "undone": len(undone),
                "names": sorted(kinds),
            }

        def stats(self) -> dict[str, Any]:
            with self.mutex:
                return {"unsynced": sorted(self.unsynced), "syncs": self.syncs, "losses": self.losses}

    fs = Lazy()

    def answer(conn: socket.socket) -> None:
        with conn:
            command = conn.makefile("rb").readline().decode().strip()
            try:
                words = command.split()
                result = (
                    fs.lose() if words == ["lose"]
                    else fs.lose(True, int(words[2]), int(words[3]) if len(words) > 3 else None)
                    if words[:2] == ["lose", "torn"] and len(words) in (3, 4)
                    else fs.stats() if words == ["stats"]
                    else None
                )  # fmt: skip
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
        allow_other=True,  # root mounts it; Postgres runs as its own user
    )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        _serve(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
