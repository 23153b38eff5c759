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

    @property
    def ok(self) -> bool:
        """True unless the service is ``down``."""
        return self.status != "down"
