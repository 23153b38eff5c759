"""Base for request bodies: unknown fields and wrong JSON types are refused, never coerced."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RequestBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ResponseBody(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
