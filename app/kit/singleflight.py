"""Single flight: concurrent callers asking for the same key share one in-flight computation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """Runs ``work`` once per key at a time; callers arriving meanwhile await the same result.

    Used where a cache miss would otherwise send every concurrent request to the database at once.
    """

    def __init__(self) -> None:
        self._inflight: dict[K, asyncio.Future[V]] = {}

    async def do(self, key: K, work: Callable[[], Awaitable[V]]) -> V:
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result = await work()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a failure nobody else awaited is not "never retrieved"
            raise
        finally:
            del self._inflight[key]
        future.set_result(result)
        return result
