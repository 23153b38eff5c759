"""The base of resource namespaces (``client.topics``, ``client.messages``): each holds its client."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from ._client import AsyncQueueCore, QueueCore
    from ._raw_response import AsyncRawResponse, RawResponse

__all__ = ["AsyncAPIResource", "SyncAPIResource", "path_segment"]


def path_segment(value: object) -> str:
    """A value quoted for use as one path segment (``/`` included)."""
    return quote(str(value), safe="")


class SyncAPIResource:
    """A namespace of calls on a ``QueueCore`` client."""

    _client: QueueCore

    def __init__(self, client: QueueCore) -> None:
        self._client = client

    @property
    def with_raw_response(self) -> RawResponse:
        """These calls answering an ``APIResponse`` (see ``QueueCore.with_raw_response``)."""
        from ._raw_response import RawResponse

        return RawResponse(self._client, type(self))


class AsyncAPIResource:
    """A namespace of calls on an ``AsyncQueueCore`` client."""

    _client: AsyncQueueCore

    def __init__(self, client: AsyncQueueCore) -> None:
        self._client = client

    @property
    def with_raw_response(self) -> AsyncRawResponse:
        """These calls answering an ``APIResponse`` (see ``AsyncQueueCore.with_raw_response``)."""
        from ._raw_response import AsyncRawResponse

        return AsyncRawResponse(self._client, type(self))
