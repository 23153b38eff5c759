"""Failed attempts: what counts as one, the history a lease row keeps of them, and the breaker's count.

A failed attempt is a nack or an ack timeout, nothing else (PRODUCT.md "What counts as a failed
attempt"). A member's session expiring is an ack timeout of what it held; a member that leaves cleanly
(a WebSocket closed by its client, a pull ``DELETE``, an SDK's ``stop()``) gives its messages back
unspent: they are delivered again with the same ``attempt`` (``membership.settle``).

In a group with a DLQ every failed attempt but the last is kept on its lease row as ``[at_ms, reason]``
(``failures``, JSON), written by the very statement that schedules the retry; the last one is added when
the message is dead-lettered, and the dead letter answers them as ``attempts``, oldest first.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from app.kit.clock import isoformat_ms

Attempt = tuple[int, str]  # (at_ms, reason)


def history(raw: str | None) -> list[Attempt]:
    """The failed attempts a lease row keeps (oldest first)."""
    if not raw:
        return []
    try:
        return [(int(at), str(reason)) for at, reason in orjson.loads(raw)]
    except (orjson.JSONDecodeError, TypeError, ValueError):
        return []


def with_failure(raw: str | None, at_ms: int, reason: str) -> str:
    """The row's history with one more failed attempt."""
    return orjson.dumps([*history(raw), (at_ms, reason)]).decode()


def render(attempts: Sequence[Attempt]) -> list[dict[str, str]]:
    """``attempts`` as a dead letter answers them: ``[{at, reason}]``."""
    return [{"at": isoformat_ms(at), "reason": reason} for at, reason in attempts]
