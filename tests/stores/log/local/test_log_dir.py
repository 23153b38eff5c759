"""The engine root on disk (``app/stores/log/local/log_dir.py``): partition directories and their topic
config, the recovery-point checkpoint file, the clean-shutdown marker, crash leftovers, the disk probe."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.stores.log.local import files, log_dir
from app.stores.log.protocol import TopicLogConfig


class TestPartitionDirs:
    def test_created_with_their_config_and_listed_in_name_order(self, tmp_path: Path):
        config = TopicLogConfig(retention_ms=60_000, retention_bytes=1 << 20)
        made = [log_dir.create_partition_dir(tmp_path, "top_b", p, config) for p in (1, 0)]
        log_dir.create_partition_dir(tmp_path, "top_a", 0, TopicLogConfig())
        (tmp_path / "not-a-partition").mkdir()
        (tmp_path / "top_c-0").write_bytes(b"a file, not a directory")
        listed = log_dir.partition_dirs(tmp_path)
        assert [(t, p) for t, p, _ in listed] == [("top_a", 0), ("top_b", 0), ("top_b", 1)]
        assert sorted(made) == [d for t, _, d in listed if t == "top_b"]
        assert log_dir.read_topic_config(made[0]) == TopicLogConfig(
            retention_ms=60_000, retention_bytes=1 << 20
        )
        assert not list(tmp_path.glob(f".*{files.TMP_SUFFIX}"))  # made in a .tmp directory, then renamed

    def test_creating_an_existing_one_keeps_what_is_in_it(self, tmp_path: Path):
        directory = log_dir.create_partition_dir(tmp_path, "top_a", 0, TopicLogConfig(retention_ms=1))
        (directory / "00000000000000000000.log").write_bytes(b"records")
        again = log_dir.create_partition_dir(tmp_path, "top_a", 0, TopicLogConfig(retention_ms=2))
        assert again == directory
        assert (directory / "00000000000000000000.log").read_bytes() == b"records"
        assert log_dir.read_topic_config(directory).retention_ms == 1  # changed by write_topic_config only

    def test_a_config_written_again_is_read_back(self, tmp_path: Path):
        directory = log_dir.create_partition_dir(tmp_path, "top_a", 0, TopicLogConfig())
        log_dir.write_topic_config(directory, "top_a", 0, TopicLogConfig(retention_bytes=42))
        assert log_dir.read_topic_config(directory) == TopicLogConfig(retention_bytes=42)

    @pytest.mark.parametrize("content", [None, b"{not json", b"[1, 2]"])
    def test_a_missing_or_unreadable_config_keeps_data_forever(self, tmp_path: Path, content: bytes | None):
        if content is not None:
            (tmp_path / files.PARTITION_METADATA).write_bytes(content)
        assert log_dir.read_topic_config(tmp_path) == TopicLogConfig()

    def test_removing_a_topic_takes_its_loaded_and_its_leftover_directories_only(self, tmp_path: Path):
        loaded = log_dir.create_partition_dir(tmp_path, "top_a", 0, TopicLogConfig())
        leftover = log_dir.create_partition_dir(tmp_path, "top_a", 7, TopicLogConfig())
        other = log_dir.create_partition_dir(tmp_path, "top_ab", 0, TopicLogConfig())
        log_dir.remove_topic_dirs(tmp_path, "top_a", [loaded])
        assert not loaded.exists() and not leftover.exists()
        assert other.exists()
        assert sorted(e.name for e in tmp_path.iterdir()) == ["top_ab-0"]  # no .deleting- left either

    def test_leftovers_of_a_crash_are_cleared_and_nothing_else(self, tmp_path: Path):
        kept = log_dir.create_partition_dir(tmp_path, "top_a", 0, TopicLogConfig())
        (tmp_path / f"{files.DELETING_PREFIX}top_b-0-abcd").mkdir()
        (tmp_path / f".top_c-0{files.TMP_SUFFIX}").mkdir()
        (tmp_path / f".probe-1234{files.TMP_SUFFIX}").write_bytes(b"x")
        log_dir.clear_leftovers(tmp_path)
        assert [e.name for e in tmp_path.iterdir()] == [kept.name]


class TestCheckpoint:
    def test_round_trip(self, tmp_path: Path):
        path = tmp_path / files.RECOVERY_POINT_CHECKPOINT
        points = {("top_b", 1): 10, ("top_a", 0): 0, ("top_a", 12): 1 << 40}
        log_dir.write_checkpoint(path, points)
        assert log_dir.read_checkpoint(path) == points
        # Kafka's text format: a version line, a count line, then sorted "<topic> <partition> <offset>".
        assert path.read_text().splitlines() == ["0", "3", "top_a 0 0", f"top_a 12 {1 << 40}", "top_b 1 10"]

    def test_missing_is_empty(self, tmp_path: Path):
        assert log_dir.read_checkpoint(tmp_path / files.RECOVERY_POINT_CHECKPOINT) == {}

    @pytest.mark.parametrize("text", ["1\n1\ntop_a 0 5\n", "0\n2\ntop_a 0 5\n", "0\n"])
    def test_a_malformed_one_is_ignored(self, tmp_path: Path, text: str):
        path = tmp_path / files.RECOVERY_POINT_CHECKPOINT
        path.write_text(text)
        assert log_dir.read_checkpoint(path) == {}


class TestCleanMarker:
    def test_written_then_seen_then_removed(self, tmp_path: Path):
        assert not log_dir.was_clean(tmp_path)
        log_dir.write_clean_marker(tmp_path)
        assert log_dir.was_clean(tmp_path)
        log_dir.remove_clean_marker(tmp_path)
        assert not log_dir.was_clean(tmp_path)


class TestProbe:
    @pytest.mark.parametrize("durable", [False, True])
    def test_leaves_nothing_behind(self, tmp_path: Path, durable: bool):
        log_dir.probe(tmp_path, 4096, durable)
        assert list(tmp_path.iterdir()) == []

    def test_a_root_that_takes_no_writes_fails(self, tmp_path: Path):
        with pytest.raises(OSError):
            log_dir.probe(tmp_path / "gone", 2, False)
