"""The one settings object. Only this module reads the environment (``QUEUECORE_*``)."""

from __future__ import annotations

import collections
import enum
import math
import os
import secrets
import ssl
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.kit.sealing import Sealer
from app.kit.urls import masked

_PLACEHOLDER_SECRETS = {"", "changeme", "change-me", "secret", "dev", "development"}
# Estimated bits (length × the value's own Shannon entropy per character) a production secret needs.
# ``secrets.token_hex(16)`` never scored below 97 in 10,000 draws, ``token_urlsafe(32)`` ~205; a repeated
# character scores 0 whatever its length, and "test-secret-" + "x" * 32 scores 67.
SECRET_KEY_MIN_BITS = 90.0
METRICS_TOKEN_MIN_BITS = 32.0


def estimated_bits(value: str) -> float:
    """How many bits of randomness ``value`` shows: its length times its empirical Shannon entropy per
    character. A lower bound for nothing, but it refuses ``ssss…`` and other padded placeholders however
    long they are, which a length check alone lets through."""
    if not value:
        return 0.0
    n = len(value)
    return n * -sum(c / n * math.log2(c / n) for c in collections.Counter(value).values())


class Environment(enum.StrEnum):
    """How the service is deployed: ``development`` allows a generated secret, ``production`` does not."""

    development = "development"
    production = "production"


class LogSettings(BaseModel):
    """Knobs of the local log engine, named as Kafka names them (``TopicConfig``)."""

    # Kafka's default is 1 GiB; smaller segments make retention finer-grained at our scale.
    segment_bytes: int = 256 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    # Segment files the engine keeps open (three per segment): idle ones beyond it are closed (LRU) and
    # reopened on demand, so no number of partitions exhausts the process. Unset: half the soft
    # RLIMIT_NOFILE, at most 4,096 (a stock limit of 1,024 gives 512). See docs/operations.md.
    open_files: int | None = Field(default=None, ge=3)
    # The availability zone this machine is in (QUEUECORE_LOG__ZONE), shown by topic describe for the one
    # copy of each partition the local engine keeps (Kafka's ``broker.rack``); unset: null. JetStream's
    # zones come from the NATS servers' tags instead (``JetStreamSettings.zone_tag``).
    zone: str | None = None


class PostgresSslMode(enum.StrEnum):
    """libpq's ``sslmode`` values, which asyncpg's ``ssl`` takes as they are."""

    disable = "disable"
    allow = "allow"
    prefer = "prefer"
    require = "require"
    verify_ca = "verify-ca"
    verify_full = "verify-full"


# Settings holding a connection URL whose userinfo may carry a password (masked in ``repr``).
_URL_SETTINGS = frozenset({"database_url", "redis_url", "nats_url"})


class LogEngineKind(enum.StrEnum):
    """Where messages live: ``local`` segment files (one API process), or a ``jetstream`` cluster."""

    local = "local"
    jetstream = "jetstream"


class JetStreamSettings(BaseModel):
    """Knobs of the JetStream log engine (``QUEUECORE_JETSTREAM__*``)."""

    # Copies of each record for a topic created without saying; a publish answers once a quorum has it.
    default_replicas: int = Field(default=3, description="1, 3 or 5")
    request_timeout_seconds: float = Field(default=5.0, gt=0)
    # A cross-partition commit record older than this is rolled forward by any API node.
    recover_after_seconds: float = Field(default=10.0, gt=0)
    recovery_interval_seconds: float = Field(default=2.0, gt=0)
    # JetStream's dedup window on partition streams; must stay far above recover_after_seconds.
    duplicate_window_seconds: float = Field(default=3600.0, gt=0)
    # The server tag naming a NATS server's availability zone (``az:zone-a``: zone-a), as the servers'
    # ``server_tags`` and JetStream's ``unique_tag`` say it (infra/nats_cluster.py, infra/k8s, compose).
    zone_tag: str = Field(default="az", min_length=1)
    # Reads of this many records or more (bulk reads) go over links of their own whose replies are parsed
    # in bulk (app/stores/log/jetstream/bulk_link.py); 0 sends every read through nats-py.
    bulk_read_min_records: int = Field(default=1000, ge=0)


