"""Riding out a store outage: a database restart or failover lasts a second or two, and a push member that
gave up at once would end its connection and hand its in-flight messages to the group again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app.stores.errors import StoreUnavailable

T = TypeVar("T")

FIRST_PAUSE = 0.1  # seconds before the first try again (doubling, up to MAX_PAUSE)
MAX_PAUSE = 1.0


async def through_outages(call: Callable[[], Awaitable[T]], *, until: float) -> T:
    """``call()``, tried again while a store is unavailable, until ``until`` (``time.monotonic()``);
    then the outage's ``StoreUnavailable`` is the caller's."""
    pause = FIRST_PAUSE
    while True:
        try:
            return await call()
        except StoreUnavailable:
            if time.monotonic() + pause >= until:
                raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)
