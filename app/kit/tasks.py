"""Ending a background task for good."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

# A task still running this long after its cancellation is cancelled again.
AGAIN_SECONDS = 1.0


async def cancel_and_wait(task: asyncio.Task[Any], *, again: float = AGAIN_SECONDS) -> None:
    """Cancel ``task`` and wait until it has ended; its ``CancelledError`` is not the caller's, any other
    error it ends with is.

    A cancellation can be lost on Python 3.11: ``asyncio.wait_for`` returns its call's result when the call
    completes in the step the cancellation arrives (gh-86296), and a loop that lost it runs on, so that
    ``task.cancel()`` then ``await task`` waits for ever (a retention loop did, in a test). A task still
    running ``again`` seconds after a cancellation is cancelled again."""
    task.cancel()
    while not (await asyncio.wait({task}, timeout=again))[0]:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
