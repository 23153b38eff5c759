"""File names and low-level file access of the local log (``app.stores.log.local.files``).

* Names: a segment's files are named by its base offset in 20 digits, and only such names parse back to
  an offset; partition directories are ``<topic id>-<partition>`` and nothing else (the transaction log,
  hidden and half-deleted directories) parses as one.
* ``open_rw`` creates without truncating and never appends: a positioned write lands where it is told.
* ``write_atomic`` replaces a file whole, leaves no temp file, and concurrent writers never mix contents.
* ``BlockFile``: positioned reads and writes on real files (pread/pwritev: the file position is never
  moved) and on in-memory files, with the same answers on both; writes of more buffers than one
  ``pwritev`` takes; short reads at the end of the file.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.stores.log.local import files
from app.stores.log.local.files import BlockFile
from tests.stores.log.conftest import open_local


class TestNames:
    def test_a_segments_files_are_named_by_its_base_offset_in_twenty_digits(self, tmp_path: Path) -> None:
        assert files.filename_prefix(0) == "0" * 20
        assert files.filename_prefix(1_048_576) == "00000000000001048576"
        assert files.log_file(tmp_path, 42) == tmp_path / "00000000000000000042.log"
        assert files.index_file(tmp_path, 42) == tmp_path / "00000000000000000042.index"
        assert files.time_index_file(tmp_path, 42) == tmp_path / "00000000000000000042.timeindex"

    @pytest.mark.parametrize("offset", [0, 1, 41, 1_048_576, 10**19 - 1])
    def test_every_segment_file_name_parses_back_to_its_base_offset(
        self, tmp_path: Path, offset: int
    ) -> None:
        for path in (
            files.log_file(tmp_path, offset),
            files.index_file(tmp_path, offset),
            files.time_index_file(tmp_path, offset),
        ):
            assert files.offset_from_name(path.name) == offset
        # Transient suffixes keep the base offset too (the loader names what it removes by it).
        assert files.offset_from_name(files.filename_prefix(offset) + ".log" + files.DELETED_SUFFIX) == offset

    @pytest.mark.parametrize(
        "name",
        [
            "42.log",  # not padded
            "000000000000000000042.log",  # 21 digits
            "0000000000000000004x.log",
            "+0000000000000000042.log",
            " 0000000000000000042.log",
            "partition.metadata",
            files.RECOVERY_POINT_CHECKPOINT,
            files.CLEAN_SHUTDOWN,
            "",
        ],
    )
    def test_a_name_that_is_not_twenty_digits_and_a_suffix_has_no_offset(self, name: str) -> None:
        assert files.offset_from_name(name) is None

    @pytest.mark.parametrize(
        ("topic_id", "partition"), [("top_abc", 0), ("top_abc", 17), ("a-b-c", 3), ("__usage", 0)]
    )
    def test_a_partition_directory_name_parses_back_to_its_topic_and_partition(
        self, topic_id: str, partition: int
    ) -> None:
        name = files.partition_dir_name(topic_id, partition)
        assert name == f"{topic_id}-{partition}"
        assert files.parse_partition_dir(name) == (topic_id, partition)

    @pytest.mark.parametrize(
        "name",
        [
            files.TXN_DIR,
            ".deleting-top_abc-0-1f2e",
            ".top_abc-0.tmp",
            ".hidden-0",
            "nodash",
            "-3",
            "top_abc-",
            "top_abc-x",
            "top_abc-1.5",
            files.RECOVERY_POINT_CHECKPOINT,
        ],
    )
    def test_nothing_but_a_partition_directory_parses_as_one(self, name: str) -> None:
        assert files.parse_partition_dir(name) is None

    def test_a_name_with_a_superscript_digit_is_not_a_partition_directory_nor_a_segment(self) -> None:
        assert files.parse_partition_dir("notes-²") is None
        assert files.offset_from_name("²" * 20 + ".log") is None

    async def test_a_stray_file_with_a_superscript_digit_in_the_data_directory_does_not_stop_a_start(
        self, tmp_path: Path
    ) -> None:
        tmp_path.mkdir(exist_ok=True)
        (tmp_path / "notes-²").write_text("an operator's note")
        engine = await open_local(tmp_path)
        await engine.close()


class TestOpenRw:
    def test_it_creates_a_missing_file(self, tmp_path: Path) -> None:
        path = tmp_path / "new.log"
        with files.open_rw(path) as f:
            assert f.readable() and f.writable()
        assert path.exists() and path.read_bytes() == b""

    def test_it_keeps_what_an_existing_file_holds(self, tmp_path: Path) -> None:
        path = tmp_path / "old.log"
        path.write_bytes(b"kept bytes")
        with files.open_rw(path) as f:
            assert f.read() == b"kept bytes"
        assert path.read_bytes() == b"kept bytes"

    def test_a_positioned_write_lands_at_its_position_not_at_the_end(self, tmp_path: Path) -> None:
        path = tmp_path / "segment.log"
        path.write_bytes(b"0123456789")
        with files.open_rw(path) as f:
            os.pwrite(f.fileno(), b"AB", 2)
            f.seek(0)
            f.write(b"Z")
        assert path.read_bytes() == b"Z1AB456789"

    def test_its_descriptor_is_not_inherited_by_child_processes(self, tmp_path: Path) -> None:
        with files.open_rw(tmp_path / "f") as f:
            assert os.get_inheritable(f.fileno()) is False


class TestWriteAtomic:
    def test_it_replaces_the_whole_file_and_leaves_no_temp_file(self, tmp_path: Path) -> None:
        path = tmp_path / files.RECOVERY_POINT_CHECKPOINT
        path.write_bytes(b"an old and much longer content than the new one")
        files.write_atomic(path, b"new")
        assert path.read_bytes() == b"new"
        assert sorted(p.name for p in tmp_path.iterdir()) == [files.RECOVERY_POINT_CHECKPOINT]

    def test_it_creates_a_missing_file(self, tmp_path: Path) -> None:
        path = tmp_path / files.PARTITION_METADATA
        files.write_atomic(path, b"{}")
        assert path.read_bytes() == b"{}"

    def test_concurrent_writers_of_one_file_never_mix_their_contents(self, tmp_path: Path) -> None:
        path = tmp_path / "checkpoint"
        contents = [bytes([65 + i]) * (4096 * (i + 1)) for i in range(8)]
        errors: list[BaseException] = []

        def write(data: bytes) -> None:
            try:
                for _ in range(20):
                    files.write_atomic(path, data)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(data,)) for data in contents]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert path.read_bytes() in contents
        assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]

    def test_a_write_into_a_missing_directory_fails_and_leaves_nothing(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            files.write_atomic(tmp_path / "gone" / "checkpoint", b"x")
        assert list(tmp_path.iterdir()) == []


class TestFsyncDir:
    def test_a_directory_is_synced(self, tmp_path: Path) -> None:
        files.fsync_dir(tmp_path)  # raises if the directory cannot be opened or synced

    def test_a_missing_directory_is_an_error_not_a_silent_success(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            files.fsync_dir(tmp_path / "missing")


@pytest.fixture(params=["real file", "in memory"])
def block(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlockFile]:
    """A BlockFile over a real file (pread/pwritev) or over ``io.BytesIO`` (seek and read under a lock)."""
    raw = files.open_rw(tmp_path / "block.log") if request.param == "real file" else io.BytesIO()
    block = BlockFile(raw)  # type: ignore[arg-type]
    yield block
    block.close()


class TestBlockFile:
    def test_buffers_are_written_back_to_back_at_the_position(self, block: BlockFile) -> None:
        assert block.write(0, [b"head", b"-", b"body"]) == 9
        assert block.write(4, [b"+"]) == 1
        assert block.size() == 9
        assert block.read(0, 9) == b"head+body"
        assert block.read(5, 2) == b"bo"

    def test_a_read_past_the_end_is_short_and_a_read_of_nothing_is_empty(self, block: BlockFile) -> None:
        block.write(0, [b"0123456789"])
        assert block.read(6, 100) == b"6789"
        assert block.read(10, 5) == b""
        assert block.read(50, 5) == b""
        assert block.read(3, 0) == b""
        assert block.read(3, -1) == b""

    def test_a_write_past_the_end_leaves_zeros_in_the_gap(self, block: BlockFile) -> None:
        block.write(0, [b"ab"])
        block.write(6, [b"cd"])
        assert block.size() == 8
        assert block.read(0, 8) == b"ab\0\0\0\0cd"

    def test_more_buffers_than_one_pwritev_takes_are_all_written_in_order(self, block: BlockFile) -> None:
        buffers = [f"{i:05d}".encode() for i in range(2500)]  # IOV_MAX is 1024: three calls
        assert block.write(3, buffers) == 5 * 2500
        assert block.read(3, 5 * 2500) == b"".join(buffers)
        assert block.read(3 + 5 * 1024, 5) == b"01024"

    def test_truncate_cuts_the_file(self, block: BlockFile) -> None:
        block.write(0, [b"0123456789"])
        block.truncate(4)
        assert block.size() == 4
        assert block.read(0, 10) == b"0123"

    def test_sync_and_a_second_close_do_not_fail(self, block: BlockFile) -> None:
        block.write(0, [b"x"])
        block.sync()
        block.close()
        block.close()
        assert block.file.closed

    def test_reads_and_writes_never_move_a_real_files_position(self, tmp_path: Path) -> None:
        raw = files.open_rw(tmp_path / "f")
        block = BlockFile(raw)
        try:
            block.write(0, [b"0123456789"])
            block.read(4, 3)
            block.truncate(8)
            assert raw.tell() == 0
            # The file's own position is the caller's: a write through it goes where it says.
            raw.seek(2)
            raw.write(b"x")
            assert block.read(0, 8) == b"01x34567"
        finally:
            block.close()

    def test_a_reader_thread_and_a_writer_thread_never_see_each_others_positions(
        self, block: BlockFile
    ) -> None:
        block.write(0, [b"R" * 4096])
        seen: list[bytes] = []
        errors: list[BaseException] = []

        def read() -> None:
            try:
                for _ in range(2000):
                    seen.append(block.read(0, 4096))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        def write() -> None:
            try:
                for i in range(2000):
                    block.write(4096 + 16 * i, [b"W" * 16])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=read), threading.Thread(target=write)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert set(seen) == {b"R" * 4096}
        assert block.read(4096, 16 * 2000) == b"W" * 16 * 2000

    def test_a_real_file_and_an_in_memory_file_answer_alike(self, tmp_path: Path) -> None:
        real = BlockFile(files.open_rw(tmp_path / "f"))
        memory = BlockFile(io.BytesIO())
        try:
            for block in (real, memory):
                block.write(0, [b"abc", b"def"])
                block.write(2, [b"XY"])
                block.truncate(5)
                block.write(7, [b"!"])
            assert real.size() == memory.size() == 8
            assert real.read(0, 100) == memory.read(0, 100) == b"abXYe\0\0!"
        finally:
            real.close()
            memory.close()
