"""``GET /metrics``: Prometheus text from this app's own registry."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import Response

from app.api.health import dependency_checks
from app.api.routing import JsonRoute
from app.broker import groups
from app.errors import ApiError

_MAX_CACHED_TOPICS = 10_000


class HttpMetrics:
    """Request counts and latency histograms by method, route template and status; publishes per topic."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "queuecore_http_requests_total",
            "HTTP requests answered.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "queuecore_http_request_duration_seconds",
            "HTTP request latency.",
            ["method", "route", "status"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=registry,
        )

        # Per topic: rate() of these is the publish rate and throughput. Labelled by project and
        # environment too, since topic names repeat across tenants.
        self.published = Counter(
            "queuecore_topic_published_messages_total",
            "Messages appended to a topic.",
            ["project", "environment", "topic"],
            registry=registry,
        )
        self.published_bytes = Counter(
            "queuecore_topic_published_bytes_total",
            "Bytes of message data appended to a topic.",
            ["project", "environment", "topic"],
            registry=registry,
        )

        # The children of each label set, looked up once: ``labels()`` costs more than the update.
        self._by_route: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._by_topic: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._by_route.get(key)
        if children is None:
            code = str(status)
            children = self._by_route[key] = (
                self.requests.labels(method, route, code),
                self.latency.labels(method, route, code),
            )
        children[0].inc()
        children[1].observe(seconds)

    def observe_publish(
        self, project: str, environment: str, topic: str, messages: int, data_bytes: int
    ) -> None:
        key = (project, environment, topic)
        children = self._by_topic.get(key)
        if children is None:
            if len(self._by_topic) >= _MAX_CACHED_TOPICS:
                self._by_topic.clear()
            children = self._by_topic[key] = (
                self.published.labels(project, environment, topic),
                self.published_bytes.labels(project, environment, topic),
            )
        children[0].inc(messages)
        children[1].inc(data_bytes)


class _GroupCollector(Collector):
    """Per-group delivery gauges computed at scrape time (never per message)."""

    _LABELS = ("project", "environment", "topic", "group")

    def __init__(self, stats: list[groups.GroupStats]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "queuecore_group_lag_messages",
            "Messages not yet acked by the group (latest - current).",
            labels=list(self._LABELS),
        )
        age = GaugeMetricFamily(
            "queuecore_group_oldest_unacked_message_age_seconds",
            "Age of the oldest message the group has not acked (0 with no lag).",
            labels=list(self._LABELS),
        )
        in_flight = GaugeMetricFamily(
            "queuecore_group_in_flight_messages",
            "Messages delivered to the group and not acked (held or waiting for a retry).",
            labels=list(self._LABELS),
        )
        dead_letter_depth = GaugeMetricFamily(
            "queuecore_group_dlq_depth_messages",
            "Messages in the group's dead-letter queue.",
            labels=list(self._LABELS),
        )
        expired = CounterMetricFamily(
            "queuecore_group_expired_messages",
            "Messages whose TTL passed before the group delivered them (since the group's creation).",
            labels=list(self._LABELS),
        )
        for s in self.stats:
            labels = [s.project_id, s.environment, s.topic, s.group]
            dead_letter_depth.add_metric(labels, s.dead_letter_depth)
            expired.add_metric(labels, s.expired)
            lag.add_metric(labels, s.lag)
            age.add_metric(labels, round(s.oldest_unacked_seconds, 3))
            in_flight.add_metric(labels, s.in_flight)
        yield lag
        yield age
        yield in_flight
        yield dead_letter_depth
        yield expired


class _DependencyCollector(Collector):
    """The health checks' answers as gauges, so alerting rules see a store go down (``/v1/health``
    reports the same checks; a balancer polls that one, Prometheus this one)."""

    def __init__(self, checks: dict[str, str], engine: str) -> None:
        self.checks = checks
        self.engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "queuecore_store_up",
            "1 when this process reaches the store, 0 when it does not (database, redis, log_engine).",
            labels=["store"],
        )
        up.add_metric(["database"], 1 if self.checks["database"] == "ok" else 0)
        # An embedded limiter has no Redis to be down: no series rather than a reassuring 1.
        if self.checks["redis"] != "embedded":
            up.add_metric(["redis"], 1 if self.checks["redis"] == "ok" else 0)
        up.add_metric(["log_engine"], 0 if self.checks["logEngine"] == "down" else 1)
        degraded = GaugeMetricFamily(
            "queuecore_log_engine_degraded",
            "1 while the log engine serves reads but not every write (JetStream: no quorum; local: out of "
            "file descriptors).",
            labels=["engine"],
        )
        degraded.add_metric([self.engine], 1 if self.checks["logEngine"] == "degraded" else 0)
        yield up
        yield degraded


router = APIRouter(route_class=JsonRoute)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text; needs ``Authorization: Bearer <QUEUECORE_METRICS_TOKEN>`` when that is set."""
    services = request.app.state.services
    token = services.settings.metrics_token.get_secret_value()
    if token:
        presented = request.headers.get("authorization", "")
        if not hmac.compare_digest(presented.encode(), f"Bearer {token}".encode()):
            raise ApiError("INVALID_API_KEY", "A valid metrics token is required.", 401)
    checks = await dependency_checks(services)
    stats: list[groups.GroupStats] = []
    # Without the database the group gauges are unknown, but the scrape still answers: the alert that the
    # database is down needs this response.
    if checks["database"] == "ok":
        async with services.metadata.unit(readonly=True) as uow:
            stats = await groups.delivery_stats(uow, services.log, services.push_members.in_flight_by_group())
    per_group = CollectorRegistry(auto_describe=False)
    per_group.register(_GroupCollector(stats))
    per_group.register(_DependencyCollector(checks, services.settings.log_engine.value))
    body = generate_latest(services.registry) + generate_latest(per_group)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
