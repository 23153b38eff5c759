"""The DLQ breaker: a group whose deliveries fail too often pauses itself and raises an alert.

Config (``deadLetter.breaker``): ``{failureRate, minAttempts, window}``, defaults ``0.5``, ``100``,
``"60s"``; ``breaker: null`` turns it off. When, within one ``window``, at least ``minAttempts``
deliveries of the group ended (acked, or failed: a nack or an ack timeout) and more than ``failureRate``
of them failed, the group is paused with reason ``dlq-breaker`` and the alert endpoint gets a
``dlq.breaker_tripped`` event, in one unit of work. ``resume`` restarts the count.

**Counting across nodes, off the hot path.** Each API process adds outcomes up in memory
(``Outcomes.record``: a dict increment, no I/O) as acks and failures commit; a task of its own writes
them every ``FLUSH_SECONDS`` as counters on the group rows (``breaker_window_ms``, ``breaker_acked``,
``breaker_failed``): one unit of work per flush for all of the process's groups, whatever the number
of messages, and only for groups whose config has a breaker. Every node adds to the same counters, so
the rate is the group's, not one node's. The window is tumbling: the first flush after a window's end
starts a new one. The breaker thus trips at most ``FLUSH_SECONDS`` after the outcome that tipped it;
a process killed before its flush loses at most that much of its count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from dataclasses import dataclass
from typing import Any

from app.broker import alerts, durations, pauses
from app.broker.errors import InvalidRequest
from app.kit.clock import isoformat_ms, now_ms, utcnow
from app.stores.metadata.protocol import MetadataStore, MetadataUnit

logger = logging.getLogger("queuecore.breaker")

DEFAULTS: dict[str, Any] = {"failureRate": 0.5, "minAttempts": 100, "window": "60s"}
WINDOW = durations.Range(1_000, 86_400_000, "between 1s and 1d")
MAX_MIN_ATTEMPTS = 1_000_000
FLUSH_SECONDS = 0.25
CONFIG_TTL_SECONDS = 2.0  # how long a flush trusts a group's breaker config it read (a PUT may change it)
EVENT_TYPE = "dlq.breaker_tripped"


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """``deadLetter.breaker``, parsed."""

    failure_rate: float
    min_attempts: int
    window_ms: int

    @classmethod
    def of(cls, dead_letter: dict[str, Any] | None) -> BreakerConfig | None:
        """The breaker of a stored ``deadLetter`` config; a config from before breakers has the default."""
        if dead_letter is None:
            return None
        value = dead_letter.get("breaker", DEFAULTS)
        if value is None:
            return None
        merged = {**DEFAULTS, **value}
        return cls(
            float(merged["failureRate"]),
            int(merged["minAttempts"]),
            durations.parse(merged["window"], "deadLetter.breaker.window", WINDOW),
        )

    def trips(self, acked: int, failed: int) -> bool:
        ended = acked + failed
        return ended >= self.min_attempts and failed > self.failure_rate * ended


def configured(dead_letter: dict[str, Any] | None) -> bool:
    """Whether a stored ``deadLetter`` config has a breaker (outcomes of groups without one are not
    counted at all: no flush, no statement)."""
    return dead_letter is not None and dead_letter.get("breaker", DEFAULTS) is not None


def parse(value: Any) -> dict[str, Any] | None:
    """``deadLetter.breaker`` of a config PUT: None turns it off; omitted fields take their defaults."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest.field("deadLetter.breaker", "expected an object or null")
    unknown = set(value) - set(DEFAULTS)
    if unknown:
        raise InvalidRequest.field(f"deadLetter.breaker.{min(unknown)}", "unknown field")
    merged = {**DEFAULTS, **{k: v for k, v in value.items() if v is not None}}
    rate, attempts = merged["failureRate"], merged["minAttempts"]
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate < 1:
        raise InvalidRequest.field("deadLetter.breaker.failureRate", "must be a number from 0 to below 1")
    if type(attempts) is not int or not 1 <= attempts <= MAX_MIN_ATTEMPTS:
        raise InvalidRequest.field(
            "deadLetter.breaker.minAttempts", f"must be an integer between 1 and {MAX_MIN_ATTEMPTS}"
        )
    durations.parse(merged["window"], "deadLetter.breaker.window", WINDOW)
    merged["failureRate"] = float(rate) if isinstance(rate, float) else rate
    return merged


