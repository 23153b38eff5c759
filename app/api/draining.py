"""Draining an API process on SIGTERM, so a deploy costs its clients nothing.

``drain`` runs first (``app/kit/serving.py`` calls it, then lets uvicorn shut down): health answers 503
``draining`` (a balancer stops sending new calls), every push connection gets a ``draining`` frame and
is closed with 1012 (its member leaves at once, so the group hands its partitions to the members on other
nodes without waiting for a session timeout; the SDKs reconnect), and the process keeps serving calls
for ``drain_seconds`` so that the balancer sees the 503 before the listener goes. uvicorn then stops
accepting, finishes the requests in flight (up to ``shutdown_timeout_seconds``) and the lifespan closes the
stores, flushing what they hold. Pull members are unaffected: their calls are ordinary requests.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import FastAPI

from app.services import Services

logger = logging.getLogger("queuecore.draining")

# How long a closing push connection may take to say goodbye and leave its group.
CONNECTIONS_GRACE_SECONDS = 5.0


async def drain(application: FastAPI) -> None:
    """Start draining this process: health turns ``draining``, push connections end (1012), and this
    returns once they are gone (or after a short grace) and ``drain_seconds`` have passed."""
    services: Services | None = getattr(application.state, "services", None)
    if services is None:  # SIGTERM before the lifespan finished starting: nothing to drain
        return
    loop = asyncio.get_running_loop()
    started = loop.time()
    services.draining = True
    ended = services.connections.drain()
    logger.info("draining: health answers 503, %d push connections asked to reconnect elsewhere", ended)
    if not await services.connections.drained(CONNECTIONS_GRACE_SECONDS):
        logger.warning("draining: some push connections had not closed after %g s", CONNECTIONS_GRACE_SECONDS)
    # Push groups' URL workers finish their POSTs, ack, and leave: other nodes take their partitions now.
    await services.push_workers.close()
    rest = services.settings.drain_seconds - (loop.time() - started)
    if rest > 0:
        await asyncio.sleep(rest)
    logger.info("drained: stopping")
