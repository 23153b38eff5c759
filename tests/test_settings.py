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


class TestLinkSettings:
    """Credentials and TLS of the links to NATS, Redis and Postgres (docs/operations.md, "Authenticated and
    encrypted links"): read from QUEUECORE_*, handed on, and never shown."""

    CANARY = "Pw9CANARYlink"

    def test_repr_and_str_never_show_a_password(self, tmp_path):
        settings = Settings(
            data_dir=tmp_path,
            log_engine="jetstream",
            nats_url=f"nats://seed:{self.CANARY}@127.0.0.1:4311,nats://127.0.0.1:4312",
            nats_user="queuecore",
            nats_password=self.CANARY,
            redis_url=f"redis://qc:{self.CANARY}@127.0.0.1:6379/0",
            database_url=f"postgresql+asyncpg://qc:{self.CANARY}@127.0.0.1:5432/qc",
        )
        for shown in (repr(settings), str(settings), f"{settings!r}"):
            assert self.CANARY not in shown
            assert "redis://qc:***@127.0.0.1:6379/0" in shown
            assert "postgresql+asyncpg://qc:***@127.0.0.1:5432/qc" in shown
            assert "nats://seed:***@127.0.0.1:4311" in shown
        # The values themselves are intact for the code that connects.
        assert self.CANARY in settings.redis_url and self.CANARY in settings.resolved_database_url
        assert settings.nats_password.get_secret_value() == self.CANARY

    def test_the_engine_gets_the_credentials_and_its_config_does_not_show_them(self, tmp_path):
        from app.main import build_log_engine

        settings = Settings(
            data_dir=tmp_path,
            log_engine="jetstream",
            nats_url="nats://127.0.0.1:4311",
            nats_user="queuecore",
            nats_password=self.CANARY,
            nats_tls_ca=str(tmp_path / "ca.pem"),
            nats_tls_hostname="nats.internal",
        )
        engine = build_log_engine(settings)  # not started: nothing is dialled
        link = engine.config.link  # type: ignore[attr-defined]
        assert (link.user, link.password, link.tls_ca, link.tls_hostname) == (
            "queuecore",
            self.CANARY,
            str(tmp_path / "ca.pem"),
            "nats.internal",
        )
        assert self.CANARY not in repr(engine.config)

    def test_read_from_the_environment(self, monkeypatch, tmp_path):
        names = {
            "QUEUECORE_NATS_USER": "queuecore",
            "QUEUECORE_NATS_PASSWORD": self.CANARY,
            "QUEUECORE_NATS_TLS_CA": "/etc/qc/ca.pem",
            "QUEUECORE_NATS_TLS_CERT": "/etc/qc/client.pem",
            "QUEUECORE_NATS_TLS_KEY": "/etc/qc/client.key",
            "QUEUECORE_REDIS_TLS_CA": "/etc/qc/redis-ca.pem",
            "QUEUECORE_DATABASE_SSLMODE": "verify-full",
        }
        for name, value in names.items():
            monkeypatch.setenv(name, value)
        settings = Settings(data_dir=tmp_path)
        assert settings.nats_password.get_secret_value() == self.CANARY
        assert (settings.nats_tls_cert, settings.nats_tls_key) == ("/etc/qc/client.pem", "/etc/qc/client.key")
        assert settings.redis_tls_ca == "/etc/qc/redis-ca.pem" and settings.database_sslmode == "verify-full"
        assert unknown_environment_names(names) == []

    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            ({"nats_password": "x"}, "QUEUECORE_NATS_USER"),
            ({"nats_user": "u", "nats_creds": "/x.creds"}, "set one"),
            ({"nats_tls_cert": "/c.pem"}, "go together"),
        ],
    )
    def test_half_configured_credentials_are_refused(self, tmp_path, fields, message):
        with pytest.raises(ValidationError, match=message):
            Settings(data_dir=tmp_path, **fields)

    @pytest.mark.parametrize(
        ("url", "sslmode", "expected"),
        [
            ("postgresql+asyncpg://qc:pw@db/qc", None, "postgresql+asyncpg://qc:pw@db/qc"),
            # Without an sslmode the URL is left exactly as given (its encoding too).
            ("postgresql+asyncpg://qc:pw@db/qc?x=a%20b+c", None, "postgresql+asyncpg://qc:pw@db/qc?x=a%20b+c"),
            ("postgresql+asyncpg://qc:pw@db/qc", "require", "postgresql+asyncpg://qc:pw@db/qc?ssl=require"),
            # libpq's name in the URL would be refused by asyncpg's dialect: it becomes ``ssl``.
            ("postgresql+asyncpg://qc:pw@db/qc?sslmode=verify-full", None, "postgresql+asyncpg://qc:pw@db/qc?ssl=verify-full"),
            # The setting wins over the URL.
            ("postgresql+asyncpg://qc:pw@db/qc?ssl=prefer", "disable", "postgresql+asyncpg://qc:pw@db/qc?ssl=disable"),
        ],
    )  # fmt: skip
    def test_sslmode_reaches_asyncpg_as_ssl(self, tmp_path, url, sslmode, expected):
        settings = Settings(data_dir=tmp_path, database_url=url, database_sslmode=sslmode)
        assert settings.resolved_database_url == expected

    def test_an_unknown_sslmode_is_refused(self, tmp_path):
        with pytest.raises(ValidationError, match="database_sslmode"):
            Settings(data_dir=tmp_path, database_sslmode="sometimes")


class TestPostgresTlsCa:
    def test_a_ca_without_a_verifying_sslmode_is_refused(self, tmp_path):
        with pytest.raises(ValueError, match="QUEUECORE_DATABASE_TLS_CA"):
            Settings(database_url="postgresql+asyncpg://db/qc", database_tls_ca=str(tmp_path / "ca.pem"))
        with pytest.raises(ValueError, match="verify-ca or verify-full"):
            Settings(
                database_url="postgresql+asyncpg://db/qc",
                database_sslmode="require",
                database_tls_ca=str(tmp_path / "ca.pem"),
            )

    def test_verify_ca_checks_the_chain_and_verify_full_the_name_too(self, tmp_path):
        from infra.pki import ensure_pki

        ca = str(ensure_pki(tmp_path / "pki").ca)
        full = Settings(database_url="postgresql+asyncpg://db/qc?sslmode=verify-full", database_tls_ca=ca)
        chain = Settings(
            database_url="postgresql+asyncpg://db/qc", database_sslmode="verify-ca", database_tls_ca=ca
        )
        assert full.database_tls().check_hostname is True
        assert chain.database_tls().check_hostname is False
        assert Settings(database_url="postgresql+asyncpg://db/qc").database_tls() is None
