"""Messages as the engine stores them and as the wire shows them.

This module owns a message's record layout in the log engine (the engine sees bytes only) and its
rendering for readers (stream reads, pull polls, push frames, lookups by id):

    value    the message's ``data`` as JSON bytes
    key      the message key, UTF-8, or None
    headers  None, or JSON ``{"h": {header map} | null, "i": "<idempotency key>" | null}``

The idempotency key travels in the record so that publishing can rebuild its dedup index from the
records themselves after a restart. Rendering splices the stored ``data`` bytes into the answer as they
are: a read never parses or re-encodes a message's payload.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from app.broker import message_ids
from app.broker.topics import TopicRef
from app.kit.clock import isoformat_ms
from app.stores.log.protocol import Record


def encode_headers(headers: dict[str, str] | None, idempotency_key: str | None) -> bytes | None:
    """A record's ``headers`` bytes for the user headers and idempotency key (None when neither)."""
    if headers is None and idempotency_key is None:
        return None
    return orjson.dumps({"h": headers, "i": idempotency_key})


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
    headers, _ = decode_headers(record.headers)
    head = {
        "id": message_id
        or message_ids.encode(topic_id, partition, record.offset, prefix=topic.id_prefix if topic else None),
        "topic": topic_name,
        "partition": partition,
        "offset": record.offset,
        "key": record.key.decode() if record.key is not None else None,
        "headers": headers,
        "timestamp": isoformat_ms(record.timestamp_ms),
        **(extra or {}),
    }
    encoded = orjson.dumps(head)
    return encoded[:-1] + b',"data":' + record.value + b"}"
