"""The schedule runner: in every API process, a loop that publishes each due run of every schedule once.

Exactly once per due time, whatever the number of nodes, restarts or crashes:

1. **Claim.** A node reads the due, unclaimed runs and claims each with a conditional update on the due
   time it saw (``next_run_ms = :seen AND claimed_until_ms <= now``): one node wins; the claim holds for
   ``claim_seconds`` (a node that dies holding it delays the run by that long; on JetStream, one that died
   between claiming the publish's idempotency key and placing its message holds the run until the key
   is stale, 15 s, since a slow append of its may still land).
2. **Publish** through the broker's publish path with the idempotency key ``queuecore-schedule:<id>:<due
   ms>``: if the claim ran out under a slow publish, or the node died between publishing and recording,
   the next node's publish of the same run is answered by the first message (one namespace per topic,
   every node sees it: ``app/broker/idempotency.py``; the local engine rebuilds it from the log).
3. **Record** the run and move ``next_run_ms`` on in one unit of work fenced on the due time published:
   a second recorder of the same run changes nothing.

The catch-up rule (``docs/scheduling.md``): the run stored as due always fires, however late. The next due
time is the one after it, unless that one is already more than ``catch_up_seconds`` in the past: then every
due time missed meanwhile is skipped and the schedule continues from the first due time after now. So a
short stall (a node's claim running out, a busy machine) catches up every run in order, and a long outage
ends in one late run, not a burst.

Each run is fired as a task of its own: a slow publish (a partition electing its leader, a key held by a
dead node) holds up that schedule only, never the others (it did: one pass waited for all its runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from functools import partial

from app.broker.errors import CODED_ERRORS, TopicNotFound
from app.broker.publishing import OutgoingMessage, Publisher
from app.broker.schedules.service import message_headers
from app.broker.schedules.timing import Cadence
from app.broker.topics import Scope
from app.kit.clock import now_ms, utcnow
from app.kit.tasks import cancel_and_wait
from app.stores.log.protocol import LogEngineError
from app.stores.metadata.protocol import DueRun, MetadataStore, ScheduleRunRow

logger = logging.getLogger(__name__)

_BATCH = 64  # due runs read per pass; more wait for the next pass (which comes at once)


def idempotency_key(schedule_id: str, due_ms: int) -> str:
    """The publish idempotency key of one run: the same for every node and every retry of it."""
    return f"queuecore-schedule:{schedule_id}:{due_ms}"


class ScheduleRunner:
    """Publishes due schedule runs; one per API process (see the module docstring)."""

    def __init__(
        self,
        metadata: MetadataStore,
        publisher: Publisher,
        *,
        poll_seconds: float = 0.25,
        claim_seconds: float = 5.0,
        catch_up_seconds: float = 30.0,
        runs_kept: int = 100,
        clock: Callable[[], int] = now_ms,
        project_id: str | None = None,
    ) -> None:
        """``project_id``: run only that project's schedules (None, the server's case: all of them); a
        runner on its own clock beside the server's (a test) keeps to its own project this way."""
        self._metadata = metadata
        self._publisher = publisher
        self.poll_seconds = poll_seconds
        self.claim_ms = round(claim_seconds * 1000)
        self.catch_up_ms = round(catch_up_seconds * 1000)
        self.runs_kept = runs_kept
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._project_id = project_id
        self._firing: dict[str, asyncio.Task[bool]] = {}  # schedule id → the task firing its run
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run_forever(), name="schedule-runner")

    async def close(self) -> None:
        """Stop; a run claimed and not recorded is taken over by another node once its claim runs out."""
        tasks = [t for t in (self._task, *self._firing.values()) if t is not None]
        await asyncio.gather(*(cancel_and_wait(task) for task in tasks))

    async def _run_forever(self) -> None:
        while True:
            self._wake.clear()
            try:
                # Runs go on as tasks: one slow publish (a topic electing its leader, a key another node
                # died appending) holds up no other schedule.
                started = await self.run_once(wait=False)
            except CODED_ERRORS as error:  # the metadata store is down: try again shortly
                logger.warning("schedule runner paused: %s", error.code)
                started = 0
            except Exception:  # never let the loop die
                logger.exception("schedule runner pass failed")
                started = 0
            if not started:
                # A run recorded wakes the loop at once: a schedule behind catches up back to back.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_seconds)

    async def run_once(self, *, wait: bool = True) -> int:
        """One pass: claim the due runs, publish and record each. With ``wait`` (tests), how many this
        node recorded once they all are; without, how many it started (the loop's case)."""
        now = self._clock()
        async with self._metadata.unit(readonly=True) as uow:
            due = await uow.schedules.due(now, _BATCH, self._project_id)
        # A schedule whose run this node is still firing is left to that task (its claim may have run out
        # under a slow publish; the task records the run or leaves it to whoever claims it next).
        due = [run for run in due if run.schedule_id not in self._firing]
        if not due:
            return 0
        tasks = []
        for run in due:
            task = asyncio.create_task(self._fire(run), name=f"schedule-run-{run.schedule_id}")
            self._firing[run.schedule_id] = task
            task.add_done_callback(partial(self._fired, run.schedule_id))
            tasks.append(task)
        if not wait:
            return len(tasks)
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome
        return sum(1 for outcome in outcomes if outcome is True)

    def _fired(self, schedule_id: str, task: asyncio.Task[bool]) -> None:
        if self._firing.get(schedule_id) is task:
            del self._firing[schedule_id]
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, CODED_ERRORS):  # the metadata store is down: the claim runs out, tried again
            logger.warning("schedule run paused: %s", error.code, extra={"schedule": schedule_id})
        elif error is not None:
            logger.error("schedule run failed", exc_info=error, extra={"schedule": schedule_id})
        elif task.result():
            self._wake.set()

    async def _fire(self, run: DueRun) -> bool:
        now = self._clock()
        async with self._metadata.unit() as uow:
            if not await uow.schedules.claim(run.schedule_id, run.due_ms, now, now + self.claim_ms):
                return False  # another node has it, or recorded it already
        message = OutgoingMessage(
            run.data.encode(),  # JSON text as stored at creation
            run.key,
            message_headers(run.schedule_id, run.due_ms, run.headers),
            None,
            None,
        )
        scope = Scope(run.project_id, run.environment)
        try:
            topic, placed, _ = await self._publisher.publish(
                scope, run.topic_name, message, idempotency_key(run.schedule_id, run.due_ms)
            )
        except TopicNotFound:  # deleted meanwhile: its schedules went with it
            return False
        except (*CODED_ERRORS, LogEngineError) as error:  # retried once the claim runs out
            logger.warning(
                "schedule run not published; retried shortly",
                extra={"schedule": run.schedule_id, "code": getattr(error, "code", type(error).__name__)},
            )
            return False
        cadence = Cadence(run.cron, run.every_ms, run.timezone, run.anchor_ms)
        next_ms = cadence.next_after(run.due_ms)
        now = self._clock()
        if now - next_ms > self.catch_up_ms:  # a long outage: one late run, then on from now
            next_ms = cadence.next_after(now)
        async with self._metadata.unit() as uow:
            if not await uow.schedules.advance(run.schedule_id, run.due_ms, next_ms):
                return False  # recorded by another node (same message: same idempotency key)
            await uow.schedules.add_run(
                ScheduleRunRow(
                    schedule_id=run.schedule_id,
                    at_ms=run.due_ms,
                    message_id=self._publisher.message_id(topic, placed.partition, placed.offset),
                    partition=placed.partition,
                    offset=placed.offset,
                    published_at=utcnow(),
                ),
                self.runs_kept,
            )
        return True
