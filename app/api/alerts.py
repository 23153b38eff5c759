"""Alert webhook calls: the key's environment's endpoint (set, show, delete), a test event, and delivery
attempts. A key sees and changes its own environment's only."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Query
from starlette.responses import Response

from app.api.deps import AdminKey, ServicesDep, UnitDep
from app.api.routing import JsonRoute
from app.api.schemas.alerts import DeliveryPage, Endpoint, EndpointIn, TestEvent
from app.broker import alerts
from app.errors import responses

router = APIRouter(prefix="/v1/alerts", tags=["alerts"], route_class=JsonRoute)

_AUTH = ("INVALID_API_KEY", "RATE_LIMIT_EXCEEDED")


def _json(payload: dict[str, object], status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


@router.put("/endpoint", response_model=Endpoint, responses=responses("INVALID_REQUEST", *_AUTH))
async def set_endpoint(body: EndpointIn, key: AdminKey, services: ServicesDep, uow: UnitDep) -> Response:
    """Set this environment's alert endpoint (http(s); in production not an internal address). Without
    ``secret`` one is generated on creation and answered once, as ``secret``."""
    view = await alerts.set_endpoint(
        uow, services.alerts.policy, key.project_id, key.environment, body.url, body.secret
    )
    return _json(view.to_wire())


@router.get("/endpoint", response_model=Endpoint, responses=responses(*_AUTH, "ALERT_ENDPOINT_NOT_FOUND"))
async def get_endpoint(key: AdminKey, services: ServicesDep, uow: UnitDep) -> Response:
    """This environment's alert endpoint and the state of its circuit breaker (never the secret)."""
    return _json(
        (await alerts.get_endpoint(uow, services.alerts.policy, key.project_id, key.environment)).to_wire()
    )


@router.delete("/endpoint", status_code=204, responses=responses(*_AUTH, "ALERT_ENDPOINT_NOT_FOUND"))
async def delete_endpoint(key: AdminKey, uow: UnitDep) -> Response:
    """Remove the endpoint; alerts not yet delivered are given up."""
    await alerts.delete_endpoint(uow, key.project_id, key.environment)
    return Response(status_code=204)


@router.post(
    "/endpoint/test",
    status_code=202,
    response_model=TestEvent,
    responses=responses(*_AUTH, "ALERT_ENDPOINT_NOT_FOUND"),
)
async def send_test_event(key: AdminKey, services: ServicesDep) -> TestEvent:
    """Queue a signed ``test`` event for the endpoint; see its attempts at ``GET /v1/alerts/deliveries``."""
    async with services.metadata.unit() as uow:
        event_id = await alerts.send_test_event(uow, key.project_id, key.environment)
    services.alerts.wake()
    return TestEvent(eventId=event_id)


@router.get("/deliveries", response_model=DeliveryPage, responses=responses("INVALID_REQUEST", *_AUTH))
async def deliveries(
    key: AdminKey,
    uow: UnitDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: str | None = None,
) -> DeliveryPage:
    """Every delivery attempt of this environment's alerts, newest first."""
    page = await alerts.deliveries(uow, key.project_id, key.environment, limit=limit, cursor=cursor)
    return DeliveryPage.model_validate({"data": page.entries, "nextCursor": page.next_cursor})
