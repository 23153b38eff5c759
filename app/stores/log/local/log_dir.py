"""The engine root on disk, as the ``LogManager`` sees it (Kafka's log-dir handling in ``LogManager``).

Owns the blocking file work on ``<root>`` itself (the layout is in ``files``), run in the manager's
worker threads:

* partition directories: listing them at start, creating one (``partition.metadata`` written into a
  ``.tmp`` directory, then renamed; the caller fsyncs the root once for all it created), removing a
  topic's (renamed to ``.deleting-…`` first, so a crash mid-removal leaves a name the next start
  removes), and the topic config in ``partition.metadata`` (JSON) - a restart needs nothing else;
* the recovery-point checkpoint (Kafka's text format: a version line, a count line, then
  ``<topic_id> <partition> <offset>`` lines), written atomically;
* the ``.clean_shutdown`` marker: written after a clean close's final checkpoint, removed once a start
  has loaded everything, so that a crash after that start is recognised as one;
* leftovers of a crash (``.deleting-…`` directories, ``.…tmp`` entries), removed at start;
* the disk probe: a file created, written, optionally fdatasync'd and removed - whether the disk takes
  writes (health, and the recovery after a failed write).

Nothing here holds state: the manager owns the partitions, this module only their directories.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from app.stores.log.local import files
from app.stores.log.protocol import TopicLogConfig

logger = logging.getLogger("queuecore.log")


# -- partition directories ---------------------------------------------------------------------------------


def clear_leftovers(root: Path) -> None:
    """Remove what a crash can leave in the root: topics half deleted, directories and files half made."""
    for entry in root.iterdir():
        if entry.name.startswith(files.DELETING_PREFIX) or (
            entry.name.startswith(".") and entry.name.endswith(files.TMP_SUFFIX)
        ):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)


def partition_dirs(root: Path) -> list[tuple[str, int, Path]]:
    """``(topic_id, partition, directory)`` of every partition directory in the root, by name."""
    found: list[tuple[str, int, Path]] = []
    for entry in sorted(root.iterdir()):
        parsed = files.parse_partition_dir(entry.name)
        if parsed is not None and entry.is_dir():
            found.append((parsed[0], parsed[1], entry))
    return found


def create_partition_dir(root: Path, topic_id: str, partition: int, config: TopicLogConfig) -> Path:
    """The partition's directory, made with its config if missing; the caller fsyncs ``root``."""
    name = files.partition_dir_name(topic_id, partition)
    final = root / name
    if not final.exists():
        tmp = root / f".{name}{files.TMP_SUFFIX}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        write_topic_config(tmp, topic_id, partition, config)
        os.rename(tmp, final)
    return final


def remove_topic_dirs(root: Path, topic_id: str, directories: Iterable[Path]) -> None:
    """Remove ``directories`` and any other directory of ``topic_id`` (left over from a crash)."""
    doomed = list(directories)
    for entry in root.iterdir():
        parsed = files.parse_partition_dir(entry.name)
        if parsed is not None and parsed[0] == topic_id and entry not in doomed:
            doomed.append(entry)
    for directory in doomed:
        trash = root / f"{files.DELETING_PREFIX}{directory.name}-{secrets.token_hex(4)}"
        try:
            os.rename(directory, trash)
        except FileNotFoundError:
            continue
        shutil.rmtree(trash, ignore_errors=True)
    files.fsync_dir(root)


# -- topic config ----------------------------------------------------------------------------------------------


def read_topic_config(directory: Path) -> TopicLogConfig:
    """The topic config kept in a partition directory; none (keep forever) if it cannot be read."""
    path = directory / files.PARTITION_METADATA
    try:
        data = json.loads(path.read_bytes())
        return TopicLogConfig(
            retention_ms=data.get("retention_ms"), retention_bytes=data.get("retention_bytes")
        )
    except (OSError, ValueError, AttributeError):
        logger.warning("%s is missing or unreadable; the partition keeps data forever until configured", path)
        return TopicLogConfig()


def write_topic_config(directory: Path, topic_id: str, partition: int, config: TopicLogConfig) -> None:
    """Replace the partition directory's ``partition.metadata`` atomically."""
    data = {
        "version": 1,
        "topic_id": topic_id,
        "partition": partition,
        "retention_ms": config.retention_ms,
        "retention_bytes": config.retention_bytes,
    }
    files.write_atomic(directory / files.PARTITION_METADATA, json.dumps(data).encode())


# -- recovery-point checkpoint and clean-shutdown marker -----------------------------------------------------


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``{(topic_id, partition): recovery_point}`` from a recovery-point checkpoint file (Kafka's text
    format: a version line, a count line, then ``<topic_id> <partition> <offset>`` lines)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    if len(lines) < 2 or lines[0].strip() != "0" or int(lines[1]) != len(lines) - 2:
        logger.warning("ignoring malformed checkpoint %s", path)
        return {}
    points: dict[tuple[str, int], int] = {}
    for line in lines[2:]:
        topic_id, partition, offset = line.split()
        points[(topic_id, int(partition))] = int(offset)
    return points


def write_checkpoint(path: Path, points: Mapping[tuple[str, int], int]) -> None:
    """Replace the recovery-point checkpoint file atomically."""
    lines = ["0", str(len(points))] + [f"{t} {p} {o}" for (t, p), o in sorted(points.items())]
    files.write_atomic(path, ("\n".join(lines) + "\n").encode())


def was_clean(root: Path) -> bool:
    """Whether the last run closed cleanly (its marker is there)."""
    return (root / files.CLEAN_SHUTDOWN).exists()


def remove_clean_marker(root: Path) -> None:
    """Forget the last clean close, durably: from now on a stop is a crash until ``write_clean_marker``."""
    (root / files.CLEAN_SHUTDOWN).unlink()
    files.fsync_dir(root)


def write_clean_marker(root: Path) -> None:
    """Mark a clean close (after its final checkpoint)."""
    files.write_atomic(root / files.CLEAN_SHUTDOWN, b'{"version": 1}\n')


# -- the disk probe ------------------------------------------------------------------------------------------------


def probe(root: Path, size: int, durable: bool) -> None:
    """Create, write ``size`` bytes to (and fdatasync if ``durable``), and remove a file in the root."""
    path = root / f".probe-{secrets.token_hex(4)}{files.TMP_SUFFIX}"
    try:
        with open(path, "wb") as f:
            f.write(b"\0" * size)
            f.flush()
            if durable:
                os.fdatasync(f.fileno())
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