class Outcomes:
    """One process's delivery outcomes per group id, not yet written; flushed by a task of its own."""

    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata
        self._acked: dict[str, int] = {}
        self._failed: dict[str, int] = {}
        self._configs: dict[str, tuple[float, BreakerConfig | None]] = {}
        self._task: asyncio.Task[None] | None = None

    def record(self, group_id: str, *, acked: int = 0, failed: int = 0) -> None:
        """Count deliveries that ended (committed): no I/O; the flush task starts if it is not running."""
        if acked:
            self._acked[group_id] = self._acked.get(group_id, 0) + acked
        if failed:
            self._failed[group_id] = self._failed.get(group_id, 0) + failed
        if self._task is None or self._task.done():
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to flush with
                self._task = asyncio.get_running_loop().create_task(self._flush_forever())

    async def _flush_forever(self) -> None:
        while self._acked or self._failed:
            await asyncio.sleep(FLUSH_SECONDS)
            try:
                await self.flush()
            except Exception:  # the store is down or closing: counts are best effort
                logger.debug("breaker counts not written", exc_info=True)
                return

    async def flush(self) -> list[str]:
        """Write the counts of groups with a breaker, trip the ones over their rate; the group ids tripped."""
        acked, failed = self._acked, self._failed
        self._acked, self._failed = {}, {}
        wanted = sorted(set(acked) | set(failed))
        configs = await self._configs_of(wanted)
        work = [
            (g, configs[g]) for g in wanted if configs.get(g) is not None and (failed.get(g) or acked.get(g))
        ]
        if not work:
            return []

        async def write(uow: MetadataUnit) -> list[str]:
            tripped: list[str] = []
            for group_id, config in work:
                assert config is not None
                if await _add(uow, group_id, config, acked.get(group_id, 0), failed.get(group_id, 0)):
                    tripped.append(group_id)
            return tripped

        return await self._metadata.run_unit(write)

    async def _configs_of(self, group_ids: list[str]) -> dict[str, BreakerConfig | None]:
        now = time.monotonic()
        stale = [g for g in group_ids if g not in self._configs or self._configs[g][0] < now]
        if stale:
            async with self._metadata.unit(readonly=True) as uow:
                found = await uow.group_controls.dead_letter_configs(stale)
            if len(self._configs) > 50_000:
                self._configs.clear()
            for group_id in stale:
                try:
                    config = BreakerConfig.of(found.get(group_id))
                except InvalidRequest:
                    config = None
                self._configs[group_id] = (now + CONFIG_TTL_SECONDS, config)
        return {g: self._configs[g][1] for g in group_ids}


async def _add(uow: MetadataUnit, group_id: str, config: BreakerConfig, acked: int, failed: int) -> bool:
    """Add one process's counts to the (locked) group row; pause it and queue the alert when it trips."""
    group = await uow.group_controls.lock(group_id)
    if group is None:
        return False
    now = now_ms()
    window_ms, total_acked, total_failed = group.window_ms, group.acked, group.failed
    if window_ms + config.window_ms <= now:
        window_ms, total_acked, total_failed = now, 0, 0
    total_acked += acked
    total_failed += failed
    await uow.group_controls.set_counts(group_id, window_ms, total_acked, total_failed)
    if pauses.holds(group.paused_reason, group.paused_until_ms, now):
        return False  # paused already (by a user, or tripped by another node): counted, nothing more
    if not config.trips(total_acked, total_failed):
        return False
    await uow.groups.set_pause(group_id, pauses.DEAD_LETTER_BREAKER, None, utcnow())
    topic = await uow.group_controls.topic_of(group.topic_id)
    if topic is not None:
        ended = total_acked + total_failed
        await alerts.enqueue(
            uow,
            project_id=topic[0],
            environment=topic[1],
            event_type=EVENT_TYPE,
            data={
                "topic": topic[2],
                "group": group.name,
                "failed": total_failed,
                "attempts": ended,
                "failureRate": round(total_failed / ended, 4),
                "threshold": config.failure_rate,
                "window": durations_text(config.window_ms),
                "windowStart": isoformat_ms(window_ms),
            },
        )
    logger.info("dlq breaker tripped", extra={"group": group.name, "topic_id": group.topic_id})
    return True


def durations_text(ms: int) -> str:
    """Milliseconds as the largest whole ``<n>ms|s|m|h|d`` unit (the config's own text is not at hand)."""
    for unit in ("d", "h", "m", "s"):
        size = durations.UNIT_MS[unit]
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


_by_store: weakref.WeakKeyDictionary[MetadataStore, Outcomes] = weakref.WeakKeyDictionary()


def outcomes(metadata: MetadataStore) -> Outcomes:
    """The process's outcome counts for one metadata store (an app has one; tests may run several)."""
    found = _by_store.get(metadata)
    if found is None:
        found = _by_store[metadata] = Outcomes(metadata)
    return found
