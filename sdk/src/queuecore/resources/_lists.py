"""Reading ``{"data": [...]}`` answers into lists of models."""

from __future__ import annotations

from typing import TypeVar

import httpx
import pydantic

from .._base_client import read_json
from .._exceptions import APIResponseValidationError
from .._models import BaseModel

_ModelT = TypeVar("_ModelT", bound=BaseModel)


def parse_list(cls: type[_ModelT], response: httpx.Response) -> list[_ModelT]:
    """The models of a ``{data: [...]}`` answer; ``APIResponseValidationError`` when it does not fit."""
    body = read_json(response)
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise APIResponseValidationError(response, body, "The answer is not a {data} list.")
    try:
        items = [cls.model_validate(item) for item in body["data"]]
    except pydantic.ValidationError as exc:
        raise APIResponseValidationError(
            response, body, f"The answer does not list {cls.__name__}: {exc}"
        ) from exc
    request_id = response.headers.get("x-request-id")
    for item in items:
        item._request_id = request_id
    return items
