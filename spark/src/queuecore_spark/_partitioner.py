"""Where the service puts a keyed message: Kafka's default partitioner, ``toPositive(murmur2(key)) % n``.

The writer groups rows by the partition they will land on, so that each request appends to one partition
(no cross-partition commit record) and requests to different partitions can travel at once. The service
decides the placement of a keyed message itself; this copy of its rule (the server's is
``app/broker/partitioner.py``, which this package may not import) only has to agree with it for the
grouping to be right, and ``tests/spark/test_write.py`` checks that it does.
"""

from __future__ import annotations

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


def partition_for_key(key: str, partitions: int) -> int:
    """The partition the service gives a message with this key."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions
