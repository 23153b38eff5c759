"""Which partition a message goes to: explicit, else Kafka's murmur2 of the key, else round robin.

The key hash is Kafka's default partitioner exactly (``Utils.murmur2`` over the key's UTF-8 bytes,
``toPositive(h) % partitions``), so a key lands on the partition Kafka users expect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit int, as Java returns it."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's ``toPositive(murmur2(key)) % partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Routable(Protocol):
    """What the partitioner looks at in a message."""

    @property
    def key(self) -> str | None: ...

    @property
    def partition(self) -> int | None: ...


class Partitioner:
    """Spreads keyless messages evenly; one per process, shared by every topic."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, partitions: int, key: str | None, explicit: int | None) -> int:
        """The partition of one message."""
        if explicit is not None:
            return explicit
        if key is not None:
            return partition_for_key(key.encode(), partitions)
        self._next += 1
        return (self._next - 1) % partitions

    def spread(self, partitions: int, count: int) -> int:
        """The partition of the first of ``count`` keyless messages; the i-th goes to ``(first + i) %
        partitions`` (what ``assign`` says of them, without a list)."""
        first = self._next
        self._next += count
        return first % partitions

    def assign(self, partitions: int, messages: Sequence[Routable]) -> list[int]:
        """The partition of every message of a batch: exactly what ``choose`` would say of each in turn
        (only keyless messages move the round robin, so they spread evenly however keyed ones mix in)."""
        following = self._next
        out = []
        for m in messages:
            if m.partition is not None:
                out.append(m.partition)
            elif m.key is not None:
                out.append(partition_for_key(m.key.encode(), partitions))
            else:
                out.append(following % partitions)
                following += 1
        self._next = following
        return out
