from __future__ import annotations

from typing import Literal, Optional

from .._models import BaseModel, Timestamp

__all__ = ["AlertDelivery", "AlertDeliveryPage", "AlertEndpoint", "AlertTestEvent"]


class AlertEndpoint(BaseModel):
    """The project's alert webhook (``alerts.set/get``)."""

    url: str
    secret_hint: str
    """The signing secret's last four characters."""
    state: Literal["closed", "open", "half-open"]
    """The delivery circuit breaker."""
    created_at: Timestamp
    updated_at: Timestamp
    secret: Optional[str] = None
    """Only in the answer that generated it: keep it, it is never shown again."""


class AlertTestEvent(BaseModel):
    event_id: str


class AlertDelivery(BaseModel):
    """One attempt at delivering an alert."""

    id: str
    event_id: str
    event_type: str
    attempt: int
    ok: bool
    status_code: Optional[int] = None
    error: Optional[str] = None
    duration_ms: int
    at: Timestamp


class AlertDeliveryPage(BaseModel):
    data: list[AlertDelivery]
    next_cursor: Optional[str] = None
