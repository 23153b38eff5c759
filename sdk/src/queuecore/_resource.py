"""The base of resource namespaces (``client.topics``, ``client.messages``): each holds its client."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from ._client import AsyncQueueCore, QueueCore

__all__ = ["AsyncAPIResource", "SyncAPIResource", "path_segment"]


def path_segment(value: object) -> str:
    """A value quoted for use as one path segment (``/`` included)."""
    return quote(str(value), safe="")


class SyncAPIResource:
    """A namespace of calls on a ``QueueCore`` client."""

    _client: QueueCore

    def __init__(self, client: QueueCore) -> None:
        self._client = client


class AsyncAPIResource:
    """A namespace of calls on an ``AsyncQueueCore`` client."""

    _client: AsyncQueueCore

    def __init__(self, client: AsyncQueueCore) -> None:
        self._client = client
