"""Open connections of API keys on this API process, ended when their key no longer stands.

A key is checked when a request arrives (``keys.KeyAuthenticator``, cached for at most 0.5 s), but a
WebSocket, an SSE stream or a long poll outlives that check. Every such connection registers here for its
lifetime, under the key it was authenticated with (a connection opened with a WebSocket token belongs to
the key that minted the token). A sweep every ``interval`` seconds (0.5 by default) reads the standing of
every key with an open connection in one batched query, so a change made anywhere — another API node,
the operator CLI, the dashboard — reaches this process's connections within ``interval`` plus a query,
well inside the product's one second:

- a key revoked, deleted, or whose project is deleted: every connection of it is ended with
  ``KeyNoLongerValid`` (``INVALID_API_KEY``; the edge sends the error frame or event and closes the
  WebSocket with 1008, or answers a long poll 401);
- a tier change lowering the key's cap on push connections (``connection_cap``): the newest connections
  past the new cap are ended with ``RateLimitExceeded`` (also closed with 1008); the oldest keep going.

Nothing here knows a transport: a connection is a key id, a kind and an ``end`` callback, which must not
block (it wakes the connection's own task, which then says why and closes). SSE plugs in by registering
its streams as ``kind="sse"``; they count toward the push cap like WebSockets.

The sweep costs one indexed query per interval per process while connections are open, whatever their
number, and none when there are none; nothing is added to the publish, deliver or ack paths.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from app.broker.errors import CodedError, Draining, KeyNoLongerValid, RateLimitExceeded
from app.broker.rate_limits import Tier
from app.kit.tasks import cancel_and_wait
from app.stores.metadata.protocol import MetadataStore

logger = logging.getLogger("queuecore.connections")

Kind = Literal["websocket", "sse", "poll"]
PUSH_KINDS: frozenset[str] = frozenset({"websocket", "sse"})
"""The kinds counted toward a key's cap on push connections (a long poll is a request, not a stream)."""

# Open push connections (WebSocket, SSE) per API key on one API process, by tier; an enterprise project's
# custom limit ``connections`` overrides it. QUEUECORE_WS_MAX_CONNECTIONS_PER_KEY (the operator's abuse
# bound, 200) caps them all.
CONNECTIONS_PER_KEY: Mapping[Tier, int] = MappingProxyType(
    {Tier.developer: 50, Tier.pro: 200, Tier.enterprise: 200}
)


def connection_cap(tier: str, custom_limits: Mapping[str, Any] | None, ceiling: int) -> int:
    """How many push connections one key of a project on ``tier`` may hold open on one process."""
    try:
        cap = CONNECTIONS_PER_KEY[Tier(tier)]
    except ValueError:
        cap = CONNECTIONS_PER_KEY[Tier.developer]
    if tier == Tier.enterprise and custom_limits:
        custom = custom_limits.get("connections")
        if isinstance(custom, int) and not isinstance(custom, bool) and custom >= 1:
            cap = custom
    return min(cap, ceiling)


@dataclass(eq=False)
class Connection:
    """One open connection: whose key, what kind, and how to end it."""

    key_id: str
    kind: Kind
    end: Callable[[CodedError], None]
    seq: int = 0  # opening order on this process: the newest has the highest
    ended: CodedError | None = field(default=None, repr=False)
    # The peer hung up: it no longer counts against its key's cap, though the connection is held (and a
    # drain waits for it) until its member has left and ``close`` is called.
    released: bool = field(default=False, repr=False)


