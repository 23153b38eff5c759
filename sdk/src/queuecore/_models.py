"""The base of every answer model: snake_case attributes over the API's camelCase wire fields."""

from datetime import datetime, timezone
from typing import Annotated, Any, Optional

import pydantic
from pydantic import ConfigDict, PlainSerializer, PrivateAttr
from pydantic.alias_generators import to_camel

__all__ = ["BaseModel", "Timestamp", "wire_timestamp"]


def wire_timestamp(value: datetime) -> str:
    """``2026-03-28T10:42:18.003Z``: ISO-8601 UTC with milliseconds, as the API writes it."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


Timestamp = Annotated[datetime, PlainSerializer(wire_timestamp, return_type=str, when_used="json")]
"""A timezone-aware ``datetime``; dumped in JSON mode exactly as the API writes it."""


class BaseModel(pydantic.BaseModel):
    """An answer of the API.

    Attributes are snake_case (``created_at``); the wire's camelCase names (``createdAt``) are aliases, so
    ``model_dump()`` gives Python names and ``model_dump(mode="json", by_alias=True)`` gives the wire JSON.
    Fields the API adds later are kept (``extra="allow"``) rather than refused.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    _request_id: Optional[str] = PrivateAttr(default=None)

    @property
    def request_id(self) -> Optional[str]:
        """The ``X-Request-Id`` of the answer this model was read from, if any: quote it to support."""
        return self._request_id

    def to_wire(self) -> dict[str, Any]:
        """The model as the API's JSON object (camelCase names, wire timestamps)."""
        return self.model_dump(mode="json", by_alias=True)
