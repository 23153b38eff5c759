"""The local engine's frozen config (``config``) and how the app builds it from the settings (``main``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app.main import build_log_engine
from app.settings import LogSettings, Settings
from app.stores.log.local import LocalLogConfig, LocalLogEngine


class TestBuiltFromSettings:
    def test_every_knob_of_the_settings_reaches_the_engine(self, tmp_path: Path) -> None:
        knobs = LogSettings(
            segment_bytes=123_456,
            segment_ms=654_321,
            index_interval_bytes=777,
            open_files=27,
            retention_check_interval_ms=4_242,
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
