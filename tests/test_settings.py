"""The one settings object: production refuses placeholder secrets; embedded keeps a generated one."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Environment, Settings


class TestSecret:
    @pytest.mark.parametrize("secret", ["", "changeme", "short-secret"])
    def test_production_refuses_placeholder(self, tmp_path, secret):
        with pytest.raises(ValidationError, match="QUEUECORE_SECRET_KEY"):
            Settings(environment=Environment.production, data_dir=tmp_path, secret_key=secret)

    def test_production_accepts_real_secret(self, tmp_path):
        settings = Settings(
            environment=Environment.production, data_dir=tmp_path, secret_key="k" * 40, metrics_token="m" * 20
        )
        assert settings.server_secret() == b"k" * 40

    @pytest.mark.parametrize("token", ["", "changeme", "short"])
    def test_production_refuses_to_serve_metrics_to_anyone(self, tmp_path, token):
        # /metrics lists every environment's topics, groups and lag: production needs its token.
        with pytest.raises(ValidationError, match="QUEUECORE_METRICS_TOKEN"):
            Settings(
                environment=Environment.production,
                data_dir=tmp_path,
                secret_key="k" * 40,
                metrics_token=token,
            )

    def test_embedded_generates_and_keeps_secret(self, tmp_path):
        first = Settings(data_dir=tmp_path).server_secret()
        assert len(first) >= 32
        assert Settings(data_dir=tmp_path).server_secret() == first
        assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600

    def test_reads_environment(self, monkeypatch, tmp_path):
        monkeypatch.setenv("QUEUECORE_PORT", "9999")
        monkeypatch.setenv("QUEUECORE_LOG__SEGMENT_BYTES", "1048576")
        settings = Settings(data_dir=tmp_path)
        assert settings.port == 9999 and settings.log.segment_bytes == 1048576

    def test_embedded_database_is_sqlite_in_data_dir(self, tmp_path):
        assert Settings(data_dir=tmp_path).resolved_database_url.endswith(f"{tmp_path}/metadata.db")
