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
    failure): nothing of it was written, and running it again is safe. ``MetadataStore.run_unit`` runs
    it again; one that still escapes is answered as 503, like an outage."""


class AlreadyExists(Exception):
    """A write would store a second row where the store keeps one: a unique name or key is taken (a
    topic's name in its environment, a user's email, …). Nothing of that write stands; the caller decides
    what it means (usually the domain's own "already exists", as a concurrent create lost the race).

    Raised by the metadata store's repositories in place of the database driver's integrity error, so no
    caller sees SQLAlchemy."""
