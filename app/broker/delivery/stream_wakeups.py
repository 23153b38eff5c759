"""Wake-ups of the event streams (``streams.StreamMember``) served by this process, by member id.

An SSE member's acks, nacks and extends are pull calls, answered by any process. When one is answered by
the process that serves the member's stream, the stream looks again at once (room in its window, or a
nacked message due), instead of at its next pass; acks answered elsewhere are seen at that next pass. The
lease path calls ``settled`` after every settlement: one dict lookup, nothing when no stream is open.
"""

from __future__ import annotations

from collections.abc import Callable

_waiting: dict[str, set[Callable[[], None]]] = {}
_ending: dict[str, set[Callable[[], None]]] = {}


def register(member_id: str, wake: Callable[[], None]) -> None:
    """``wake`` (which must not block) is called after each settlement of ``member_id``."""
    _waiting.setdefault(member_id, set()).add(wake)


def unregister(member_id: str, wake: Callable[[], None]) -> None:
    held = _waiting.get(member_id)
    if held is not None:
        held.discard(wake)
        if not held:
            del _waiting[member_id]


def settled(member_id: str) -> None:
    """Acks, nacks or extends of ``member_id`` were written: wake its streams on this process."""
    for wake in tuple(_waiting.get(member_id, ())):
        wake()


def register_end(member_id: str, end: Callable[[], None]) -> None:
    """``end`` (which must not block) is called when ``member_id`` leaves the group by a call."""
    _ending.setdefault(member_id, set()).add(end)


def unregister_end(member_id: str, end: Callable[[], None]) -> None:
    held = _ending.get(member_id)
    if held is not None:
        held.discard(end)
        if not held:
            del _ending[member_id]


def left(member_id: str) -> None:
    """``member_id`` left its group: end its streams on this process."""
    for end in tuple(_ending.get(member_id, ())):
        end()
