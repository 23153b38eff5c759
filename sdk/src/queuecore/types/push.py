from __future__ import annotations

from typing import Literal, Optional

from .._models import BaseModel, Timestamp

__all__ = ["Push", "PushAttempt", "PushConfig", "PushSecret"]


class Push(BaseModel):
    """A push group's settings: the ``push=`` parameter of ``consumer_groups.update`` (a dict of these
    snake_case fields works too). Unset fields keep the server's value; ``url`` is required the first time.
    """

    url: Optional[str] = None
    """Where each message is POSTed (``https://`` in production)."""
    max_concurrency: Optional[int] = None
    """POSTs in flight at once per API process (default 16)."""
    rate: Optional[float] = None
    """Messages per second (default: no limit)."""
    timeout: Optional[str] = None
    """``100ms`` to ``5m`` (default ``10s``)."""
    ordered: Optional[bool] = None
    """One delivery in flight per partition, in offset order (default ``False``)."""
    mode: Optional[Literal["binary", "structured"]] = None
    """CloudEvents binary (default) or structured mode."""


class PushConfig(BaseModel):
    """A push group's ``config.push``, as described."""

    url: str
    max_concurrency: int
    rate: Optional[float] = None
    timeout: str
    ordered: bool
    mode: Literal["binary", "structured"]
    secret: str
    """Masked (``whsec_…abcd``), except in the answer of the update that first set ``push``: keep it, it is
    never shown again (``consumer_groups.rotate_push_secret`` makes a new one)."""
    breaker: Literal["closed", "open"]
    """The endpoint's circuit breaker, as the delivery workers last wrote it."""


class PushSecret(BaseModel):
    """A new signing secret (``rotate_push_secret``); the previous one keeps signing for 24 h."""

    secret: str


class PushAttempt(BaseModel):
    """One POST of a message to a push group's URL."""

    message_id: str
    attempt: int
    at: Timestamp
    status: Optional[int] = None
    """The HTTP status; ``None`` when no answer came (timeout, connection error)."""
    latency_ms: int
    error: Optional[str] = None
