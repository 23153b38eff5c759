"""Copies of a live engine root, for backups (``LocalLogEngine.export_logs`` / ``import_logs``).

A copy is taken by a process other than the one serving (``queuecore-server backup``), from the files
alone, while that one appends, rolls, checkpoints and deletes segments. Every file it copies is read
to its end at the moment it is read: append-only files give a prefix of what they will hold. The order
of the copy is what makes the prefixes fit together (the protocol is ``committer``'s):

1. ``__txn/`` (the commit records of multi-partition appends), first. A multi-partition append is
   acknowledged only after its commit record is durable, and a partition's high-watermark - so every
   later append to that partition - waits for the transactions in front of it. So every append
   acknowledged before the copy began is committed in this copy of ``__txn``, and a transaction's batch
   without a commit record here has only unacknowledged appends after it: recovery may cut them.
2. The recovery-point checkpoint, second. The transaction log deletes commit records only after a
   checkpoint put their batches below the recovery points (``manager._checkpoint``): the checkpoint
   copied after ``__txn`` covers every commit record missing from that copy. Its recovery points are
   high-watermarks of that moment, so below what the segments copied next hold.
3. Each partition directory: ``partition.metadata`` and every ``.log`` segment, oldest first, each to
   its end as it is read (a sealed segment is whole; the active one ends at or past the high-watermark
   at that moment, perhaps in a torn batch). A segment retention deleted since the listing is skipped
   (it was the oldest: the copy then starts later, as the live log does). Indexes are not copied: they
   are rebuilt from the segments.

Then the copy is opened as an engine root (``LogManager.start``): leftovers are dropped, every partition
is recovered from its recovery point (a torn tail or a batch of an uncommitted transaction is cut, as
after a crash), indexes are rebuilt, and a clean close leaves a root a server starts from as it is.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from app.stores.log.local import files, log_dir

_CHUNK = 1 << 20


def copy_root(root: Path, dest: Path) -> None:
    """Copy the live engine root ``root`` into the empty directory ``dest`` in the order above."""
    dest.mkdir(parents=True, exist_ok=True)
    txn = root / files.TXN_DIR
    if txn.is_dir():
        (dest / files.TXN_DIR).mkdir()
        for entry in sorted(txn.iterdir()):
            if entry.is_file() and not entry.name.endswith(files.TMP_SUFFIX):
                _copy_prefix(entry, dest / files.TXN_DIR / entry.name)
    _copy_prefix(root / files.RECOVERY_POINT_CHECKPOINT, dest / files.RECOVERY_POINT_CHECKPOINT)
    for _, _, directory in log_dir.partition_dirs(root):
        target = dest / directory.name
        target.mkdir()
        _copy_prefix(directory / files.PARTITION_METADATA, target / files.PARTITION_METADATA)
        for entry in sorted(directory.iterdir()):
            if entry.name.endswith(files.LOG_SUFFIX) and files.offset_from_name(entry.name) is not None:
                _copy_prefix(entry, target / entry.name)
    _fsync_tree(dest)


def restore_root(src: Path, root: Path) -> None:
    """Copy a root written by ``copy_root`` (and recovered) into ``root``, which must hold no logs."""
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"the log directory {root} is not empty: restore into a fresh one")
    root.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, root, dirs_exist_ok=True)
    _fsync_tree(root)


def _copy_prefix(source: Path, target: Path) -> None:
    """Copy ``source`` as far as it goes now; nothing if it is gone (deleted since it was listed)."""
    try:
        fd = os.open(source, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        with open(target, "wb") as out:
            while chunk := os.read(fd, _CHUNK):
                out.write(chunk)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for directory, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
