"""Server-Sent Events on the wire (the WHATWG HTML standard, "Server-sent events", section 9.2).

A stream is UTF-8 text, ``text/event-stream``. Each event is a block of ``field: value`` lines ended by an
empty line: ``event`` names it (a browser's ``EventSource`` dispatches it to the listeners of that name),
``id`` sets the id the browser sends back as ``Last-Event-ID`` when it reconnects, ``data`` carries the
payload (one ``data`` line per line of it; the client joins them with newlines), ``retry`` sets the
browser's reconnection delay in milliseconds. A line starting with ``:`` is a comment, ignored by
clients: it keeps an idle connection (and the proxies on its way) alive.

Nothing here knows QueueCore: the edge decides which events to send.
"""

from __future__ import annotations

MEDIA_TYPE = "text/event-stream"


def _field(name: bytes, value: bytes) -> bytes:
    # A value may not hold a line break: each line becomes its own field line (``data`` lines are joined
    # again by the client; ``event``/``id`` never hold one in what we send).
    return b"".join(name + b": " + line + b"\n" for line in value.splitlines() or [b""])


def event(name: str, data: bytes, *, id: str | None = None, retry_ms: int | None = None) -> bytes:
    """One event: ``event: <name>``, ``id`` and ``retry`` when given, then ``data``, then a blank line."""
    out = b"event: " + name.encode() + b"\n"
    if id is not None:
        out += _field(b"id", id.encode())
    if retry_ms is not None:
        out += b"retry: %d\n" % retry_ms
    return out + _field(b"data", data) + b"\n"


def comment(text: str) -> bytes:
    """A comment line (``: <text>``), which clients ignore: a keepalive."""
    return b": " + text.encode() + b"\n\n"
