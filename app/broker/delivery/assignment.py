"""Sticky assignment: every partition to exactly one live member, balanced, moving as few as possible.

With ``P`` partitions and ``M`` members each member gets ``P // M`` partitions, and ``P % M`` of them one
more. A member keeps as many of the partitions it owns as its share allows (members owning more are
given the larger shares first); only the rest move, to the members furthest below their share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def assign(
    partitions: int, members: Sequence[str], current: Mapping[int, str | None]
) -> dict[int, str | None]:
    """The new owner of each partition ``0..partitions-1`` (None only when there are no members)."""
    if not members:
        return {p: None for p in range(partitions)}
    live = set(members)
    owned: dict[str, list[int]] = {m: [] for m in members}
    for p in range(partitions):
        owner = current.get(p)
        if owner in live:
            owned[owner].append(p)
    base, extra = divmod(partitions, len(members))
    # The larger shares go to the members that already own the most: fewer moves.
    order = sorted(members, key=lambda m: (-len(owned[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    result: dict[int, str | None] = {}
    free: list[int] = []
    for m in members:
        keep, give = owned[m][: quota[m]], owned[m][quota[m] :]
        for p in keep:
            result[p] = m
        free.extend(give)
    free.extend(p for p in range(partitions) if current.get(p) not in live)
    free.sort()
    load = {m: len(owned[m][: quota[m]]) for m in members}
    for p in free:
        target = min((m for m in members if load[m] < quota[m]), key=lambda m: (load[m] - quota[m], m))
        result[p] = target
        load[target] += 1
    return dict(sorted(result.items()))
