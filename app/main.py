"""The FastAPI app: ``create_app()`` and the lifespan that builds and closes every store."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp

import app as package
from app.api import (
    admin,
    consumers,
    dead_letters,
    groups,
    health,
    messages,
    metrics,
    offsets,
    tokens,
    topics,
    usage_admin,
    ws,
)
from app.api import alerts as alert_routes
from app.api import events as event_routes
from app.api import push as push_routes
from app.api import schedules as schedule_routes
from app.api.middleware import RequestEnvelopeMiddleware
from app.api.publish_lane import PublishLane
from app.broker.alerts import AlertDispatcher, AlertPolicy
from app.broker.connections import ConnectionRegistry
from app.broker.delivery import flow
from app.broker.delivery.roster import PushRoster
from app.broker.delivery.url_workers import UrlWorkers
from app.broker.groups import KnownGroups
from app.broker.idempotency import shared_idempotency
from app.broker.keys import KeyAuthenticator
from app.broker.maintenance import LogMaintenance
from app.broker.publishing import Publisher
from app.broker.push_groups import PushPolicy
from app.broker.schedules.runner import ScheduleRunner
from app.broker.stored_bytes import StoredBytes
from app.broker.topics import TopicDirectory, sweep_orphan_logs
from app.broker.usage import UsageMeter
from app.dashboard import install as install_dashboard
from app.errors import add_exception_handlers
from app.kit import tracing
from app.kit.clock import SYSTEM_CLOCK, Clock
from app.openapi import install as install_openapi
from app.services import Services
from app.settings import Environment, LogEngineKind, Settings, get_settings
from app.stores.errors import StoreUnavailable
from app.stores.limits.protocol import RateLimiter, TokenBuckets
from app.stores.limits.tokens import MemoryTokenBuckets
from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine, NatsLink
from app.stores.log.local import LocalLogConfig, LocalLogEngine
from app.stores.log.protocol import LogEngine
from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.protocol import MetadataStore

_GC_YOUNG_THRESHOLD = 10_000
logger = logging.getLogger("queuecore")


def build_limiter(settings: Settings, clock: Clock = SYSTEM_CLOCK) -> RateLimiter:
    """Redis when configured (exact across processes, on Redis's clock), else in-process (the embedded
    default), deciding on ``clock``'s monotonic time."""
    if settings.redis_url:
        from app.stores.limits.redis import RedisRateLimiter

        return RedisRateLimiter(
            settings.redis_url,
            key_prefix=settings.rate_limit_prefix,
            tls_ca=settings.redis_tls_ca,
            socket_timeout=settings.redis_timeout_ms / 1000,
        )
    from app.stores.limits.memory import MemoryRateLimiter

    return MemoryRateLimiter(clock.monotonic_ns)


def build_token_buckets(settings: Settings) -> TokenBuckets:
    """Where group rates are counted: Redis when configured (one bucket per group for every API process),
    else in-process."""
    if settings.redis_url:
        from app.stores.limits.tokens import RedisTokenBuckets

        return RedisTokenBuckets(
            settings.redis_url,
            key_prefix=f"{settings.rate_limit_prefix}tb:",
            tls_ca=settings.redis_tls_ca,
            socket_timeout=settings.redis_timeout_ms / 1000,
        )
    return MemoryTokenBuckets()


def build_alert_policy(settings: Settings) -> AlertPolicy:
    """The one place the alert settings (``QUEUECORE_ALERT_*``, the environment) become the domain's
    ``AlertPolicy`` (the server's dispatcher, the CLI's ``alerts`` commands)."""
    return AlertPolicy(
        sealer=settings.sealer(),
        block_internal=settings.environment is Environment.production,
        allowed_hosts=tuple(settings.alert_allowed_hosts),
        timeout_seconds=settings.alert_timeout_seconds,
        max_attempts=settings.alert_max_attempts,
        backoff_base_seconds=settings.alert_backoff_base_seconds,
        backoff_max_seconds=settings.alert_backoff_max_seconds,
        breaker_threshold=settings.alert_breaker_threshold,
        breaker_cooldown_seconds=settings.alert_breaker_cooldown_seconds,
        poll_seconds=settings.alert_poll_seconds,
    )


def build_metadata_store(settings: Settings, *, pool_size: int | None = None) -> SqlMetadataStore:
    """A metadata store on the settings' database, its statements and connects bounded; ``pool_size`` for a
    background service's own small pool (its polls never wait behind the request path's connections)."""
    sizing = {} if pool_size is None else {"pool_size": pool_size}
    return SqlMetadataStore(
        settings.resolved_database_url,
        statement_timeout=settings.metadata_statement_timeout_seconds,
        connect_timeout=settings.metadata_connect_timeout_seconds,
        tls=settings.database_tls(),
        **sizing,
    )


