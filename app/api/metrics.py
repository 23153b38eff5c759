"""``GET /metrics``: Prometheus text from this app's own registry."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.responses import Response

from app.errors import ApiError


class HttpMetrics:
    """Request counts and latency histograms by method, route template and status."""

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

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        code = str(status)
        self.requests.labels(method, route, code).inc()
        self.latency.labels(method, route, code).observe(seconds)


router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text; needs ``Authorization: Bearer <QUEUECORE_METRICS_TOKEN>`` when that is set."""
    services = request.app.state.services
    token = services.settings.metrics_token.get_secret_value()
    if token:
        presented = request.headers.get("authorization", "")
        if not hmac.compare_digest(presented.encode(), f"Bearer {token}".encode()):
            raise ApiError("INVALID_API_KEY", "A valid metrics token is required.", 401)
    return Response(generate_latest(services.registry), media_type=CONTENT_TYPE_LATEST)
