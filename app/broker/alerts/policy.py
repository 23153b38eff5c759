"""What the alert functions and the dispatcher go by: one frozen ``AlertPolicy`` of plain values, built
from the settings in one place outside the domain (``app/main.py::build_alert_policy``), so the broker
never reads ``Settings`` itself."""

from __future__ import annotations

from dataclasses import dataclass

from app.kit.sealing import Sealer


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
