"""Duties one API process does for the whole cluster at a time (the retention pass): a turn is an entry of
a JetStream key-value bucket (``QC_DUTIES``, replicated like the topics), one per duty::

    {"h": "<holder>", "until": ms}

Taking a turn is a compare-and-set on that entry: created when absent, or replaced (naming the revision
read) when it is the taker's own or its ``until`` has passed. Of two processes taking one duty at once,
exactly one wins; a holder that stops renewing (it died, it was cut off) loses the turn once ``until``
passes, to whichever process asks next. ``until`` is the holder's clock: a turn lasts many times any
reasonable skew between API nodes' clocks, and one that would run beyond a whole turn from the asker's
now (a clock far ahead set it) counts as run out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import nats.errors
import orjson
from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import (
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from nats.js.kv import KeyValue

from app.stores.log.jetstream.client import KV_UNSETTLED, open_bucket, while_unsettled
from app.stores.log.protocol import EngineUnavailable

BUCKET = "QC_DUTIES"


class JetStreamDuties:
    """Turns at cluster-wide duties (see the module docstring)."""

    def __init__(self, js: Callable[[], JetStreamContext], *, replicas: int, bucket: str = BUCKET) -> None:
        self._js = js  # answers the context once connected, raises EngineUnavailable before
        self._replicas = replicas
        self._bucket_name = bucket
        self._kv: KeyValue | None = None
        self._opening = asyncio.Lock()

    async def take_turn(self, duty: str, holder: str, now_ms: int, ttl_ms: int) -> bool:
        """Whether ``holder`` has the turn at ``duty`` until ``now_ms + ttl_ms`` (taken or renewed now)."""
        value = orjson.dumps({"h": holder, "until": now_ms + ttl_ms})
        try:
            kv = await self._bucket()
            try:
                entry = await while_unsettled(lambda: kv.get(duty), KV_UNSETTLED)
            except KeyNotFoundError:
                await while_unsettled(lambda: kv.create(duty, value), KV_UNSETTLED)
                return True
            current: dict[str, Any] = orjson.loads(entry.value or b"{}")
            until = int(current.get("until", 0))
            # Another process's turn, still running. One that runs beyond a whole turn from now was set
            # by a clock far ahead of this one: stale, or it could hold the duty for as long as the skew.
            if current.get("h") != holder and now_ms < until <= now_ms + ttl_ms:
                return False
            revision = entry.revision
            await while_unsettled(lambda: kv.update(duty, value, last=revision), KV_UNSETTLED)
            return True
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            return False  # another process took it between the read and the write
        except (nats.errors.Error, TimeoutError) as exc:
            raise EngineUnavailable(f"duty turn not taken: {type(exc).__name__}") from exc

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            async with self._opening:
                if self._kv is None:
                    config = KeyValueConfig(
                        bucket=self._bucket_name, history=1, replicas=self._replicas, storage=StorageType.FILE
                    )
                    self._kv = await open_bucket(self._js(), config)
        return self._kv