def build_log_engine(settings: Settings) -> LogEngine:
    """The log engine the settings choose, given a frozen config of its own (it never reads Settings)."""
    if settings.log_engine is LogEngineKind.jetstream:
        # The settings' sub-models name their knobs as the configs do (tests/stores/log/*/test_config.py).
        return JetStreamLogEngine(
            JetStreamConfig(
                servers=settings.nats_servers(),
                **settings.jetstream.model_dump(),
                link=build_nats_link(settings),
            )
        )
    return LocalLogEngine(settings.log_dir, LocalLogConfig(**settings.log.model_dump()))


def build_nats_link(settings: Settings) -> NatsLink:
    """The JetStream engine's credentials and TLS (``QUEUECORE_NATS_USER``, ``_PASSWORD``, ``_CREDS``,
    ``_TLS_*``)."""
    return NatsLink(
        user=settings.nats_user,
        password=settings.nats_password.get_secret_value(),
        creds=settings.nats_creds,
        tls_ca=settings.nats_tls_ca,
        tls_cert=settings.nats_tls_cert,
        tls_key=settings.nats_tls_key,
        tls_hostname=settings.nats_tls_hostname,
    )


def build_push_policy(settings: Settings) -> PushPolicy:
    """The push rules of this deployment, as plain values (the broker never reads ``Settings``)."""
    return PushPolicy(
        sealer=settings.sealer(),
        block_internal=settings.environment is Environment.production,
        allowed_hosts=tuple(settings.push_allowed_hosts),
        refresh_seconds=settings.push_refresh_seconds,
        attempts_kept=settings.push_attempts_kept,
        breaker_threshold=settings.push_breaker_threshold,
        breaker_max_seconds=settings.push_breaker_max_seconds,
    )


@contextlib.asynccontextmanager
async def lifespan(application: FastAPI) -> AsyncIterator[None]:
    """Build and start every store and background service; close them in reverse order at shutdown, and
    also when a later one fails to start (nothing started is left running)."""
    settings: Settings = application.state.settings
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as stack:
        # Off unless configured; an embedding application (or a test) that started tracing keeps its own.
        if settings.tracing_enabled() and not tracing.enabled:
            tracing.start_otlp(settings.otel_endpoint or None, settings.tracing_service_name())
            logger.info("tracing: spans exported over OTLP/HTTP")
            # Closed last: it flushes the spans still buffered (a blocking export).
            stack.push_async_callback(asyncio.to_thread, tracing.stop)
        metadata = build_metadata_store(settings)
        stack.push_async_callback(metadata.close)
        log = build_log_engine(settings)
        await log.start()
        stack.push_async_callback(log.close)
        await _sweep_orphan_logs(metadata, log)
        maintenance = LogMaintenance(log, interval=settings.retention_check_interval_ms / 1000)
        maintenance.start()
        stack.push_async_callback(maintenance.close)
        limiter = build_limiter(settings, application.state.clock)
        stack.push_async_callback(limiter.close)
        token_buckets = build_token_buckets(settings)
        stack.push_async_callback(token_buckets.close)
        flow.use_token_buckets(token_buckets)
        keys = KeyAuthenticator(
            metadata,
            settings.server_secret(),
            cache_ttl=settings.key_cache_ttl_seconds,
            flush_interval=settings.key_last_used_flush_seconds,
        )
        keys.start()
        stack.push_async_callback(keys.close)
        usage = UsageMeter(log, enabled=settings.usage_metering)
        await usage.start()
        stack.push_async_callback(usage.close)
        # Its own small pool: its polls never wait behind (nor count among) the request path's connections.
        alerts_store = build_metadata_store(settings, pool_size=2)
        stack.push_async_callback(alerts_store.close)
        alerts = AlertDispatcher(alerts_store, build_alert_policy(settings))
        alerts.start()
        stack.push_async_callback(alerts.close)
        publisher = Publisher(
            log,
            TopicDirectory(metadata),
            dedup_window_ms=settings.idempotency_window_ms,
            shared=shared_idempotency(log, settings.idempotency_window_ms),
        )
        # Its own small pool too: a pass every poll, never waiting behind the request path.
        schedules_store = build_metadata_store(settings, pool_size=2)
        stack.push_async_callback(schedules_store.close)
        schedule_runner = ScheduleRunner(
            schedules_store,
            publisher,
            poll_seconds=settings.schedule_poll_seconds,
            claim_seconds=settings.schedule_claim_seconds,
            catch_up_seconds=settings.schedule_catch_up_seconds,
            runs_kept=settings.schedule_runs_kept,
        )
        schedule_runner.start()
        stack.push_async_callback(schedule_runner.close)
        stored_bytes = StoredBytes(metadata, log, refresh_seconds=settings.stored_bytes_refresh_seconds)
        stack.push_async_callback(stored_bytes.close)
        push_policy = build_push_policy(settings)
        push_workers = UrlWorkers(metadata, log, push_policy)
        push_workers.start()
        stack.push_async_callback(push_workers.close)
        # The WebSocket push members this process serves, per group (nothing to close: a member leaves
        # it as its connection ends).
        push_members = PushRoster()
        connections = ConnectionRegistry(
            metadata,
            interval=settings.open_connection_check_seconds,
            ceiling=settings.ws_max_connections_per_key,
        )
        connections.start()
        stack.push_async_callback(connections.close_all)
        application.state.services = Services(
            settings=settings,
            metadata=metadata,
            log=log,
            limiter=limiter,
            keys=keys,
            usage=usage,
            publisher=publisher,
            registry=application.state.registry,
            alerts=alerts,
            connections=connections,
            stored_bytes=stored_bytes,
            known_groups=KnownGroups(),
            push_policy=push_policy,
            push_workers=push_workers,
            push_members=push_members,
            clock=application.state.clock,
        )
        # Everything built so far lives as long as the process: keep it out of the cyclic GC's full passes,
        # which otherwise rescan it and stall requests (the p99 of publishing).
        gc.collect()
        gc.freeze()
        # A young-generation pass every 10,000 net allocations rather than 700: each request allocates and
        # frees hundreds of containers, and the passes were ~3 % of a single publish's main thread (py-spy).
        gc.set_threshold(_GC_YOUNG_THRESHOLD, 10, 10)
        logger.info("queuecore started", extra={"version": package.__version__, "durability": log.durability})
        yield


