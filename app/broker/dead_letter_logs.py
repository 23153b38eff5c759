"""How the log engine names a group's dead-letter log (``dlq_<group id>``): one place for dlq, groups and
topics, which remove these logs with their group."""

from __future__ import annotations

PREFIX = "dlq_"


def log_id(group_id: str) -> str:
    """The engine topic holding a group's dead letters."""
    return PREFIX + group_id


def group_of(topic_id: str) -> str | None:
    """The group a dead-letter log belongs to; None for any other engine topic."""
    return topic_id.removeprefix(PREFIX) if topic_id.startswith(PREFIX + "grp_") else None
