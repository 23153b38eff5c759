from typing import Any, Optional

from pydantic import Field

from .._models import BaseModel, Timestamp

__all__ = ["Schedule", "ScheduleRun", "ScheduleRunList"]


class Schedule(BaseModel):
    """A schedule: a message published to ``topic`` at every due time of ``cron`` or ``every``."""

    id: str
    """``sch_…``"""
    topic: str
    cron: Optional[str] = None
    """Five-field cron, evaluated in ``timezone`` (None for an ``every`` schedule)."""
    every: Optional[str] = None
    """The period, ``<n>ms|s|m|h|d`` (None for a ``cron`` schedule)."""
    timezone: str
    """An IANA time zone name (``UTC`` by default)."""
    status: str
    """``active`` or ``paused``."""
    next_run_at: Optional[Timestamp] = None
    """The next due time; None while paused."""
    created_at: Timestamp
    data: Any = None
    """What every run publishes."""
    key: Optional[str] = None
    headers: dict[str, str] = Field(default_factory=dict)


class ScheduleRun(BaseModel):
    """One run of a schedule: its due time and the message it published."""

    at: Timestamp
    """The run's due time (also the message's ``queuecore-scheduled-at`` header)."""
    message_id: str
    partition: int
    offset: int


class ScheduleRunList(BaseModel):
    """A schedule's last runs, newest first."""

    data: list[ScheduleRun]
