"""``LocalLogConfig``: the local engine's knobs, frozen, built once from the settings (``app.main``).

The engine never reads the settings: whoever builds it (the app's lifespan, a test, a benchmark)
hands it this value. Names follow Kafka's (``TopicConfig``, ``LogConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LocalLogConfig:
    """What the local engine needs, for every partition it holds."""

    # Kafka's default is 1 GiB; smaller segments make retention finer-grained at our scale.
    segment_bytes: int = 256 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    # Open file handles kept by the engine; partitions beyond it are opened lazily and closed LRU.
    max_open_segments: int = 512
    retention_check_interval_ms: int = 60_000
