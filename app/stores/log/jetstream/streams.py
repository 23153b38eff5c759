"""A topic's partition streams, administered: created (concurrently, and rolled back whole when one fails),
described (``lookup``: a stream deleted under a call is ``UnknownLog`` to it, not an outage), changed and
deleted. One stream per partition (``codec``); every call goes to the JetStream API, and the names of the
streams seen to exist are kept in ``known`` (shared with the engine, whose appends and reads skip a
``STREAM.INFO`` for them).

Where the time of a creation goes (``bench/results/cluster.md``): every stream is a Raft group born on each
of its replicas, and the meta leader assigns them one proposal at a time. Measured on a 2-core box with
``sync_interval: always``: each replica of each stream cost its server ~15 ms of mostly kernel time (about
42 files opened, 8 directories made and 10 fsyncs), so 256 partitions × 3 replicas is ~4.5 s of CPU over
the three servers whatever the client does. Sending the creations 8 at a time or 256 at a time changed the
wall time from ~3.8 s to ~3.0 s (the meta leader's queue, not the client, is the limit), so all of a
topic's streams are asked for at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from app.stores.log.jetstream import codec
from app.stores.log.jetstream.client import JetStreamClient, JetStreamError, while_unsettled
from app.stores.log.jetstream.config import JetStreamConfig
from app.stores.log.protocol import EngineUnavailable, ReplicasUnavailable, TopicLogConfig, UnknownLog

logger = logging.getLogger(__name__)

_CREATE_CONCURRENCY = 256  # every partition of a topic at once: the meta leader queues them anyway
_ADMIN_TIMEOUT = 30.0  # creating or deleting a stream is a Raft group's birth or death: not the hot path
_NO_PLACEMENT = 10005  # "no suitable peers for placement": too few servers up for the replicas asked
_PLACEMENT_RETRIES = 12  # about 3.9 s: a creation is not the hot path, and a peer may take that to report


class _Unplaced(Exception):
    """JetStream found no servers to place a stream's replicas on (``_NO_PLACEMENT``)."""


