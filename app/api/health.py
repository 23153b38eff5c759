"""``GET /v1/health``: real dependency checks, no auth."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from starlette.responses import Response

import app
from app.api.deps import ServicesDep
from app.api.routing import JsonRoute
from app.api.schemas.common import ResponseBody
from app.services import Services


class Health(ResponseBody):
    status: str
    checks: dict[str, str]
    version: str


router = APIRouter(tags=["health"], route_class=JsonRoute)


@router.get(
    "/v1/health",
    response_model=Health,
    responses={
        503: {
            "model": Health,
            "description": "Not ready: a required dependency is down, or this process is draining.",
        }
    },
)
async def health(services: ServicesDep, response: Response) -> Health:
    """``ok`` when every dependency answers; ``degraded`` when Redis is down (limits fall back per process)
    or the log engine serves reads but not writes (a JetStream cluster without quorum: publishes answer 503);
    ``down`` (503) when the metadata store or the log engine cannot serve; ``draining`` (503) once the
    process got SIGTERM: it still answers, but a balancer should send it nothing new."""
    checks = await dependency_checks(services)
    database_ok, redis_status, engine_status = (
        checks["database"] == "ok",
        checks["redis"],
        checks["logEngine"],
    )
    if services.draining:
        status = "draining"
        response.status_code = 503
    elif not database_ok or engine_status == "down":
        status = "down"
        response.status_code = 503
    elif redis_status in ("degraded", "down") or engine_status == "degraded":
        status = "degraded"
    else:
        status = "ok"
    return Health(status=status, checks=checks, version=app.__version__)


async def dependency_checks(services: Services) -> dict[str, str]:
    """Each dependency's state, as ``/v1/health`` reports it: ``database`` (``ok``/``down``), ``redis``
    (``ok``/``degraded``/``embedded``) and ``logEngine`` (``ok``/``degraded``/``down``). ``/metrics``
    exports the same answers as gauges, so an alert and the health answer never disagree."""
    database_ok, engine_status, redis_status = await asyncio.gather(
        services.metadata.check(), _engine_status(services), services.limiter.status()
    )
    return {"database": "ok" if database_ok else "down", "redis": redis_status, "logEngine": engine_status}


async def _engine_status(services: Services) -> str:
    try:
        return await asyncio.wait_for(services.log.health(), 2.0)
    except Exception:  # noqa: BLE001 (any failure of the check means: down)
        return "down"
