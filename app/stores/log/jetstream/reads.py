"""Reads on JetStream: records by offset, the offset for a time, and a partition's extent and copies
(where they live: server and zone).

A read is a batch direct get (``$JS.API.DIRECT.GET``, ``client.direct_get``) from sequence ``offset + 1``,
answered by any replica of the stream (``allow_direct``), so reads spread over the cluster and go on while
a stream elects a leader. Two consequences, both handled here:

- a replica may trail the leader: an empty answer where this node knows there is more (``watermarks``, fed
  by the commit notices of every node) is asked again a few times, 2 ms apart, before it is answered empty;
- JetStream's ``max_bytes`` counts subjects and headers too: more is asked for than the caller's
  ``max_bytes``, and the records are cut by their own size (at least one is always returned).

A read asking ``bulk_read_min_records`` records or more (a bulk read's) goes over the engine's bulk read
links first (``bulk_link``: replies parsed in bulk, several times faster than one ``Msg`` each); any
answer but the plain run of records is asked again through the client, as every other read is.

Every record read advances this node's watermark of its stream, as does a ``partition_info``: what one node
has read, its watchers may wake for. A stream missing when it is read is told apart from a deleted topic by
``Streams.lookup`` (``UnknownLog`` for a deleted one; an outage stays ``EngineUnavailable``).

``describe_partitions`` asks for every partition's stream info at once and names each copy's zone
(``zones``: from the servers' tags).

``offset_for_time`` bisects the partition by record timestamp, one single-record read per step (the
timestamps are inside the records' frames, which JetStream does not index).
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

from app.stores.log.jetstream import codec
from app.stores.log.jetstream.bulk_link import BulkLink
from app.stores.log.jetstream.client import JetStreamClient, NoStream
from app.stores.log.jetstream.streams import Streams
from app.stores.log.jetstream.watermarks import Watermarks
from app.stores.log.jetstream.zones import Zones
from app.stores.log.protocol import (
    EngineUnavailable,
    LogEngineError,
    PartitionInfo,
    Record,
    RecordColumns,
    Replica,
)

_MESSAGE_OVERHEAD = 256  # subject, batch headers and framing JetStream counts in a read's max_bytes
_LAG_RETRIES = 20
# A describe of a topic of 256 partitions asks 256 streams: this many at a time (a STREAM.INFO is answered
# by the stream's leader, so they spread over the cluster).
_DESCRIBE_CONCURRENCY = 32


class Reads:
    """The engine's reads (see the module docstring). ``client`` answers the connected client, or raises
    ``EngineUnavailable`` before the engine is started."""

    def __init__(
        self,
        client: Callable[[], JetStreamClient],
        streams: Streams,
        watermarks: Watermarks,
        zones: Zones,
        bulk_link: BulkLink | None = None,
        bulk_from: int = 0,
    ) -> None:
        self._client = client
        self._streams = streams
        self._watermarks = watermarks
        self._zones = zones
        self._bulk_link = bulk_link
        self._bulk_from = bulk_from if bulk_link is not None else 0

    async def read(
        self, topic_id: str, partition: int, offset: int, max_records: int = 100, max_bytes: int = 1 << 20
    ) -> list[Record]:
        """``LogEngine.read``: committed records from ``offset`` on."""
        seqs, frames = await self._frames(topic_id, partition, offset, max_records, max_bytes)
        return [codec.decode(seq - 1, frame) for seq, frame in zip(seqs, frames, strict=True)]

    async def read_columns(
        self, topic_id: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> RecordColumns:
        """``LogEngine.read_columns``: ``read``'s records, in columns."""
        seqs, frames = await self._frames(topic_id, partition, offset, max_records, max_bytes)
        if not frames:
            return codec.decode_columns([], [])
        dense = seqs[-1] - seqs[0] == len(seqs) - 1
        return codec.decode_columns(range(seqs[0] - 1, seqs[-1]) if dense else [s - 1 for s in seqs], frames)

    async def _frames(
        self, topic_id: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> tuple[Sequence[int], list[bytes]]:
        """The frames of the records a read answers, and their sequence numbers."""
        if offset < 0:
            raise LogEngineError(f"offset {offset} is negative")
        name = codec.stream_name(topic_id, partition)
        if name not in self._streams.known:
            await self._streams.lookup(topic_id, partition)
        max_records = max(1, max_records)
        asked_bytes = max(1, max_bytes) + max_records * _MESSAGE_OVERHEAD
        seqs, frames = await self._direct_get(topic_id, partition, offset + 1, max_records, asked_bytes)
        if not frames:
            # A replica answering may trail the leader: when we know there is more, ask again.
            for _ in range(_LAG_RETRIES):
                end = self._watermarks.end(name)
                if end is None or end <= offset:
                    break
                await asyncio.sleep(0.002)
                seqs, frames = await self._direct_get(
                    topic_id, partition, offset + 1, max_records, asked_bytes
                )
                if frames:
                    break
        if not frames:
            return seqs, frames
        # JetStream's max_bytes counts subjects and headers too: ask for more, and cut by the records' own size
        # (the first always).
        ends = list(accumulate(map(len, frames)))
        if ends[-1] > max_bytes:
            keep = max(1, bisect_right(ends, max_bytes))
            seqs, frames = seqs[:keep], frames[:keep]
        self._watermarks.advance(name, seqs[-1])
        return seqs, frames

    async def _direct_get(
        self, topic_id: str, partition: int, seq: int, batch: int, max_bytes: int
    ) -> tuple[Sequence[int], list[bytes]]:
        """The payloads of up to ``batch`` records from ``seq`` on, and their sequence numbers (a ``range``
        when consecutive, as over the bulk read links)."""
        name = codec.stream_name(topic_id, partition)
        if self._bulk_link is not None and 0 < self._bulk_from <= batch:
            payloads = await self._bulk_link.read(name, seq, batch, max_bytes)
            if payloads is not None:  # None: any answer but the plain run, which the client knows
                return range(seq, seq + len(payloads)), payloads
        try:
            found = await self._client().direct_get(name, seq, batch, max_bytes)
        except NoStream:
            await self._streams.lookup(topic_id, partition)
            raise EngineUnavailable(f"no replica of {name} answers reads right now") from None
        except EngineUnavailable:
            await self._streams.unless_deleted(topic_id, partition)
            raise
        return [seq for seq, _, _ in found], [payload for _, payload, _ in found]

    async def offset_for_time(self, topic_id: str, partition: int, timestamp_ms: int) -> int:
        """``LogEngine.offset_for_time``, by bisection over the partition's records."""
        info = await self.partition_info(topic_id, partition)
        low, high = info.earliest_offset, info.latest_offset  # the answer lies in [low, high]
        while low < high:
            middle = (low + high) // 2
            seqs, payloads = await self._direct_get(topic_id, partition, middle + 1, 1, 1)
            if not payloads:
                high = middle
                continue
            seq, payload = seqs[0], payloads[0]
            if codec.timestamp_of(payload) >= timestamp_ms:
                high = min(middle, seq - 1)
            else:
                low = seq  # offset seq - 1 is too early; everything up to it is
        return low

    async def partition_info(self, topic_id: str, partition: int) -> PartitionInfo:
        """``LogEngine.partition_info``, from the stream's ``STREAM.INFO`` (zones as ``zones`` knows them)."""
        info = await self._streams.lookup(topic_id, partition)
        return self._partition_info(topic_id, partition, info, self._zones.known)

    async def describe_partitions(self, topic_id: str, partitions: int) -> list[PartitionInfo]:
        """``LogEngine.describe_partitions``: the ``STREAM.INFO`` of every partition's stream at once (at
        most ``_DESCRIBE_CONCURRENCY`` in flight), then the zones of the servers they name (one request to
        the servers, when they are not known yet: ``zones``)."""
        gate = asyncio.Semaphore(_DESCRIBE_CONCURRENCY)

        async def lookup(partition: int) -> dict[str, Any]:
            async with gate:
                return await self._streams.lookup(topic_id, partition)

        infos = await asyncio.gather(*(lookup(p) for p in range(partitions)))
        zones = await self._zones.of(name for info in infos for name in _servers(info))
        return [self._partition_info(topic_id, p, info, zones.get) for p, info in enumerate(infos)]

    def _partition_info(
        self, topic_id: str, partition: int, info: dict[str, Any], zone: Callable[[str], str | None]
    ) -> PartitionInfo:
        state = info.get("state", {})
        first, last = int(state.get("first_seq", 0)), int(state.get("last_seq", 0))
        self._watermarks.advance(codec.stream_name(topic_id, partition), last)
        earliest = max(0, first - 1) if state.get("messages") else last
        return PartitionInfo(partition, earliest, last, int(state.get("bytes", 0)), _replicas(info, zone))


def _servers(info: dict[str, Any]) -> list[str]:
    """The names of the servers holding a stream, from its info's ``cluster``."""
    cluster = info.get("cluster") or {}
    names = [str(cluster["leader"])] if cluster.get("leader") else []
    return names + [str(peer["name"]) for peer in cluster.get("replicas") or [] if peer.get("name")]


def _replicas(info: dict[str, Any], zone: Callable[[str], str | None]) -> tuple[Replica, ...]:
    """A stream's copies from its info's ``cluster``: the leader (current by definition, lag 0), then the
    followers as the leader sees them (``current``: caught up and heard from lately; ``lag``: operations
    behind, which JetStream leaves out when 0; unknown for one the leader reports ``offline``). With no
    leader, followers only. ``zone`` names each server's zone."""
    cluster = info.get("cluster") or {}
    leader = cluster.get("leader")
    found = []
    if leader:
        found.append(Replica(server=str(leader), leader=True, current=True, zone=zone(str(leader)), lag=0))
    for peer in cluster.get("replicas") or []:
        if peer.get("name"):
            name = str(peer["name"])
            found.append(
                Replica(
                    server=name,
                    leader=False,
                    current=bool(peer.get("current")),
                    zone=zone(name),
                    lag=None if peer.get("offline") else int(peer.get("lag") or 0),
                )
            )
    return tuple(found)
