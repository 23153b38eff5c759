"""Wake-ups of the event streams (``streams.StreamMember``) served by this process, by member id.

An SSE member's acks, nacks and extends are pull calls, answered by any process. When one is answered by
the process that serves the member's stream, the stream looks again at once (room in its window, or a
nacked message due), instead of at its next pass; acks answered elsewhere are seen at that next pass. The
lease path calls ``settled`` after every settlement: one dict lookup, nothing when no stream is open.
"""

from __future__ import annotations

from collections.abc import Callable


class _Callbacks:
    """Callbacks by member id (each must not block)."""

    def __init__(self) -> None:
        self._by_member: dict[str, set[Callable[[], None]]] = {}

    def add(self, member_id: str, callback: Callable[[], None]) -> None:
        self._by_member.setdefault(member_id, set()).add(callback)

    def discard(self, member_id: str, callback: Callable[[], None]) -> None:
        held = self._by_member.get(member_id)
        if held is not None:
            held.discard(callback)
            if not held:
                del self._by_member[member_id]

    def call(self, member_id: str) -> None:
        for callback in tuple(self._by_member.get(member_id, ())):
            callback()


_waiting = _Callbacks()
_ending = _Callbacks()


def register(member_id: str, wake: Callable[[], None]) -> None:
    """``wake`` (which must not block) is called after each settlement of ``member_id``."""
    _waiting.add(member_id, wake)


def unregister(member_id: str, wake: Callable[[], None]) -> None:
    _waiting.discard(member_id, wake)


def settled(member_id: str) -> None:
    """Acks, nacks or extends of ``member_id`` were written: wake its streams on this process."""
    _waiting.call(member_id)


def register_end(member_id: str, end: Callable[[], None]) -> None:
    """``end`` (which must not block) is called when ``member_id`` leaves the group by a call."""
    _ending.add(member_id, end)


def unregister_end(member_id: str, end: Callable[[], None]) -> None:
    _ending.discard(member_id, end)


def left(member_id: str) -> None:
    """``member_id`` left its group: end its streams on this process."""
    _ending.call(member_id)
