"""The push groups' URL workers of one API process, and the attempts they record.

``UrlWorkers`` looks at the metadata store every ``PushPolicy.refresh_seconds`` for the deployment's push
groups and starts a worker (``url_push.UrlWorker``) for each new one, hands a changed config to its
worker, and stops the workers of groups no longer pushing (``push: null``, deleted). Every API process
runs one worker per push group; the group's membership gives each the partitions it owns.

``AttemptLog`` buffers the workers' attempts and writes them in one unit of work every half second,
keeping the newest ``PushPolicy.attempts_kept`` per group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime

from app.broker import message_ids, push_groups
from app.broker.delivery.url_client import DeliveryClient
from app.broker.delivery.url_push import Outcome, UrlWorker
from app.broker.errors import CODED_ERRORS
from app.broker.push_groups import PushPolicy
from app.broker.topics import TopicRef
from app.kit.sealing import SealError
from app.kit.tasks import cancel_and_wait
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import MetadataStore, NewPushAttempt

logger = logging.getLogger("queuecore.push")

_FLUSH_SECONDS = 0.5
_MAX_BUFFERED = 10_000


class AttemptLog:
    """Attempts waiting to be written; ``flush`` writes them (one multi-row insert) and trims."""

    def __init__(self, metadata: MetadataStore, keep: int) -> None:
        self._metadata = metadata
        self._keep = keep
        self._rows: list[NewPushAttempt] = []
        self._task: asyncio.Task[None] | None = None

    def add(self, group_id: str, message_id: str, attempt: int, outcome: Outcome, at: datetime) -> None:
        if len(self._rows) >= _MAX_BUFFERED:
            return  # the store is behind: the attempts API is a recent history, not an audit
        self._rows.append(
            NewPushAttempt(
                group_id, message_id, attempt, at, outcome.status, outcome.latency_ms, outcome.error
            )
        )

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="push-attempts")

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
        with contextlib.suppress(*CODED_ERRORS):
            await self.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(_FLUSH_SECONDS)
            try:
                await self.flush()
            except CODED_ERRORS as error:
                logger.warning("push attempts not written yet: %s", error.code)
            except Exception:
                logger.exception("push attempts not written")

    async def flush(self) -> None:
        rows, self._rows = self._rows, []
        if not rows:
            return
        try:
            async with self._metadata.unit() as uow:
                # A group deleted meanwhile takes its attempts with it (and would fail the insert).
                live = {t.group_id for t in await uow.push.targets()}
                rows = [r for r in rows if r.group_id in live]
                await uow.push.add_attempts(rows)
                await uow.push.trim_attempts(sorted({r.group_id for r in rows}), self._keep)
        except BaseException:
            self._rows[:0] = rows
            raise


class UrlWorkers:
    """This process's push-group workers, kept in step with the metadata store (module docstring)."""

    def __init__(
        self,
        metadata: MetadataStore,
        log: LogEngine,
        policy: PushPolicy,
    ) -> None:
        self._metadata = metadata
        self._log = log
        self.policy = policy
        self._http = DeliveryClient(policy.url_rule)
        self.attempts = AttemptLog(metadata, policy.attempts_kept)
        self._workers: dict[str, UrlWorker] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False
        self._pushing: set[tuple[str, str]] = set()  # (topic id, group name) of every push group
        self._unopenable: set[str] = set()  # push groups whose secret no key of ours opens (logged once)

    def start(self) -> None:
        self.attempts.start()
        self._task = asyncio.create_task(self._run(), name="push-workers")

    def wake_soon(self) -> None:
        """Look at the push groups shortly (this process is committing a change to one): the other
        processes see it within ``refresh_seconds``."""
        asyncio.get_running_loop().call_later(0.2, self._wake.set)

    def pushes(self, topic_id: str, group: str) -> bool:
        """Whether the group is a push group, as of the last refresh (no metadata read): how a WebSocket
        consume is refused at the upgrade; the join itself checks the store again."""
        return (topic_id, group) in self._pushing

    @property
    def client(self) -> DeliveryClient:
        """The HTTP client deliveries go through (a dashboard test event goes the same way)."""
        return self._http

    def worker(self, group_id: str) -> UrlWorker | None:
        return self._workers.get(group_id)

    async def close(self) -> None:
        """Stop every worker (each finishes its POSTs, acks and leaves its group); idempotent (draining
        closes first, the lifespan again)."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            await cancel_and_wait(self._task)
        workers, self._workers = list(self._workers.values()), {}
        await asyncio.gather(*(w.close() for w in workers), return_exceptions=True)
        await self.attempts.close()
        await self._http.aclose()

    async def _run(self) -> None:
        try:
            async with self._metadata.unit() as uow:
                if resealed := await push_groups.reseal(uow, self.policy.sealer):
                    logger.info(
                        "push signing secrets sealed under the current key", extra={"count": resealed}
                    )
        except Exception:  # a secret no key opens is reported; the other groups are delivered
            logger.exception("push signing secrets could not all be sealed again")
        while True:
            self._wake.clear()
            try:
                await self.refresh()
            except CODED_ERRORS as error:
                logger.warning("push workers not refreshed: %s", error.code)
            except Exception:
                logger.exception("push workers not refreshed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.policy.refresh_seconds)

    async def refresh(self) -> None:
        """Start, change and stop workers to match the push groups in the metadata store."""
        async with self._metadata.unit(readonly=True) as uow:
            targets = {t.group_id: t for t in await uow.push.targets()}
        self._pushing = {(t.topic_id, t.group_name) for t in targets.values()}
        for group_id in [g for g in self._workers if g not in targets]:
            worker = self._workers.pop(group_id)
            await worker.close()
        for group_id, target in targets.items():
            topic = TopicRef(
                target.topic_id,
                target.topic_name,
                target.partitions,
                target.delivery,
                message_ids.topic_prefix(target.topic_id),
                target.replicas,
            )
            running = self._workers.get(group_id)
            if running is None:
                try:
                    started = UrlWorker(
                        self._metadata, self._log, self.policy, self._http, self.attempts.add, target, topic
                    )
                except SealError as error:
                    # Its secret opens under no key of this process (sealed under another QUEUECORE_SECRET_KEY):
                    # that group cannot be signed for here; the other groups are delivered.
                    if group_id not in self._unopenable:
                        self._unopenable.add(group_id)
                        logger.error("push group %s not delivered: %s", group_id, error)
                    continue
                self._unopenable.discard(group_id)
                self._workers[group_id] = started
                started.start()
            elif running.target != target or running.topic != topic:
                running.update(target, topic)
