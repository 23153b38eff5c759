"""``cancel_and_wait``: a task ends, even one that loses a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from app.kit.tasks import cancel_and_wait


async def test_a_loop_that_loses_its_cancellation_is_cancelled_again():
    lost = 0
    turns = 0

    async def loop() -> None:
        nonlocal lost, turns
        while True:
            turns += 1
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if lost == 0:  # as wait_for does on Python 3.11 when its call completes at that moment
                    lost += 1
                    continue
                raise

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.05)
    await asyncio.wait_for(cancel_and_wait(task, again=0.1), 5)
    assert task.cancelled() and lost == 1
    ended_at = turns
    await asyncio.sleep(0.05)
    assert turns == ended_at


async def test_a_task_ending_with_an_error_raises_it_and_a_finished_one_returns():
    async def fails() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            raise RuntimeError("cleanup failed")

    failing = asyncio.create_task(fails())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(failing)

    done = asyncio.create_task(asyncio.sleep(0))
    await done
    await cancel_and_wait(done)