class Streams:
    """The partition streams of every topic (see the module docstring)."""

    def __init__(
        self, client: Callable[[], JetStreamClient], config: JetStreamConfig, known: set[str]
    ) -> None:
        self._client = client  # answers the connected client, or raises EngineUnavailable
        self._config = config
        self.known = known

    async def create(
        self, topic_id: str, partitions: Iterable[int], replicas: int, config: TopicLogConfig
    ) -> None:
        """Create the streams of ``partitions`` (those that exist are left as they are). All of them, or, when
        one cannot be created, none of those this call made: the others are deleted before the error is
        raised (a topic is never left with some of its new partitions)."""
        gate = asyncio.Semaphore(_CREATE_CONCURRENCY)
        made: list[int] = []

        async def create(partition: int) -> None:
            async with gate:
                if await self._create(topic_id, partition, replicas, config):
                    made.append(partition)

        results = await asyncio.gather(*(create(p) for p in partitions), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if not failures:
            return
        if made:
            logger.warning(
                "creating %d streams of %s failed (%s); deleting the %d it made",
                len(results),
                topic_id,
                failures[0],
                len(made),
            )
            await self._delete(topic_id, made)
        raise failures[0]

    async def _create(self, topic_id: str, partition: int, replicas: int, config: TopicLogConfig) -> bool:
        """Create one stream; True when this call made it (False: it existed already)."""
        name = codec.stream_name(topic_id, partition)
        body = codec.stream_config(
            topic_id, partition, replicas, config, self.duplicate_window_ns(config.retention_ms)
        )

        async def create() -> bool:
            try:
                await self._client().api(f"STREAM.CREATE.{name}", body, stream=name, timeout=_ADMIN_TIMEOUT)
            except JetStreamError as exc:
                if exc.err_code == _NO_PLACEMENT:
                    raise _Unplaced from None
                if "already in use" not in str(exc):
                    raise
                return False
            return True

        try:
            # A cluster just started, or with a server rejoining, places nothing for a moment (its meta
            # leader has not heard from every peer yet; the suite met it under load): tried again briefly,
            # as an append without a leader is, before the count is refused.
            made = await while_unsettled(create, _Unplaced, tries=_PLACEMENT_RETRIES)
        except _Unplaced:
            raise ReplicasUnavailable(
                f"the cluster cannot place {replicas} replicas (fewer of its servers than that are up)"
            ) from None
        self.known.add(name)
        return made

    def duplicate_window_ns(self, retention_ms: int | None) -> int:
        return codec.duplicate_window_ns(self._config.duplicate_window_seconds, retention_ms)

    async def info(self, topic_id: str, partition: int) -> dict[str, Any]:
        """``STREAM.INFO`` of one partition's stream; ``UnknownLog`` when it does not exist."""
        name = codec.stream_name(topic_id, partition)
        try:
            info = await self._client().api(f"STREAM.INFO.{name}", stream=name)
        except UnknownLog:
            self.known.discard(name)
            raise UnknownLog(f"no log for {topic_id}/{partition}") from None
        self.known.add(name)
        return info

    async def lookup(self, topic_id: str, partition: int) -> dict[str, Any]:
        """``info`` of a stream a call is about to use: unanswered because the stream was deleted meanwhile,
        it is ``UnknownLog`` (the call met a deleted topic), otherwise the outage it is."""
        try:
            return await self.info(topic_id, partition)
        except EngineUnavailable:
            # A stream being deleted may leave the call unanswered: deleted by now, the call met a
            # deleted topic (PRODUCT.md "Deletion races"), not an outage.
            await self.unless_deleted(topic_id, partition)
            raise

    async def unless_deleted(self, topic_id: str, partition: int) -> None:
        """After a call on a partition's stream failed as an outage: ``UnknownLog`` if the stream is gone
        (its topic was deleted meanwhile), so that the call answers as one on a deleted topic; returns
        when the stream is still there, or when that cannot be told (the outage stands)."""
        name = codec.stream_name(topic_id, partition)
        with contextlib.suppress(EngineUnavailable):
            await self.info(topic_id, partition)
            return
        if name not in self.known and not await self._listed(topic_id, partition):
            raise UnknownLog(f"no log for {topic_id}/{partition}: deleted")

    async def _listed(self, topic_id: str, partition: int) -> bool:
        """Whether the stream is among the topic's (True when that cannot be told)."""
        try:
            return partition in await self.partitions(topic_id)
        except EngineUnavailable:
            return True

    async def partitions(self, topic_id: str) -> list[int]:
        """The partitions of a topic that have streams, in order."""
        names = await self.names(codec.SUBJECT_PREFIX + codec.token(topic_id) + ".*")
        return sorted(
            p for name in names if (parsed := codec.parse_stream_name(name)) and (p := parsed[1]) >= 0
        )

    async def names(self, subject_filter: str) -> list[str]:
        """Names of the streams whose subjects match ``subject_filter``, every page of them."""
        names: list[str] = []
        while True:
            page = await self._client().api("STREAM.NAMES", {"offset": len(names), "subject": subject_filter})
            batch = page.get("streams") or []
            names.extend(batch)
            if not batch or len(names) >= int(page.get("total", 0)):
                return names

    async def add(self, topic_id: str, partitions: int) -> None:
        """Grow a topic to ``partitions`` streams, configured as its partition 0 is."""
        first = await self.info(topic_id, 0)
        existing = await self.partitions(topic_id)
        config = first["config"]
        retention_ms = int(config.get("max_age", 0)) // 1_000_000 or None
        max_bytes = int(config.get("max_bytes", -1))
        topic_config = TopicLogConfig(
            retention_ms=retention_ms,
            retention_bytes=max_bytes if max_bytes > 0 else None,
            replicas=int(config.get("num_replicas", self._config.default_replicas)),
        )
        await self.create(
            topic_id, range(len(existing), partitions), topic_config.replicas or 1, topic_config
        )

    async def update(self, topic_id: str, config: TopicLogConfig) -> None:
        """Change every stream's retention (and the dedup window that follows it)."""
        await self.info(topic_id, 0)
        for partition in await self.partitions(topic_id):
            info = await self.info(topic_id, partition)
            body = dict(info["config"])
            body["max_age"] = (config.retention_ms or 0) * 1_000_000
            body["max_bytes"] = config.retention_bytes or -1
            body["duplicate_window"] = self.duplicate_window_ns(config.retention_ms)
            name = codec.stream_name(topic_id, partition)
            await self._client().api(f"STREAM.UPDATE.{name}", body, stream=name)

    async def delete(self, topic_id: str) -> None:
        """Delete every stream of the topic (those already gone are fine)."""
        await self._delete(topic_id, await self.partitions(topic_id))

    async def _delete(self, topic_id: str, partitions: Iterable[int]) -> None:
        gate = asyncio.Semaphore(_CREATE_CONCURRENCY)

        async def delete(partition: int) -> None:
            name = codec.stream_name(topic_id, partition)
            async with gate:
                with contextlib.suppress(UnknownLog):
                    await self._client().api(f"STREAM.DELETE.{name}", stream=name, timeout=_ADMIN_TIMEOUT)
            self.known.discard(name)

        results = await asyncio.gather(*(delete(p) for p in partitions), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