class Settings(BaseSettings):
    """QueueCore settings, read from ``QUEUECORE_*`` environment variables (nested with ``__``)."""

    # hide_input_in_errors: a validation error must never echo a value. pydantic's message carries
    # ``input_value``, and for a model validator that is every setting, secrets included (an error once
    # printed the tail of QUEUECORE_SECRET_KEY to stderr). The message still names the setting.
    model_config = SettingsConfigDict(
        env_prefix="QUEUECORE_", env_nested_delimiter="__", extra="ignore", hide_input_in_errors=True
    )

    environment: Environment = Environment.development
    data_dir: Path = Path("./data")
    # Empty means: the embedded SQLite file under data_dir.
    database_url: str = ""
    # Postgres: every statement and every new connection bounded (a stalled server answers 503, not never).
    metadata_statement_timeout_seconds: float = Field(10.0, gt=0)
    metadata_connect_timeout_seconds: float = Field(5.0, gt=0)
    # libpq's sslmode for a Postgres metadata database (disable, allow, prefer, require, verify-ca,
    # verify-full), handed to asyncpg as its ``ssl``; empty: as the URL says (``?ssl=`` or ``?sslmode=``),
    # else asyncpg's default, prefer. verify-ca/verify-full find the CA as libpq does (PGSSLROOTCERT, else
    # ~/.postgresql/root.crt). The password belongs in the URL; it is masked wherever the URL is shown.
    database_sslmode: PostgresSslMode | None = None
    # The CA that signed the Postgres server's certificate (a PEM file), for sslmode verify-ca/verify-full:
    # the deployment's own CA, instead of libpq's PGSSLROOTCERT or ~/.postgresql/root.crt.
    database_tls_ca: str = ""
    # Empty means: in-process limits and fan-out (the embedded default). ``redis://user:password@host``
    # authenticates (AUTH); ``rediss://`` is TLS, checked against redis_tls_ca when set.
    redis_url: str = ""
    redis_tls_ca: str = ""
    # The bound on one call to Redis as a whole (the wait for a connection, its handshake, the script);
    # a call not answered by then reads as an outage: limits and group rates fall back to per-process
    # counting, health says degraded. A healthy local Redis answers in well under a millisecond.
    redis_timeout_ms: int = Field(250, gt=0)
    # Keys of the Redis limiter start with this; separate deployments may share one Redis.
    rate_limit_prefix: str = "qc:rl:"
    secret_key: SecretStr = SecretStr("")
    # During a rotation of secret_key: the one before, so that secrets sealed under it still open (and are
    # sealed again under the new one when the server starts). See docs/operations.md.
    secret_key_previous: SecretStr = SecretStr("")
    host: str = "127.0.0.1"
    port: int = 8080
    # Proxies (IPs or CIDRs, comma-separated) whose X-Forwarded-For / X-Forwarded-Proto are believed.
    # Empty (the default) trusts nobody: the client address is the socket's peer, so a client cannot
    # choose the address its failed sign-ins are counted against (uvicorn trusts 127.0.0.1 by default).
    trusted_proxies: str = ""
    log_level: str = "INFO"
    metrics_token: SecretStr = SecretStr("")
    # Operators' token for /v1/admin (tiers and custom limits over HTTP); the admin API is off when unset.
    admin_token: SecretStr = SecretStr("")
    # Revocations must reach every API process within one second; the key cache never holds longer.
    key_cache_ttl_seconds: float = 0.5
    key_last_used_flush_seconds: float = 5.0
    # How often each API process re-reads the keys of its open WebSockets and long polls (one batched
    # query): a revoked key's connections end within this plus a query, inside the product's one second.
    open_connection_check_seconds: float = Field(default=0.5, gt=0, le=1)
    max_body_bytes: int = 10 * 1024 * 1024
    # Usage events for every authenticated request (the dashboard and Spark rollups read them); off only
    # for benchmarks that measure what metering costs.
    usage_metering: bool = True
    # The storedBytes quota: how often (at most) a publishing project's stored bytes are measured from the
    # log engine's partition sizes; a project at its quota is refused within about this long.
    stored_bytes_refresh_seconds: float = Field(default=5.0, gt=0)
    # How often every topic's retention is applied (``LogMaintenance``, on every log engine).
    retention_check_interval_ms: int = Field(default=60_000, gt=0)
    # How long a publish idempotency key is remembered per topic.
    idempotency_window_ms: int = 24 * 3600 * 1000
    # WebSocket keepalive: a connection silent for interval + timeout is closed. Push connections use
    # their group's sessionTimeout as that limit instead (pinged every third of it, at most every interval).
    ws_ping_interval_seconds: float = 2.0
    ws_ping_timeout_seconds: float = 3.0
    # permessage-deflate on push connections: off by default, it cost the server more CPU per frame
    # than any other step of delivery (bench/results/consume.md); turn on for slow client links.
    ws_compression: bool = False
    # Server-Sent Events streams (GET …/groups/{group}/events): a ``: keepalive`` comment at least this
    # often when nothing else was sent, so proxies and browsers keep an idle stream open (the product
    # promises every 15 s at most).
    sse_keepalive_seconds: float = Field(15.0, gt=0, le=15)
    # A request's line and headers: at most this many bytes (431 past it), complete within this many
    # seconds of its first byte or of the connection (408 past it; a connection that sends nothing closes).
    http_max_head_bytes: int = 64 * 1024
    # SIGTERM: health answers 503 "draining" and push members are sent elsewhere; the process keeps
    # serving this long (for balancers to notice), then finishes requests in flight within the timeout.
    drain_seconds: float = Field(5.0, ge=0)
    shutdown_timeout_seconds: float = Field(30.0, gt=0)
    http_head_timeout_seconds: float = 10.0
    # A request's body: complete within this many seconds of its head (a request without credentials:
    # the shorter limit), and never slower than the minimum rate (bytes a second); 408 past either.
    http_body_timeout_seconds: float = Field(30.0, gt=0)
    http_anonymous_body_timeout_seconds: float = Field(5.0, gt=0)
    http_body_min_rate: int = Field(1024, ge=0)
    # Abuse limits of push connections: a client frame's size, client frames per second on one connection,
    # and open push connections per API key on one API process (the ceiling of every tier's cap,
    # app/broker/connections.py). Refused cleanly, logged once.
    ws_max_frame_bytes: int = 1024 * 1024
    ws_max_frames_per_second: int = 5_000
    ws_max_connections_per_key: int = 200
    # How long a busy event loop may hold the GIL before a worker thread (fsync, file reads, SQLite)
    # gets it to hand back its result (``sys.setswitchinterval``). Python's 5 ms default made every such
    # hop queue behind the loop under load: publish→deliver p50 at 1,000 msgs/s 31 -> 12 ms at 0.5 ms.
    gil_switch_interval_ms: float = Field(default=0.5, gt=0, le=100)
    # A dashboard session unused this long ends (it ends anyway 12 h after sign-in, at sign-out, at a
    # password change and when an operator disables the account).
    dashboard_idle_timeout_seconds: float = Field(default=30 * 60, gt=0)
    # Alert webhooks (DLQ depth). Hostnames or CIDRs exempt from the production SSRF rule (no loopback,
    # private or link-local targets): for tests and on-premise receivers.
    alert_allowed_hosts: list[str] = Field(default_factory=list)
    alert_timeout_seconds: float = 5.0
    alert_max_attempts: int = 10
    alert_backoff_base_seconds: float = 2.0
    alert_backoff_max_seconds: float = 900.0
    alert_breaker_threshold: int = 5
    alert_breaker_cooldown_seconds: float = 60.0
    alert_poll_seconds: float = 0.5
    # Schedules (app/broker/schedules/runner.py, docs/scheduling.md): how often each API process looks for
    # due runs; how long a node's claim on a run holds (a node that dies holding one delays the run by
    # this much, or up to 15 s on JetStream if it died mid-publish); how late a run may be before the due times missed meanwhile are skipped (the catch-up
    # rule); how many runs of each schedule ``GET /v1/schedules/{id}/runs`` keeps.
    schedule_poll_seconds: float = Field(default=0.25, gt=0, le=60)
    schedule_claim_seconds: float = Field(default=5.0, gt=0)
    schedule_catch_up_seconds: float = Field(default=30.0, ge=0)
    schedule_runs_kept: int = Field(default=100, ge=1, le=10_000)
    # Push groups (group config ``push``): how often each API process looks for push groups to start,
    # change or stop workers for; hosts exempt from the production SSRF rule (as alert_allowed_hosts);
    # attempts kept per group for the attempts API; the per-endpoint breaker (failures in a row to open,
    # the longest it stays open).
    push_refresh_seconds: float = Field(default=1.0, gt=0)
    push_allowed_hosts: list[str] = Field(default_factory=list)
    push_attempts_kept: int = Field(default=1000, ge=10)
    push_breaker_threshold: int = Field(default=5, ge=1)
    push_breaker_max_seconds: float = Field(default=60.0, gt=0)
    # Tracing (docs/operations.md "Tracing"): spans exported over OTLP/HTTP. Unset, it is on exactly when
    # the standard OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; off, it costs
    # nothing (OpenTelemetry's SDK and exporter are not even imported). The exporter reads the other OTEL_EXPORTER_OTLP_*.
    otel_enabled: bool | None = None
    # The collector's base URL (``/v1/traces`` is added); empty: the standard variables, else localhost:4318.
    otel_endpoint: str = ""
    # Empty: OTEL_SERVICE_NAME, else "queuecore".
    otel_service_name: str = ""
    log: LogSettings = Field(default_factory=LogSettings)
    log_engine: LogEngineKind = LogEngineKind.local
    # One or more nats:// seeds, comma-separated (the JetStream engine).
    nats_url: str = ""
    # The JetStream engine's credentials: a user and password, or a creds file (JWT and nkey seed).
    nats_user: str = ""
    nats_password: SecretStr = SecretStr("")
    nats_creds: str = ""
    # TLS to NATS: the CA that signed the servers' certificates (the deployment's own, see
    # docs/operations.md); a client certificate and key when the servers ask for one; the name to check
    # their certificates against when it is not the seed's host.
    nats_tls_ca: str = ""
    nats_tls_cert: str = ""
    nats_tls_key: str = ""
    nats_tls_hostname: str = ""
    jetstream: JetStreamSettings = Field(default_factory=JetStreamSettings)

    @model_validator(mode="after")
    def _check_log_engine(self) -> Settings:
        if self.log_engine is LogEngineKind.jetstream:
            if not self.nats_servers():
                raise ValueError(
                    "QUEUECORE_LOG_ENGINE=jetstream needs QUEUECORE_NATS_URL (nats:// seeds, comma-separated)"
                )
            if self.jetstream.default_replicas not in (1, 3, 5):
                raise ValueError("QUEUECORE_JETSTREAM__DEFAULT_REPLICAS must be 1, 3 or 5")
        if self.nats_password.get_secret_value() and not self.nats_user:
            raise ValueError("QUEUECORE_NATS_PASSWORD needs QUEUECORE_NATS_USER")
        if self.nats_creds and self.nats_user:
            raise ValueError("QUEUECORE_NATS_CREDS and QUEUECORE_NATS_USER are two ways to sign in: set one")
        if bool(self.nats_tls_cert) != bool(self.nats_tls_key):
            raise ValueError("QUEUECORE_NATS_TLS_CERT and QUEUECORE_NATS_TLS_KEY go together")
        if self.database_tls_ca and self.database_ssl_verification() is None:
            raise ValueError(
                "QUEUECORE_DATABASE_TLS_CA checks the Postgres server's certificate: it needs "
                "QUEUECORE_DATABASE_SSLMODE=verify-ca or verify-full (other modes check none)"
            )
        return self

    def database_ssl_verification(self) -> str | None:
        """``verify-ca`` or ``verify-full`` when the Postgres server's certificate is to be checked (the
        setting, else a libpq ``sslmode`` in the URL); None otherwise."""
        mode = self.database_sslmode.value if self.database_sslmode is not None else None
        if mode is None and self.database_url.startswith("postgresql"):
            query = dict(parse_qsl(urlsplit(self.database_url).query))
            mode = query.get("sslmode") or query.get("ssl")
        return mode if mode in ("verify-ca", "verify-full") else None

    def database_tls(self) -> ssl.SSLContext | None:
        """The TLS context a Postgres connection checks the server with, when ``database_tls_ca`` names the
        CA (None: asyncpg does as the sslmode says, finding a CA as libpq does)."""
        if not self.database_tls_ca:
            return None
        context = ssl.create_default_context(cafile=self.database_tls_ca)
        # verify-ca: the chain, not the name (libpq's meaning); verify-full: both.
        context.check_hostname = self.database_ssl_verification() == "verify-full"
        return context

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # A URL's password (Postgres, Redis, NATS userinfo) never reaches a repr, str or log line.
        for name, value in super().__repr_args__():
            yield name, masked(value) if name in _URL_SETTINGS and isinstance(value, str) else value

    def trusted_proxy_list(self) -> list[str]:
        """The addresses of ``trusted_proxies``, in order."""
        return [p.strip() for p in self.trusted_proxies.split(",") if p.strip()]

    def nats_servers(self) -> tuple[str, ...]:
        """The NATS seeds of ``nats_url``, in order."""
        return tuple(url.strip() for url in self.nats_url.split(",") if url.strip())

    @model_validator(mode="after")
    def _check_secret(self) -> Settings:
        if self.environment is Environment.production:
            # The messages name the setting and the rule, never the value (not even its length).
            value = self.secret_key.get_secret_value()
            if (
                value.lower() in _PLACEHOLDER_SECRETS
                or len(value) < 32
                or estimated_bits(value) < SECRET_KEY_MIN_BITS
            ):
                raise ValueError(
                    "QUEUECORE_SECRET_KEY must be set to a random value of at least 32 characters "
                    "(e.g. `openssl rand -hex 32`) when QUEUECORE_ENVIRONMENT=production; "
                    "repeated or patterned values are refused"
                )
            # /metrics names every environment's topics and groups with their lag: not for anyone who asks.
            token = self.metrics_token.get_secret_value()
            if (
                token.lower() in _PLACEHOLDER_SECRETS
                or len(token) < 16
                or estimated_bits(token) < METRICS_TOKEN_MIN_BITS
            ):
                raise ValueError(
                    "QUEUECORE_METRICS_TOKEN must be set to a random value (at least 16 characters) when "
                    "QUEUECORE_ENVIRONMENT=production: /metrics then needs 'Authorization: Bearer <token>'"
                )
        return self

    def tracing_enabled(self) -> bool:
        """Whether to export spans: ``otel_enabled`` when set, else whether an OTLP endpoint is configured
        (``otel_endpoint`` or the standard variables); never under ``OTEL_SDK_DISABLED=true``."""
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        if self.otel_enabled is not None:
            return self.otel_enabled
        return bool(
            self.otel_endpoint
            or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        )

    def tracing_service_name(self) -> str:
        """The ``service.name`` of exported spans."""
        return self.otel_service_name or os.environ.get("OTEL_SERVICE_NAME") or "queuecore"

    def sealer(self) -> Sealer:
        """Seals secrets kept at rest (alert signing secrets) under a key derived from the server secret."""
        previous = self.secret_key_previous.get_secret_value().encode() or None
        return Sealer(self.server_secret(), previous)

    @property
    def resolved_database_url(self) -> str:
        """The metadata database URL; the embedded default is a SQLite file in the data dir. For asyncpg,
        ``database_sslmode`` (or a libpq ``sslmode`` in the URL, which asyncpg's SQLAlchemy dialect would
        refuse) becomes the ``ssl`` query parameter asyncpg takes."""
        if not self.database_url:
            return f"sqlite+aiosqlite:///{(self.data_dir / 'metadata.db').resolve()}"
        if not self.database_url.startswith("postgresql+asyncpg"):
            return self.database_url
        parts = urlsplit(self.database_url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        if self.database_sslmode is None and not any(name == "sslmode" for name, _ in query):
            return self.database_url  # nothing to change: the URL exactly as given
        mode = self.database_sslmode.value if self.database_sslmode is not None else None
        kept = []
        for name, value in query:
            if name in ("sslmode", "ssl"):
                mode = mode or value
            else:
                kept.append((name, value))
        kept.append(("ssl", mode or "prefer"))
        return urlunsplit(parts._replace(query=urlencode(kept, quote_via=quote)))

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "log"

    def server_secret(self) -> bytes:
        """The server secret keying API-key hashes; generated once and kept in the data dir when embedded."""
        value = self.secret_key.get_secret_value()
        if value:
            return value.encode()
        path = self.data_dir / "secret_key"
        if not path.exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            # Durable before any key is hashed with it: fsync'd, renamed, the directory fsync'd. Without the
            # syncs a power loss soon after the first start left an empty file (its data never written
            # back, its name kept): the secret became b"" and every API key of the deployment invalid
            # (tests/system/faults/test_short_faults.py::test_no_anomalies_after_power_losses).
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(48))
                out.flush()
                os.fsync(out.fileno())
            tmp.replace(path)
            directory = os.open(self.data_dir, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        return path.read_text().strip().encode()


# Names the SDKs and the customer CLI read from the same shells (not server settings, not typos).
CLIENT_ENVIRONMENT_NAMES = frozenset({"QUEUECORE_API_KEY", "QUEUECORE_BASE_URL", "QUEUECORE_CONFIG"})


def unknown_environment_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """``QUEUECORE_*`` names in ``environ`` that no setting reads, sorted: a misspelt or renamed setting is
    otherwise ignored in silence (``extra="ignore"``), and its operator never learns that the default won.
    Names of the suite's own tooling (``QUEUECORE_TEST_*``) are not settings and are left out."""
    environ = os.environ if environ is None else environ
    prefix = Settings.model_config.get("env_prefix", "")
    delimiter = Settings.model_config.get("env_nested_delimiter") or "__"
    known: set[str] = set(CLIENT_ENVIRONMENT_NAMES)
    for name, field in Settings.model_fields.items():
        known.add(f"{prefix}{name}".upper())
        nested = field.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            known.update(f"{prefix}{name}{delimiter}{sub}".upper() for sub in nested.model_fields)
    return sorted(
        name
        for name in environ
        if name.upper().startswith(prefix.upper())
        and not name.upper().startswith(f"{prefix}TEST_".upper())
        and name.upper() not in known
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()
