"""Dashboard: a group's flow control and filter (``maxInFlight``, ``rate``, ``filter``) on the group page.

The form saves through the same ``groups.upsert_config`` as the REST ``PUT``; the filter editor asks the
server to check the filter as it is typed (``…/filter/check``, an htmx partial: the same parser the broker
uses, nothing saved), and a refused save shows the error beside the field it concerns."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Request
from starlette.responses import Response

from app.broker import filters, groups
from app.broker.errors import CODED_ERRORS, CodedError
from app.dashboard.routes import _checked_form, _ctx, _group_view, _message, _services, _topic_ref, router

_FIELDS = {"maxInFlight": "max_in_flight", "rate": "rate", "filter": "filter"}


def _number(text: str, field: str, kind: type[int | float]) -> int | float | None:
    """A form's number (empty: none)."""
    text = text.strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise ValueError(field) from None


def _field_of(error: CodedError) -> str | None:
    details = getattr(error, "details", None) or []
    return details[0].get("field") if details else None


@router.post("/p/{project_id}/{env}/groups/{topic}/{group}/flow")
async def group_flow(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    """Save the group's max in flight, rate and filter (an empty field removes it)."""
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    ref = await _topic_ref(ctx, topic)
    errors: dict[str, str] = {}
    try:
        max_in_flight = _number(form.get("max_in_flight", ""), "maxInFlight", int)
        rate = _number(form.get("rate", ""), "rate", float)
        text = form.get("filter", "").strip() or None
        async with _services(request).metadata.unit() as uow:
            await groups.upsert_config(uow, ref, group, max_in_flight=max_in_flight, rate=rate, filter=text)
    except ValueError as e:
        errors[str(e)] = "Must be a number." if str(e) == "rate" else "Must be a whole number."
    except CODED_ERRORS as e:
        errors[_field_of(e) or "form"] = _message(e)
    else:
        return ctx.back(
            f"/groups/{quote(topic, safe='')}/{quote(group, safe='')}", notice="Flow control saved."
        )
    view = await _group_view(ctx, topic, group)
    return ctx.render(
        "group.html", status=400, error="Flow control not saved.", flow_form=form, flow_errors=errors, **view
    )


@router.post("/p/{project_id}/{env}/groups/{topic}/{group}/filter/check")
async def check_filter(request: Request, project_id: str, env: str, topic: str, group: str) -> Response:
    """The filter editor's live check: the parser's verdict on what is typed, as a small partial."""
    ctx = await _ctx(request, project_id, env)
    form = await _checked_form(request, ctx.user)
    text = form.get("filter", "").strip()
    verdict: dict[str, Any] = {"ok": True, "message": "No filter: every message is delivered."}
    if text:
        try:
            filters.validate(text)
            verdict = {"ok": True, "message": "Valid filter."}
        except CODED_ERRORS as e:
            verdict = {"ok": False, "message": _message(e)}
    return ctx.render("_filter_check.html", verdict=verdict)
