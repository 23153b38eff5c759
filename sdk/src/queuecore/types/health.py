from typing import Optional

from .._models import BaseModel

__all__ = ["Health"]


class Health(BaseModel):
    """The service's readiness (``health()``), answered without an API key."""

    status: str
    """``ok``, ``degraded`` or ``down``."""
    checks: dict[str, str]
    """Per dependency (wire names: ``database``, ``redis``, ``logEngine``): ``ok``, ``degraded``, ``down``
    or ``embedded``."""
    version: str
    """The server's version (empty when it did not answer)."""
    error: Optional[str] = None
    """Why the service counts as ``down`` when it did not answer (unreachable, timed out, not QueueCore)."""

    @classmethod
    def unreachable(cls, why: str) -> "Health":
        """``down``: what ``health()`` answers for a service it could not reach."""
        return cls(status="down", checks={}, version="", error=why)

    @property
    def ok(self) -> bool:
        """True unless the service is ``down``."""
        return self.status != "down"
