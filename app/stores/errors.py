"""Errors the stores raise themselves (the layers above map them; stores import nothing from them)."""

from __future__ import annotations

from typing import Any, ClassVar


class StoreUnavailable(Exception):
    """A store cannot serve right now: its connection is lost or refused (answered as 503).

    It carries a wire ``code`` and ``message`` like the domain's errors, so whoever answers those answers
    this one the same way (``app/errors.py``; ``app.broker.errors.CODED_ERRORS``)."""

    code: ClassVar[str] = "SERVICE_UNAVAILABLE"
    details: list[dict[str, Any]] | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StoreConflict(StoreUnavailable):
    """A unit of work lost a lock conflict the database broke for it (a deadlock, or a serialization
    failure): nothing of it was written, and running it again is safe. ``MetadataStore.transaction`` runs
    it again; one that still escapes is answered as 503, like an outage."""
