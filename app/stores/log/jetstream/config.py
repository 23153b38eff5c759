"""``JetStreamConfig``: the replicated engine's knobs, frozen, built once from the settings (``app.main``).

As for the local engine (``app.stores.log.local.config``), the engine never reads the settings: whoever
builds it (the app's lifespan, a test, a benchmark) hands it this value.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JetStreamConfig:
    """What the engine needs: where the cluster is, and how it keeps its promises."""

    servers: tuple[str, ...]
    default_replicas: int = 3
    request_timeout_seconds: float = 5.0
    # A commit record older than this is rolled forward by any node (its publisher is presumed gone).
    recover_after_seconds: float = 10.0
    recovery_interval_seconds: float = 2.0
    # JetStream's dedup window on partition streams: what makes a roll-forward apply each part once.
    duplicate_window_seconds: float = 3600.0
