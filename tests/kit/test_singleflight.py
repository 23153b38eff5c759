"""Concurrent callers of one key share one computation; failures reach every waiter, then clear."""

from __future__ import annotations

import asyncio

import pytest

from app.kit.singleflight import SingleFlight


class TestSingleFlight:
    async def test_concurrent_callers_share_one_call(self):
        flight: SingleFlight[str, int] = SingleFlight()
        calls = 0

        async def work() -> int:
            nonlocal calls
            calls += 1
            await asyncio.sleep(0.01)
            return 42

        assert await asyncio.gather(*(flight.do("k", work) for _ in range(20))) == [42] * 20
        assert calls == 1
        assert await flight.do("k", work) == 42 and calls == 2  # nothing is cached after completion

    async def test_failure_reaches_waiters_and_clears(self):
        flight: SingleFlight[str, int] = SingleFlight()

        async def boom() -> int:
            await asyncio.sleep(0.01)
            raise RuntimeError("down")

        results = await asyncio.gather(*(flight.do("k", boom) for _ in range(3)), return_exceptions=True)
        assert all(isinstance(r, RuntimeError) for r in results)

        async def ok() -> int:
            return 1

        assert await flight.do("k", ok) == 1
        with pytest.raises(RuntimeError):
            await flight.do("other", boom)