async def _sweep_orphan_logs(metadata: MetadataStore, log: LogEngine) -> None:
    """A crash between a topic's deletion and its files' removal leaves logs nobody owns: remove them.

    Only where this process alone creates logs (``LogEngine.exclusive``): on JetStream another API process
    may be creating a topic right now, its streams made just before its row commits, and a sweep would
    take them (an orphan there costs storage, not data). Never a reason not to start: with the metadata
    store down, health must still answer (503)."""
    if not log.exclusive:
        return
    try:
        async with metadata.unit() as uow:
            swept = await sweep_orphan_logs(uow, log, await log.topic_ids())
        if swept:
            logger.info("removed the logs of %d deleted topics", swept)
    except StoreUnavailable:
        logger.warning("metadata store unavailable at startup: orphan logs not swept this time")


class QueueCoreApp(FastAPI):
    """FastAPI with the request envelope outermost.

    Starlette puts added middleware inside its own error, telemetry and body-limit layers; the
    envelope answers errors and caps bodies itself, so it runs before them, and the publish lane right
    inside it (``publish_lane.py``) skips every layer the single publish does not need.
    """

    def __init__(self, *, settings: Settings, registry: CollectorRegistry, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._settings = settings
        self._metrics = metrics.HttpMetrics(registry)

    def build_middleware_stack(self) -> ASGIApp:
        return RequestEnvelopeMiddleware(
            PublishLane(super().build_middleware_stack()),
            max_body_bytes=self._settings.max_body_bytes,
            metrics=self._metrics,
        )


def create_app(settings: Settings | None = None, *, clock: Clock = SYSTEM_CLOCK) -> FastAPI:
    """Build the app; stateful things are made in ``lifespan``, never at import. ``clock`` is what the
    services compare timeouts and due times with (a test hands in one it moves)."""
    settings = settings or get_settings()
    registry = CollectorRegistry(auto_describe=True)
    application = QueueCoreApp(
        settings=settings,
        registry=registry,
        # Our own Prometheus metrics and logs describe every request; FastAPI's OpenTelemetry hooks
        # would cost a provider lookup per request for nothing.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        title="QueueCore API",
        version=package.__version__,
        description="A managed pub/sub message broker: topics, publishing, consumer groups, DLQs.",
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
    )
    application.state.settings = settings
    application.state.registry = registry
    application.state.clock = clock
    add_exception_handlers(application)
    install_openapi(application)
    application.include_router(health.router)
    application.include_router(topics.router)
    application.include_router(messages.router)
    application.include_router(groups.router)
    application.include_router(offsets.router)
    application.include_router(dead_letters.router)
    application.include_router(push_routes.router)
    application.include_router(alert_routes.router)
    application.include_router(schedule_routes.router)
    application.include_router(consumers.router)
    application.include_router(tokens.router)
    application.include_router(ws.router)
    application.include_router(event_routes.router)
    application.include_router(admin.router)
    application.include_router(usage_admin.router)
    application.include_router(metrics.router)
    # The admin dashboard: its own router and static files, no middleware (nothing on the API's path).
    install_dashboard(application)
    return application
