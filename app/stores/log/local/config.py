"""``LocalLogConfig``: the local engine's knobs, frozen, built once from the settings (``app.main``); and
``LogConfig``: one partition's, the engine's knobs with its topic's retention.

The engine never reads the settings: whoever builds it (the app's lifespan, a test, a benchmark)
hands it this value. Names follow Kafka's (``TopicConfig``, ``LogConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.stores.log.protocol import TopicLogConfig

# The derived budget never goes beyond this: each open segment also holds its indexes in memory.
MAX_DERIVED_OPEN_FILES = 4096


@dataclass(frozen=True, slots=True)
class LocalLogConfig:
    """What the local engine needs, for every partition it holds."""

    # Kafka's default is 1 GiB; smaller segments make retention finer-grained at our scale.
    segment_bytes: int = 256 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    # Segment files the engine keeps open (three per segment); idle ones beyond it are closed (LRU) and
    # reopened on demand. None: half the process's soft RLIMIT_NOFILE (the other half is for sockets,
    # the database and the rest), at most MAX_DERIVED_OPEN_FILES (``open_files_budget``).
    open_files: int | None = None
    # The availability zone of this machine, which describe reports for the one copy of every partition
    # (Kafka's ``broker.rack``); None: not said.
    zone: str | None = None

    def open_files_budget(self, soft_limit: int | None) -> int:
        """``open_files``, or the budget derived from the process's soft ``RLIMIT_NOFILE`` (None: unlimited).
        With a limit of 1,024, as a stock Linux gives, that is 512 files: 170 open segments."""
        if self.open_files is not None:
            return self.open_files
        if soft_limit is None:
            return MAX_DERIVED_OPEN_FILES
        return max(3, min(soft_limit // 2, MAX_DERIVED_OPEN_FILES))


@dataclass(frozen=True, slots=True)
class LogConfig:
    """A partition's knobs, with Kafka's names (``TopicConfig``)."""

    segment_bytes: int = 256 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    retention_ms: int | None = None
    retention_bytes: int | None = None

    @classmethod
    def of(cls, engine: LocalLogConfig, topic: TopicLogConfig) -> LogConfig:
        """The engine's knobs with the topic's retention."""
        return cls(
            segment_bytes=engine.segment_bytes,
            segment_ms=engine.segment_ms,
            index_interval_bytes=engine.index_interval_bytes,
            retention_ms=topic.retention_ms,
            retention_bytes=topic.retention_bytes,
        )
