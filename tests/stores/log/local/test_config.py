"""The local engine's frozen config (``config``) and how the app builds it from the settings (``main``)."""

from __future__ import annotations

import dataclasses
import resource
from pathlib import Path

from app.main import build_log_engine
from app.settings import LogSettings, Settings
from app.stores.log.local import LocalLogConfig, LocalLogEngine
from app.stores.log.local.config import MAX_DERIVED_OPEN_FILES
from app.stores.log.protocol import TopicLogConfig


class TestBuiltFromSettings:
    def test_every_knob_of_the_settings_reaches_the_engine(self, tmp_path: Path) -> None:
        knobs = LogSettings(
            segment_bytes=123_456,
            segment_ms=654_321,
            index_interval_bytes=777,
            open_files=27,
            zone="zone-b",
        )
        engine = build_log_engine(Settings(data_dir=tmp_path, log=knobs))
        assert isinstance(engine, LocalLogEngine)
        assert engine.root == tmp_path / "log"
        assert dataclasses.asdict(engine.config) == knobs.model_dump()

    def test_the_config_and_the_settings_name_the_same_knobs(self) -> None:
        # A knob added to one and not the other would be silently ignored (or never settable).
        assert {f.name for f in dataclasses.fields(LocalLogConfig)} == set(LogSettings.model_fields)

    def test_defaults_agree(self) -> None:
        assert dataclasses.asdict(LocalLogConfig()) == LogSettings().model_dump()


def test_an_engine_built_without_a_config_takes_the_defaults(tmp_path: Path) -> None:
    assert LocalLogEngine(tmp_path).config == LocalLogConfig()


class TestOpenFilesBudget:
    def test_unset_it_is_half_the_soft_limit_within_bounds(self) -> None:
        config = LocalLogConfig()
        assert config.open_files_budget(1024) == 512  # a stock Linux limit: 170 open segments
        assert config.open_files_budget(256) == 128
        assert config.open_files_budget(1 << 20) == MAX_DERIVED_OPEN_FILES
        assert config.open_files_budget(None) == MAX_DERIVED_OPEN_FILES  # unlimited
        assert config.open_files_budget(4) == 3  # one segment at least

    def test_set_it_wins(self) -> None:
        assert LocalLogConfig(open_files=90).open_files_budget(1024) == 90

    async def test_the_engine_takes_it_from_the_process_limit(self, tmp_path: Path) -> None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        engine = LocalLogEngine(tmp_path)
        expected = LocalLogConfig().open_files_budget(None if soft == resource.RLIM_INFINITY else soft)
        assert engine.manager.open_files == expected
        assert engine.manager.open_segments.capacity == expected // 3


class TestZone:
    """``zone``: where describe says the one copy of every partition is (Kafka's ``broker.rack``)."""

    async def test_the_configured_zone_is_the_copys(self, tmp_path: Path) -> None:
        engine = LocalLogEngine(tmp_path, LocalLogConfig(zone="zone-b"))
        await engine.start()
        try:
            await engine.create_topic("top_zoned", 2, TopicLogConfig())
            for info in await engine.describe_partitions("top_zoned", 2):
                assert [(r.zone, r.leader, r.current, r.lag) for r in info.replicas] == [
                    ("zone-b", True, True, 0)
                ]
        finally:
            await engine.close()

    async def test_an_empty_zone_is_none(self, tmp_path: Path) -> None:
        # QUEUECORE_LOG__ZONE set to nothing says no zone, as unset does.
        engine = build_log_engine(Settings(data_dir=tmp_path, log=LogSettings(zone="")))
        await engine.start()
        try:
            await engine.create_topic("top_unzoned", 1, TopicLogConfig())
            assert (await engine.partition_info("top_unzoned", 0)).replicas[0].zone is None
        finally:
            await engine.close()
