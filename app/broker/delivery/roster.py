"""The push members connected to this process, per topic and group: built once by the app's lifespan
(``Services.push_members``) and handed to every ``push.PushMember``, never a module global.

Two uses. A member that joins, leaves or releases a partition tells its neighbours (the other members of
its group on this process), which then beat at once rather than at their next beat; those holding a
partition the joiner was given send nothing more from it until that beat is done (``push.py``
"rebalance"). And ``/metrics`` counts the in-memory leases of each group (``in_flight_by_group``: lease
rows are counted apart, from the metadata store).

Single-threaded: called on the event loop only.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Protocol

GroupKey = tuple[str, str]  # (topic id, group name)


class Neighbour(Protocol):
    """What the roster asks of a push member."""

    @property
    def group_id(self) -> str: ...

    @property
    def held_in_memory(self) -> int: ...

    def look_again(self, taken: Collection[int]) -> None:
        """A neighbour changed the group: beat now, and send nothing more from ``taken`` until then."""


class PushRoster:
    """The push members of this process, per (topic id, group)."""

    def __init__(self) -> None:
        self._by_group: dict[GroupKey, set[Neighbour]] = {}

    def add(self, key: GroupKey, member: Neighbour) -> None:
        self._by_group.setdefault(key, set()).add(member)

    def discard(self, key: GroupKey, member: Neighbour) -> None:
        members = self._by_group.get(key, set())
        members.discard(member)
        if not members:
            self._by_group.pop(key, None)

    def neighbours(self, key: GroupKey, member: Neighbour) -> Iterator[Neighbour]:
        """The other members of ``member``'s group on this process."""
        for other in self._by_group.get(key, ()):
            if other is not member:
                yield other

    def in_flight_by_group(self) -> dict[str, int]:
        """In-memory leases of this process's push members, per group id (lease rows are counted apart)."""
        counts: dict[str, int] = {}
        for members in self._by_group.values():
            for member in members:
                if member.group_id:
                    counts[member.group_id] = counts.get(member.group_id, 0) + member.held_in_memory
        return counts
