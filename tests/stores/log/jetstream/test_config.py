"""The JetStream engine's frozen config (``config``) and how the app builds it from the settings (``main``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app.main import build_log_engine
from app.settings import JetStreamSettings, LogEngineKind, Settings
from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine


class TestBuiltFromSettings:
    def test_every_knob_of_the_settings_reaches_the_engine(self, tmp_path: Path) -> None:
        knobs = JetStreamSettings(
            default_replicas=5,
            request_timeout_seconds=1.5,
            recover_after_seconds=7.0,
            recovery_interval_seconds=0.25,
            duplicate_window_seconds=120.0,
            zone_tag="rack",
        )
        settings = Settings(
            data_dir=tmp_path,
            log_engine=LogEngineKind.jetstream,
            nats_url="nats://127.0.0.1:1, nats://127.0.0.1:2",
            jetstream=knobs,
        )
        engine = build_log_engine(settings)  # not started: nothing is dialled
        assert isinstance(engine, JetStreamLogEngine)
        assert engine.config == JetStreamConfig(
            servers=("nats://127.0.0.1:1", "nats://127.0.0.1:2"), **knobs.model_dump()
        )
        assert engine.config.default_replicas == 5 and engine.config.duplicate_window_seconds == 120.0

    def test_the_config_and_the_settings_name_the_same_knobs(self) -> None:
        # A knob added to one and not the other would be refused at start (or never settable).
        # ``servers`` and ``link`` come from top-level settings (QUEUECORE_NATS_URL, QUEUECORE_NATS_*).
        config = {f.name for f in dataclasses.fields(JetStreamConfig)} - {"servers", "link"}
        assert config == set(JetStreamSettings.model_fields)

    def test_defaults_agree(self) -> None:
        defaults = dataclasses.asdict(JetStreamConfig(servers=()))
        del defaults["servers"], defaults["link"]
        assert defaults == JetStreamSettings().model_dump()
