"""``app.backups``: the manifest, and what restore refuses before writing anything (a damaged backup, one
of another engine or database, a target that has data). The whole drill against real servers is
``tests/system/test_backup_drill.py``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from app import backups
from app.stores.log.local import LocalLogEngine
from app.stores.log.protocol import RecordIn, TopicLogConfig


def _url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture
async def backup_dir(tmp_path: Path) -> Path:
    with sqlite3.connect(tmp_path / "source.db") as db:
        db.execute("create table projects (id text primary key)")
        db.execute("insert into projects values ('prj_1')")
    engine = LocalLogEngine(tmp_path / "log")
    await engine.start()
    await engine.create_topic("top_a", 2, TopicLogConfig())
    await engine.append("top_a", {0: [RecordIn(b"a"), RecordIn(b"b")], 1: [RecordIn(b"c")]})
    await engine.close()
    await backups.backup(
        tmp_path / "backup", _url(tmp_path / "source.db"), LocalLogEngine(tmp_path / "log"), "local"
    )
    return tmp_path / "backup"


class TestBackup:
    async def test_writes_a_manifest_with_extents_and_checksums(self, backup_dir: Path):
        manifest = json.loads((backup_dir / "manifest.json").read_text())
        assert manifest["version"] == 1 and manifest["engine"] == "local" and manifest["database"] == "sqlite"
        assert manifest["partitions"] == [
            {"topic_id": "top_a", "partition": 0, "first_offset": 0, "end_offset": 2},
            {"topic_id": "top_a", "partition": 1, "first_offset": 0, "end_offset": 1},
        ]
        assert "metadata/metadata.db" in manifest["files"]
        assert any(name.startswith("logs/") for name in manifest["files"])

    async def test_refuses_a_directory_that_is_not_empty(self, backup_dir: Path, tmp_path: Path):
        with pytest.raises(backups.BackupError, match="not empty"):
            await backups.backup(
                backup_dir, _url(tmp_path / "source.db"), LocalLogEngine(tmp_path / "log"), "local"
            )


class TestRestore:
    async def test_restores_metadata_then_logs(self, backup_dir: Path, tmp_path: Path):
        target = tmp_path / "new"
        await backups.restore(
            backup_dir, _url(target / "metadata.db"), LocalLogEngine(target / "log"), "local"
        )
        with sqlite3.connect(target / "metadata.db") as db:
            assert db.execute("select id from projects").fetchall() == [("prj_1",)]
        engine = LocalLogEngine(target / "log")
        await engine.start()
        try:
            assert [r.value for r in await engine.read("top_a", 0, 0)] == [b"a", b"b"]
        finally:
            await engine.close()

    async def test_refuses_a_damaged_backup_before_writing(self, backup_dir: Path, tmp_path: Path):
        segment = next((backup_dir / "logs").rglob("*.log"))
        segment.write_bytes(segment.read_bytes()[:-1] + b"\0")
        target = tmp_path / "new"
        with pytest.raises(backups.BackupError, match="damaged"):
            await backups.restore(
                backup_dir, _url(target / "metadata.db"), LocalLogEngine(target / "log"), "local"
            )
        assert not (target / "metadata.db").exists()

    async def test_refuses_another_engine_or_database(self, backup_dir: Path, tmp_path: Path):
        with pytest.raises(backups.BackupError, match="jetstream"):
            await backups.restore(
                backup_dir, _url(tmp_path / "n.db"), LocalLogEngine(tmp_path / "l"), "jetstream"
            )
        with pytest.raises(backups.BackupError, match="postgresql"):
            url = "postgresql+asyncpg://postgres@127.0.0.1:5432/nowhere"
            await backups.restore(backup_dir, url, LocalLogEngine(tmp_path / "l"), "local")

    async def test_refuses_a_database_that_has_tables(self, backup_dir: Path, tmp_path: Path):
        with pytest.raises(backups.BackupError, match="not empty"):
            await backups.restore(
                backup_dir, _url(tmp_path / "source.db"), LocalLogEngine(tmp_path / "l"), "local"
            )

    async def test_refuses_a_directory_without_a_manifest(self, tmp_path: Path):
        with pytest.raises(backups.BackupError, match="manifest"):
            await backups.restore(tmp_path, _url(tmp_path / "n.db"), LocalLogEngine(tmp_path / "l"), "local")