class ConnectionRegistry:
    """The open connections of this process by key, and the sweep that ends those whose key fell."""

    def __init__(self, metadata: MetadataStore, *, interval: float = 0.5, ceiling: int = 200) -> None:
        self._metadata = metadata
        self._interval = interval
        self._ceiling = ceiling
        self._by_key: dict[str, set[Connection]] = {}
        self._seq = itertools.count(1)
        self._sweeper: asyncio.Task[None] | None = None
        # drain() was called (this process is shutting down): push connections opened now end at once.
        self.draining = False

    def open(self, key_id: str, kind: Kind, end: Callable[[CodedError], None]) -> Connection:
        """Register a connection of ``key_id`` until ``close``; ``end`` is called at most once."""
        connection = Connection(key_id, kind, end, next(self._seq))
        self._by_key.setdefault(key_id, set()).add(connection)
        if self.draining and kind in PUSH_KINDS:
            # Opened after drain() (a balancer still sent it here): ended at once, before it joins.
            self._end(connection, Draining())
        return connection

    def close(self, connection: Connection) -> None:
        """The connection is over (for whatever reason): forget it."""
        held = self._by_key.get(connection.key_id)
        if held is not None:
            held.discard(connection)
            if not held:
                del self._by_key[connection.key_id]

    def release(self, connection: Connection) -> None:
        """The peer hung up: from now on the connection does not count against its key's cap, so that a
        client reconnecting at once is not refused while this one's member is still leaving."""
        connection.released = True

    def push_count(self, key_id: str) -> int:
        """Open push connections (WebSocket, SSE) of ``key_id`` on this process."""
        return sum(
            1
            for c in self._by_key.get(key_id, ())
            if c.kind in PUSH_KINDS and c.ended is None and not c.released
        )

    def cap(self, tier: str, custom_limits: Mapping[str, Any] | None) -> int:
        """``connection_cap`` under this process's ceiling."""
        return connection_cap(tier, custom_limits, self._ceiling)

    def drain(self) -> int:
        """End every push connection of this process with ``Draining`` (it is shutting down); long polls
        finish as requests do. Answers how many were ended."""
        self.draining = True
        push = [c for held in self._by_key.values() for c in held if c.kind in PUSH_KINDS and c.ended is None]
        for connection in sorted(push, key=lambda c: c.seq):
            self._end(connection, Draining())
        return len(push)

    async def drained(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every push connection to be over (closed and forgotten)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while any(c.kind in PUSH_KINDS for held in self._by_key.values() for c in held):
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="connection-key-sweep")

    async def close_all(self) -> None:
        """Stop sweeping (at shutdown; the connections end with the server)."""
        if self._sweeper is not None:
            await cancel_and_wait(self._sweeper)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.sweep()
            except Exception:  # a store outage: keep what is open, look again next time
                logger.warning("could not re-check the keys of open connections; will retry", exc_info=True)

    async def sweep(self) -> None:
        """Read the standing of every key with an open connection (one query) and end what must end."""
        if not self._by_key:
            return
        key_ids = list(self._by_key)
        async with self._metadata.unit(readonly=True) as uow:
            standing = await uow.keys.standing_of(key_ids)
        for key_id in key_ids:
            held = self._by_key.get(key_id)
            if not held:
                continue
            plan = standing.get(key_id)
            if plan is None:
                for connection in sorted(held, key=lambda c: c.seq):
                    self._end(connection, KeyNoLongerValid())
                continue
            cap = self.cap(plan.tier, plan.custom_limits)
            # Live peers only, as ``push_count`` counts them: one that hung up is still registered while its
            # member leaves, and counting it ended the live connections opened since.
            push = sorted(
                (c for c in held if c.kind in PUSH_KINDS and c.ended is None and not c.released),
                key=lambda c: c.seq,
            )
            for connection in push[cap:]:  # the newest past the cap
                self._end(
                    connection,
                    RateLimitExceeded(
                        f"This API key may now hold {cap} consumer connection{'s' if cap != 1 else ''} "
                        "open on this server (its project's tier changed); this was one of the newest."
                    ),
                )

    def _end(self, connection: Connection, error: CodedError) -> None:
        if connection.ended is not None:
            return
        connection.ended = error
        logger.info(
            "open connection ended: %s",
            error.code,
            extra={"keyId": connection.key_id, "kind": connection.kind},
        )
        try:
            connection.end(error)
        except Exception:  # one connection failing to stop must not spare the others
            logger.exception("could not end an open connection")
