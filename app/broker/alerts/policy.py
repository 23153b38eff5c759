"""What the alert functions and the dispatcher go by: one frozen ``AlertPolicy``, built from the settings
in one place (``AlertPolicy.from_settings``), so the domain never reads ``Settings`` itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.kit.sealing import Sealer

if TYPE_CHECKING:
    from app.settings import Settings


@dataclass(frozen=True, slots=True)
class AlertPolicy:
    """The alert rules of one deployment."""

    sealer: Sealer  # seals signing secrets at rest; signing opens them
    block_internal: bool  # the SSRF rule: no loopback, private or otherwise internal addresses (production)
    allowed_hosts: tuple[str, ...] = ()  # host names or networks exempt from the SSRF rule
    timeout_seconds: float = 5.0
    max_attempts: int = 10
    backoff_base_seconds: float = 2.0
    backoff_max_seconds: float = 900.0
    breaker_threshold: int = 5
    breaker_cooldown_seconds: float = 60.0
    poll_seconds: float = 0.5

    @classmethod
    def from_settings(cls, settings: Settings) -> AlertPolicy:
        """The one place the alert settings (``QUEUECORE_ALERT_*``, the environment) are read."""
        from app.settings import Environment

        return cls(
            sealer=settings.sealer(),
            block_internal=settings.environment is Environment.production,
            allowed_hosts=tuple(settings.alert_allowed_hosts),
            timeout_seconds=settings.alert_timeout_seconds,
            max_attempts=settings.alert_max_attempts,
            backoff_base_seconds=settings.alert_backoff_base_seconds,
            backoff_max_seconds=settings.alert_backoff_max_seconds,
            breaker_threshold=settings.alert_breaker_threshold,
            breaker_cooldown_seconds=settings.alert_breaker_cooldown_seconds,
            poll_seconds=settings.alert_poll_seconds,
        )
