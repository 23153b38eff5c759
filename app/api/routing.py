"""How every REST route reads a JSON body: strictly, as the publish path does.

FastAPI reads bodies with ``json.loads``, which takes the non-standard tokens ``NaN``, ``Infinity`` and
``-Infinity``, numbers that overflow to infinity, and lone surrogate escapes. ``orjson`` refuses them all,
as the publish path (which parses with ``orjson``) always did, so every route now answers them alike: 400
"not valid JSON". No request field is allowed the NUL character either: no name, reason, URL or id needs
one, and Postgres cannot store it in text (message ``data`` is published through its own path and may).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

_NUL_ESCAPE = b"\\u0000"


class JsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            # orjson.JSONDecodeError is a json.JSONDecodeError: FastAPI answers it as malformed JSON.
            parsed = orjson.loads(body)
            if _NUL_ESCAPE in body:
                # An HTTPException is the one error FastAPI lets through from here (answered 400
                # INVALID_REQUEST with this text by app/errors.py).
                raise HTTPException(
                    400, "Strings in the request body may not contain the NUL character (\\u0000)."
                )
            self._json = parsed
        return self._json


class JsonRoute(APIRoute):
    """An ``APIRoute`` whose body is read by ``JsonRequest``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return handle
