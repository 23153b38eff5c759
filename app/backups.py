"""Backups and restore (``queuecore-server backup DIR`` / ``restore DIR``): metadata and logs at one
consistent point.

Beside ``cli`` at the process level: it composes the stores (the metadata database and the log engine,
built from the same settings as ``serve``) and is no part of the broker. Engines take part through the
``LogEngine`` protocol (``export_logs`` / ``import_logs``); nothing here knows an engine's files.

The consistent point
    Logs only grow (retention aside, which only drops their oldest records), and the metadata points
    into them: committed offsets, leases, dead-letter rows name offsets that were committed in a log
    before the row was written. So a backup takes

    1. the metadata first, as one snapshot (SQLite: the online backup API, a consistent copy of the
       file while the server writes; Postgres: ``pg_dump --format=custom``, one transaction's
       snapshot);
    2. then the logs, every partition up to its end at the moment it is copied, which is later than
       the metadata snapshot.

    Every offset in the metadata copy therefore lies below its partition's end in the logs copy: a
    restored committed offset never points past a restored log end. Restore goes the same way: the
    metadata into the empty database, then the logs into the empty engine.

What a backup taken while the server serves guarantees
    * Every message whose publish was acknowledged before ``backup`` started is in it, at its offset,
      with its id, key, headers and data.
    * Projects, API keys (hashed and sealed as they are in the database), topics, groups, members,
      committed offsets, leases and dead letters are as of the metadata snapshot, taken first.
    * Messages published after that snapshot may or may not be in it. A group's committed offset is
      the snapshot's, so its consumers get again what they acknowledged after it: restore is
      at-least-once, never a loss of an acknowledged publish.

What it does not
    * It is not a point-in-time recovery: what happened after the backup is gone.
    * A topic created after the metadata snapshot has logs but no row (the next start removes such
      orphan logs on the local engine); a topic deleted during the backup comes back with its row but
      without its logs: do not delete topics while a backup runs.
    * Secrets are copied sealed, never opened or printed: the restored deployment needs the same
      ``QUEUECORE_SECRET_KEY`` (or, embedded, the ``secret_key`` file of the data directory, which
      the backup does not contain), and a backup is to be kept as carefully as the database itself.
    * Retention of backups (how many, where, for how long) is the operator's.
    * On JetStream (``stores/log/jetstream/snapshot.py``): a stream with deleted messages inside it is
      refused (``BackupUnsupported``; the backup is removed, not left half made); the transaction
      stream's pending commit records and the idempotency keys are not copied, so a multi-partition
      append in flight during the backup may be in it in part, and a publish retried across a restore
      may be stored twice. The restore goes into a cluster without those topics' streams.

The backup directory::

    DIR/manifest.json          written last: a backup without one is incomplete
    DIR/metadata/metadata.db   SQLite (the online backup API's copy)
    DIR/metadata/metadata.dump Postgres (pg_dump's custom format)
    DIR/logs/                  what the engine's export_logs wrote

The manifest (JSON)::

    {"version": 1, "created_at": "2026-…Z", "engine": "local", "database": "sqlite" | "postgresql",
     "partitions": [{"topic_id": "top_…", "partition": 0, "first_offset": 0, "end_offset": 42}, …],
     "files": {"metadata/metadata.db": "<sha256>", "logs/…": "<sha256>", …}}

``restore`` checks every checksum before it writes anything, refuses a database that has any table
(restore into a fresh one, then ``migrate`` brings an older backup's schema up to date) and a log
directory that is not empty; there is no ``--force``: wiping a deployment is a separate, deliberate step.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL, make_url

from app.stores.log.protocol import BackupUnsupported, LogEngine, PartitionExtent

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
METADATA_DIR = "metadata"
LOGS_DIR = "logs"
SQLITE_FILE = "metadata.db"
POSTGRES_FILE = "metadata.dump"


class BackupError(Exception):
    """A backup or restore refused or failed; the message says why (and never holds a secret)."""


@dataclass(frozen=True)
class Manifest:
    """What a backup holds (``manifest.json``)."""

    version: int
    created_at: str
    engine: str
    database: str
    partitions: list[dict[str, Any]]
    files: dict[str, str]

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST
        if not path.is_file():
            raise BackupError(f"{directory} holds no {MANIFEST}: not a backup, or an incomplete one")
        data = json.loads(path.read_text())
        if data.get("version") != MANIFEST_VERSION:
            raise BackupError(f"backup format version {data.get('version')} is not {MANIFEST_VERSION}")
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})

    def write(self, directory: Path) -> None:
        tmp = directory / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        tmp.rename(directory / MANIFEST)


# -- backup ----------------------------------------------------------------------------------------------------


async def backup(directory: Path, database_url: str, engine: LogEngine, engine_name: str) -> Manifest:
    """Metadata first, then logs (the module docstring); the manifest last. ``directory`` must be empty."""
    if directory.exists() and any(directory.iterdir()):
        raise BackupError(f"{directory} is not empty: a backup goes into a new directory")
    directory.mkdir(parents=True, exist_ok=True)
    url = make_url(database_url)
    (directory / METADATA_DIR).mkdir()
    if url.get_backend_name() == "sqlite":
        await asyncio.to_thread(_sqlite_backup, _sqlite_path(url), directory / METADATA_DIR / SQLITE_FILE)
    else:
        await asyncio.to_thread(_pg_dump, url, directory / METADATA_DIR / POSTGRES_FILE)
    try:
        extents = await engine.export_logs(directory / LOGS_DIR)
    except BackupUnsupported:
        # Leave no half backup behind: the directory is as it was given.
        shutil.rmtree(directory / METADATA_DIR, ignore_errors=True)
        shutil.rmtree(directory / LOGS_DIR, ignore_errors=True)
        raise
    manifest = Manifest(
        version=MANIFEST_VERSION,
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        engine=engine_name,
        database=_database_kind(url),
        partitions=[asdict(e) for e in extents],
        files=await asyncio.to_thread(_checksums, directory),
    )
    manifest.write(directory)
    return manifest


def _sqlite_backup(source: Path, target: Path) -> None:
    if not source.is_file():
        raise BackupError(f"no metadata database at {source}")
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)  # SQLite's online backup: one consistent copy while the server writes
    finally:
        dst.close()
        src.close()


def _pg_dump(url: URL, target: Path) -> None:
    _run(["pg_dump", "--format=custom", "--no-owner", "--no-acl", "--file", str(target)], url, "pg_dump")


# -- restore ---------------------------------------------------------------------------------------------------


async def restore(directory: Path, database_url: str, engine: LogEngine, engine_name: str) -> Manifest:
    """Check the backup, then metadata into the empty database, then logs into the empty engine."""
    manifest = Manifest.read(directory)
    if manifest.engine != engine_name:
        raise BackupError(
            f"the backup is of the {manifest.engine} engine, this deployment's is {engine_name}"
        )
    url = make_url(database_url)
    if manifest.database != _database_kind(url):
        raise BackupError(
            f"the backup's metadata is {manifest.database}, this deployment's is {_database_kind(url)}"
        )
    found = await asyncio.to_thread(_checksums, directory)
    bad = sorted(name for name, digest in manifest.files.items() if found.get(name) != digest)
    if bad:
        raise BackupError(f"the backup is damaged: {len(bad)} file(s) missing or altered, first {bad[0]}")
    if url.get_backend_name() == "sqlite":
        await asyncio.to_thread(_sqlite_restore, directory / METADATA_DIR / SQLITE_FILE, _sqlite_path(url))
    else:
        await asyncio.to_thread(_pg_restore, directory / METADATA_DIR / POSTGRES_FILE, url)
    try:
        extents = await engine.import_logs(directory / LOGS_DIR)
    except FileExistsError as exc:
        raise BackupError(f"{exc} (the metadata was restored already: start again from fresh ones)") from exc
    expected = sorted(PartitionExtent(**p) for p in manifest.partitions)
    if extents != expected:
        raise BackupError("the restored logs do not hold what the manifest lists")
    return manifest


def _sqlite_restore(source: Path, target: Path) -> None:
    if target.exists():
        with sqlite3.connect(f"file:{target}?mode=ro", uri=True) as db:
            tables = db.execute("select count(*) from sqlite_master where type = 'table'").fetchone()[0]
        if tables:
            raise BackupError(f"the metadata database {target} is not empty: restore into a fresh one")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".restoring")
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(tmp)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    for suffix in ("-wal", "-shm"):
        Path(str(target) + suffix).unlink(missing_ok=True)
    tmp.replace(target)


def _pg_restore(source: Path, url: URL) -> None:
    query = "select count(*) from pg_tables where schemaname not in ('pg_catalog', 'information_schema')"
    tables = _run(["psql", "--no-psqlrc", "--tuples-only", "--no-align", "--command", query], url, "psql")
    if tables.strip() != "0":
        raise BackupError(f"the metadata database {url.database} is not empty: restore into a fresh one")
    _run(
        ["pg_restore", "--no-owner", "--no-acl", "--exit-on-error", "--single-transaction", str(source)],
        url,
        "pg_restore",
    )


# -- helpers ---------------------------------------------------------------------------------------------------


def _database_kind(url: URL) -> str:
    return "sqlite" if url.get_backend_name() == "sqlite" else "postgresql"


def _sqlite_path(url: URL) -> Path:
    if not url.database or url.database == ":memory:":
        raise BackupError("an in-memory SQLite database cannot be backed up")
    return Path(url.database)


def _run(command: list[str], url: URL, tool: str) -> str:
    """Run a Postgres client tool against ``url``'s database; the password goes by environment only."""
    if shutil.which(command[0]) is None:
        raise BackupError(f"{tool} is not installed (Debian: apt-get install postgresql-client)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if url.host:
        env["PGHOST"] = url.host
    if url.port:
        env["PGPORT"] = str(url.port)
    if url.username:
        env["PGUSER"] = url.username
    if url.password:
        env["PGPASSWORD"] = str(url.password)
    sslmode = url.query.get("sslmode") or url.query.get("ssl")
    if isinstance(sslmode, str):
        env["PGSSLMODE"] = sslmode
    database = url.database or ""
    args = [*command, "--dbname", database]
    with tempfile.TemporaryFile() as errors:
        done = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=errors, check=False)
        if done.returncode != 0:
            errors.seek(0)
            # The tools name the database and the failing statement, never the password (not in argv).
            detail = errors.read().decode(errors="replace").strip().splitlines()
            raise BackupError(f"{tool} failed: {detail[-1] if detail else f'exit {done.returncode}'}")
    return done.stdout.decode()


def _checksums(directory: Path) -> dict[str, str]:
    """sha256 of every file of the backup but the manifest, by path relative to ``directory``."""
    found: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        name = path.relative_to(directory).as_posix()
        if path.is_file() and name not in (MANIFEST, MANIFEST + ".tmp"):
            digest = hashlib.sha256()
            with path.open("rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
            found[name] = digest.hexdigest()
    return found
