"""The one settings object: production refuses placeholder secrets; embedded keeps a generated one."""

from __future__ import annotations

import secrets

import pytest
from pydantic import ValidationError

from app.settings import Environment, Settings, estimated_bits, unknown_environment_names
from tests.fixtures.server import cli, server_env

STRONG = secrets.token_urlsafe(32)


class TestSecret:
    @pytest.mark.parametrize("secret", ["", "changeme", "short-secret"])
    def test_production_refuses_placeholder(self, tmp_path, secret):
        with pytest.raises(ValidationError, match="QUEUECORE_SECRET_KEY"):
            Settings(environment=Environment.production, data_dir=tmp_path, secret_key=secret)

    def test_production_accepts_real_secret(self, tmp_path):
        token = secrets.token_hex(8)
        settings = Settings(
            environment=Environment.production, data_dir=tmp_path, secret_key=STRONG, metrics_token=token
        )
        assert settings.server_secret() == STRONG.encode()

    @pytest.mark.parametrize(
        "secret", ["s" * 64, "k" * 40, "ab" * 32, "test-secret-" + "x" * 32, "0123456789" + "0" * 30]
    )
    def test_production_refuses_weak_secret_however_long(self, tmp_path, secret):
        # Length alone let ``ssss…`` through: the value's own entropy is what counts.
        with pytest.raises(ValidationError, match="QUEUECORE_SECRET_KEY"):
            Settings(
                environment=Environment.production,
                data_dir=tmp_path,
                secret_key=secret,
                metrics_token=secrets.token_hex(16),
            )

    @pytest.mark.parametrize("draw", [secrets.token_hex, secrets.token_urlsafe])
    def test_generated_secrets_pass(self, draw):
        # What docs/operations.md tells operators to run (32 random bytes), with a margin.
        assert all(estimated_bits(draw(32)) > 150 for _ in range(200))
        assert all(estimated_bits(secrets.token_hex(16)) >= 90 for _ in range(200))

    def test_production_refuses_a_repeated_metrics_token(self, tmp_path):
        with pytest.raises(ValidationError, match="QUEUECORE_METRICS_TOKEN"):
            Settings(
                environment=Environment.production,
                data_dir=tmp_path,
                secret_key=STRONG,
                metrics_token="m" * 40,
            )


class TestErrorsNeverEchoSecrets:
    CANARY = "Zq9CANARYtail"

    def test_validation_error_hides_every_value(self, tmp_path):
        weak = "s" * 40 + self.CANARY
        with pytest.raises(ValidationError) as refused:
            Settings(
                environment=Environment.production,
                data_dir=tmp_path,
                secret_key=weak,
                metrics_token="metrics-" + self.CANARY,
                admin_token="admin-" + self.CANARY,
            )
        # What reaches a log or a terminal: the message (``errors()`` is for code, and keeps the input).
        text = str(refused.value)
        assert "QUEUECORE_SECRET_KEY" in text
        assert self.CANARY not in text and "ssss" not in text

    def test_cli_prints_no_part_of_the_secret(self, tmp_path):
        env = server_env(
            tmp_path,
            QUEUECORE_ENVIRONMENT="production",
            QUEUECORE_SECRET_KEY="s" * 40 + self.CANARY,
            QUEUECORE_METRICS_TOKEN="metrics-" + self.CANARY,
        )
        result = cli(env, "migrate", check=False)
        assert result.returncode == 2 and "QUEUECORE_SECRET_KEY" in result.stderr
        assert self.CANARY not in result.stderr + result.stdout and "ssss" not in result.stderr

    def test_a_bad_value_of_another_setting_is_not_echoed_either(self, tmp_path):
        env = server_env(tmp_path, QUEUECORE_PORT="80" + self.CANARY)
        result = cli(env, "migrate", check=False)
        assert result.returncode == 2 and "port" in result.stderr.lower()
        assert self.CANARY not in result.stderr

    @pytest.mark.parametrize("token", ["", "changeme", "short"])
    def test_production_refuses_to_serve_metrics_to_anyone(self, tmp_path, token):
        # /metrics lists every environment's topics, groups and lag: production needs its token.
        with pytest.raises(ValidationError, match="QUEUECORE_METRICS_TOKEN"):
            Settings(
                environment=Environment.production,
                data_dir=tmp_path,
                secret_key=STRONG,
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


class TestUnknownNames:
    """A misspelt or renamed ``QUEUECORE_*`` name is reported, by name only, instead of silently ignored."""

    def test_known_names_nested_ones_and_client_names_are_not_reported(self):
        environ = {
            "QUEUECORE_PORT": "1",
            "QUEUECORE_LOG__OPEN_FILES": "64",
            "queuecore_data_dir": "/x",
            "QUEUECORE_API_KEY": "pq_live_sk_x",
            "QUEUECORE_TEST_POSTGRES": "postgresql://",
            "PATH": "/bin",
        }
        assert unknown_environment_names(environ) == []

    def test_renamed_and_misspelt_names_are_reported(self):
        environ = {"QUEUECORE_LOG__MAX_OPEN_SEGMENTS": "8", "QUEUECORE_SECRETKEY": "v", "QUEUECORE_PORT": "1"}
        assert unknown_environment_names(environ) == [
            "QUEUECORE_LOG__MAX_OPEN_SEGMENTS",
            "QUEUECORE_SECRETKEY",
        ]

    def test_the_cli_warns_with_the_name_and_never_the_value(self, tmp_path):
        canary = "pq-canary-" + secrets.token_hex(6)
        env = server_env(tmp_path, QUEUECORE_SECRETKEY=canary)
        result = cli(env, "migrate")
        assert "QUEUECORE_SECRETKEY is not a setting" in result.stderr
        assert canary not in result.stderr + result.stdout
