"""Messages as the engine stores them and as the wire shows them.

This module owns a message's record layout in the log engine (the engine sees bytes only) and its
rendering for readers (stream reads, pull polls, push frames, lookups by id):

    value    the message's ``data`` as JSON bytes
    key      the message key, UTF-8, or None
    headers  None, or JSON ``{"d": <deliverAt ms>?, "x": <expiresAt ms>?, "h": {header map} | null,
             "i": "<idempotency key>" | null}`` (``d`` and ``x`` only when set, and first: see
             ``timing.is_timed``)

The idempotency key travels in the record so that publishing can rebuild its dedup index from the
records themselves after a restart. Rendering splices the stored ``data`` bytes into the answer as they
are: a read never parses or re-encodes a message's payload.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from app.broker import message_ids
from app.broker.timing import TIMED_PREFIXES
from app.broker.topics import TopicRef
from app.kit.clock import isoformat_ms
from app.stores.log.protocol import Record


def idempotency_headers(idempotency_key: str) -> bytes:
    """``encode_headers`` of a record with an idempotency key and nothing else (a keyed batch's items),
    written without a dict: the publisher makes one per message."""
    return b'{"h":null,"i":' + orjson.dumps(idempotency_key) + b"}"


def encode_headers(
    headers: dict[str, str] | None,
    idempotency_key: str | None,
    deliver_at_ms: int | None = None,
    expires_at_ms: int | None = None,
) -> bytes | None:
    """A record's ``headers`` bytes for the user headers, idempotency key, due time and expiry (None when
    none of them)."""
    if deliver_at_ms is None and expires_at_ms is None:
        if headers is None:
            return None if idempotency_key is None else idempotency_headers(idempotency_key)
        return orjson.dumps({"h": headers, "i": idempotency_key})
    meta: dict[str, Any] = {}
    if deliver_at_ms is not None:
        meta["d"] = deliver_at_ms
    if expires_at_ms is not None:
        meta["x"] = expires_at_ms
    meta["h"], meta["i"] = headers, idempotency_key
    return orjson.dumps(meta)


def decode_headers(raw: bytes | None) -> tuple[dict[str, str], str | None]:
    """The user headers (``{}`` when none) and the idempotency key of a stored record."""
    if not raw:
        return {}, None
    meta = orjson.loads(raw)
    return meta.get("h") or {}, meta.get("i")


def render_message(
    topic_name: str,
    topic: TopicRef | None,
    topic_id: str,
    partition: int,
    record: Record,
    extra: Mapping[str, Any] | None = None,
    *,
    message_id: str | None = None,
) -> bytes:
    """A stored message as the wire shows it, with ``data`` spliced in as the JSON bytes it was stored as."""
    raw = record.headers
    meta = orjson.loads(raw) if raw else None
    deliver_at = expires_at = None
    if meta is not None and raw is not None and raw[:5] in TIMED_PREFIXES:
        deliver_at, expires_at = meta.get("d"), meta.get("x")
    head = {
        "id": message_id
        or message_ids.encode(topic_id, partition, record.offset, prefix=topic.id_prefix if topic else None),
        "topic": topic_name,
        "partition": partition,
        "offset": record.offset,
        "key": record.key.decode() if record.key is not None else None,
        "headers": (meta.get("h") or {}) if meta is not None else {},
        "timestamp": isoformat_ms(record.timestamp_ms),
        "deliverAt": isoformat_ms(deliver_at) if deliver_at is not None else None,
        "expiresAt": isoformat_ms(expires_at) if expires_at is not None else None,
        **(extra or {}),
    }
    encoded = orjson.dumps(head)
    return encoded[:-1] + b',"data":' + record.value + b"}"
