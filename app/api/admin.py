"""The operators' admin API: a project's tier, custom limits and quotas over HTTP, as the CLI does.

Authenticated by ``Authorization: Bearer <QUEUECORE_ADMIN_TOKEN>``, not by a project key; disabled (403)
when no token is configured. Changes apply on every API node within one second.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from app.api.deps import UnitDep
from app.api.routing import JsonRoute
from app.api.schemas.common import RequestBody, ResponseBody
from app.api.schemas.constraints import CustomLimits, TierName
from app.broker import quotas, tenancy
from app.broker.rate_limits import Category, limit_for
from app.errors import ApiError, responses


class TierUpdate(RequestBody):
    tier: TierName = Field(examples=["enterprise"], description="developer, pro or enterprise")
    limits: CustomLimits | None = Field(
        None,
        examples=[{"publish": 5000, "consume": 2000, "admin": 100, "topics": 5000, "storedBytes": 5 << 40}],
        description="Enterprise only, replacing any set before: requests per second per category (publish, "
        "consume, admin) and quotas (topics, partitions, groups, schedules, pushGroups, storedBytes); "
        "one left out is the pro tier's.",
    )


class Project(ResponseBody):
    id: str
    name: str
    tier: str
    customLimits: dict[str, int] | None
    limits: dict[str, int] = Field(description="What each key of the project is allowed now, per category.")
    quotas: dict[str, int] = Field(
        description="What the project may hold now, per quota: topics, partitions, schedules and pushGroups "
        "per environment, groups per topic, storedBytes over the project."
    )


async def operator(request: Request) -> None:
    """Require the operators' token."""
    token = request.app.state.services.settings.admin_token.get_secret_value()
    if not token:
        raise ApiError("FORBIDDEN", "The admin API is disabled: set QUEUECORE_ADMIN_TOKEN to enable it.")
    presented = request.headers.get("authorization", "").encode()
    if not hmac.compare_digest(presented, f"Bearer {token}".encode()):
        raise ApiError("INVALID_API_KEY", "A valid admin token is required.")


Operator = Annotated[None, Depends(operator)]
router = APIRouter(prefix="/v1/admin/projects", tags=["admin"], route_class=JsonRoute)


def _project(view: tenancy.ProjectView) -> Project:
    return Project(
        id=view.id,
        name=view.name,
        tier=view.tier,
        customLimits=view.custom_limits,
        limits={c.value: limit_for(view.tier, view.custom_limits, c) for c in Category},
        quotas=quotas.QuotaLimits(view.tier, view.custom_limits).all(),
    )


@router.get(
    "/{project}", response_model=Project, responses=responses("INVALID_API_KEY", "FORBIDDEN", "NOT_FOUND")
)
async def get_project(project: str, _: Operator, uow: UnitDep) -> Project:
    """A project (by id or name) with its tier and effective limits."""
    return _project(await tenancy.describe_project(uow, project))


@router.put(
    "/{project}/tier",
    response_model=Project,
    responses=responses("INVALID_REQUEST", "INVALID_API_KEY", "FORBIDDEN", "NOT_FOUND"),
)
async def set_tier(project: str, body: TierUpdate, _: Operator, uow: UnitDep) -> Project:
    """Set a project's tier, and custom limits for the enterprise tier."""
    limits = None
    if body.limits is not None:
        limits = tenancy.parse_custom_limits(",".join(f"{k}={v}" for k, v in body.limits.items()))
    return _project(await tenancy.set_tier(uow, project, tenancy.parse_tier(body.tier), limits))
