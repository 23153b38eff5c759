"""Quotas: how much a project may hold, per tier. One table; each quota is enforced where things are made.

Per environment unless said (``Quota``):

============== ============================== =========== ========== ===================
quota          counts                         developer   pro        enterprise
============== ============================== =========== ========== ===================
topics         topics                         100         2,000      custom (pro's)
partitions     partitions summed over topics  500         20,000     custom (pro's)
groups         consumer groups *per topic*    20          500        custom (pro's)
schedules      schedules                      25          1,000      custom (pro's)
pushGroups     push groups                    10          250        custom (pro's)
storedBytes    bytes stored, *per project*    10 GiB      1 TiB      custom (pro's)
============== ============================== =========== ========== ===================

Enterprise quotas are set per project by an operator (``projects set-tier --limits topics=N,…``, stored in
``Project.custom_limits`` beside the rate limits); one left unset is pro's. Going over answers
``QuotaExceeded`` (403 ``QUOTA_EXCEEDED``) with ``details: [{"field": <quota>, "issue": "limit <n>, used
<m>"}]``, and nothing is created in part.

How each is held, and why it cannot be overshot by concurrent requests:

- ``topics`` and ``partitions`` (topic create, partition increase): ``lock_project`` locks the project row
  in the unit of work that inserts or grows the topic, then counts; the next creator of the project waits
  for that commit and counts what it made. (``FOR NO KEY UPDATE``: topic and key inserts' foreign-key
  checks are not blocked by it. SQLite serialises every write unit of work anyway.)
- ``groups`` (group config ``PUT``, and the first join or WebSocket consume, which creates a group):
  ``groups.ensure_group`` locks the topic row (``lock_topic``) before counting and inserting.
- ``storedBytes``: publishes are refused while the project's stored bytes are at or over the quota.
  The size is summed from the log engine's partition sizes by ``StoredBytes`` (``stored_bytes.py``) at most
  every few seconds per project, off the publish path, so a project may go over by what it publishes in
  that time.
- ``schedules`` (``app/broker/schedules/service.py``): the unit of work that inserts a schedule locks the
  project (``lock_project``), counts the environment's schedules, then checks, as topics do.
- ``pushGroups`` (``app/broker/push_groups.py``): a group config ``PUT`` that sets ``push`` locks the
  project (``push_groups.lock_quota``, before the group row: project → topic → group, as above); the
  ``set_push`` that turns a group into a push group counts the environment's push groups
  (``PushStore.count``) and checks before it adds the endpoint. Changing a push group's config, or turning
  push off, is no new one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from app.broker.errors import ProjectNotFound, QuotaExceeded, TopicNotFound
from app.broker.rate_limits import Tier
from app.kit.digits import is_ascii_digits
from app.stores.metadata.protocol import MetadataUnit

GIB = 1 << 30
TIB = 1 << 40


class Quota(enum.StrEnum):
    """A quota's name: the ``field`` of a ``QUOTA_EXCEEDED`` answer and the key of a custom limit."""

    topics = "topics"
    partitions = "partitions"
    groups = "groups"  # consumer groups per topic
    schedules = "schedules"
    push_groups = "pushGroups"
    stored_bytes = "storedBytes"  # per project, over its three environments


# What each quota counts, for messages and the dashboard.
DESCRIPTIONS: Mapping[Quota, str] = MappingProxyType(
    {
        Quota.topics: "topics per environment",
        Quota.partitions: "partitions per environment (summed over its topics)",
        Quota.groups: "consumer groups per topic",
        Quota.schedules: "schedules per environment",
        Quota.push_groups: "push groups per environment",
        Quota.stored_bytes: "stored bytes per project",
    }
)

_PRO: Mapping[Quota, int] = MappingProxyType(
    {
        Quota.topics: 2000,
        Quota.partitions: 20_000,
        Quota.groups: 500,
        Quota.schedules: 1000,
        Quota.push_groups: 250,
        Quota.stored_bytes: TIB,
    }
)

DEFAULT_QUOTAS: Mapping[Tier, Mapping[Quota, int]] = MappingProxyType(
    {
        Tier.developer: MappingProxyType(
            {
                Quota.topics: 100,
                Quota.partitions: 500,
                Quota.groups: 20,
                Quota.schedules: 25,
                Quota.push_groups: 10,
                Quota.stored_bytes: 10 * GIB,
            }
        ),
        Tier.pro: _PRO,
        # Until an operator sets custom quotas, enterprise holds as much as pro.
        Tier.enterprise: _PRO,
    }
)


def limit_for(tier: Tier | str, custom_limits: Mapping[str, object] | None, quota: Quota | str) -> int:
    """The quota's limit on ``tier``, honouring enterprise custom limits (a missing or unusable entry
    is the tier's default). An unknown tier or quota raises ``ValueError``."""
    # On every publish: plain dict lookups, no Enum construction (StrEnum members are their values).
    if custom_limits and tier == Tier.enterprise:
        custom = custom_limits.get(quota)
        if type(custom) is int and custom >= 0:  # bool is no limit; 0 is: nothing of that kind
            return custom
    found = _DEFAULTS.get((tier, quota))
    if found is not None:
        return found
    tier, quota = Tier(tier), Quota(quota)
    if tier is Tier.enterprise and custom_limits:
        custom = custom_limits.get(quota.value)
        # bool is an int subclass; ``True`` is not a limit. 0 is: nothing of that kind may be made.
        if isinstance(custom, int) and not isinstance(custom, bool) and custom >= 0:
            return custom
    return DEFAULT_QUOTAS[tier][quota]


# The table by plain (tier, quota) strings; StrEnum members hash and compare as their values.
_DEFAULTS: dict[tuple[str, str], int] = {
    (t.value, q.value): n for t, per in DEFAULT_QUOTAS.items() for q, n in per.items()
}


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """A project's quotas, read from its row: what ``check`` holds a count against."""

    tier: str
    custom_limits: Mapping[str, object] | None

    def limit(self, quota: Quota) -> int:
        return limit_for(self.tier, self.custom_limits, quota)

    def all(self) -> dict[str, int]:
        """Every quota's limit by name."""
        return {q.value: self.limit(q) for q in Quota}


def check(quota: Quota, limits: QuotaLimits, used: int, adding: int = 1) -> None:
    """Refuse (``QuotaExceeded``) making ``adding`` more when ``used`` are already there."""
    limit = limits.limit(quota)
    if used + adding > limit:
        raise QuotaExceeded(quota.value, DESCRIPTIONS[quota], limit, used, adding)


async def lock_project(uow: MetadataUnit, project_id: str) -> QuotaLimits:
    """Lock the project row for this unit of work and answer its quotas (its tier as committed now).

    Every unit of work that makes something a per-environment quota counts locks the project first, so
    counts taken after it see every earlier creator's commit."""
    project = await uow.projects.lock(project_id)
    if project is None:  # deleted under the caller (its keys go with it)
        raise ProjectNotFound(project_id)
    return QuotaLimits(project.tier, project.custom_limits)


async def lock_topic(uow: MetadataUnit, topic_id: str, name: str) -> QuotaLimits:
    """Lock the topic row for this unit of work (``TopicNotFound`` if it was deleted) and answer its
    project's quotas; creators of the topic's groups serialise on it."""
    row = await uow.topics.lock_with_project(topic_id)
    if row is None:
        raise TopicNotFound(name)
    _, project = row
    return QuotaLimits(project.tier, project.custom_limits)


def parse_size(value: str) -> int | None:
    """``1234``, or a binary size ``10GiB`` / ``512MiB`` / ``1TiB`` / ``64KiB``, as bytes; None if neither."""
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": GIB, "TiB": TIB}
    for suffix, factor in units.items():
        if value.endswith(suffix):
            number = value.removesuffix(suffix)
            return int(number) * factor if is_ascii_digits(number) else None
    return int(value) if is_ascii_digits(value) else None


@dataclass(frozen=True, slots=True)
class QuotaUse:
    """One quota of a project environment as the dashboard shows it: its limit and what is used."""

    quota: str
    description: str
    limit: int
    used: int
    # Where the figure comes from when that needs saying (the topic with the most groups).
    note: str = ""


async def usage(
    uow: MetadataUnit, project_id: str, environment: str, limits: QuotaLimits, stored_bytes: int
) -> list[QuotaUse]:
    """Every quota of a project environment, its limit and what is used (``stored_bytes``: the
    project's, measured by the caller)."""
    busiest = await uow.groups.busiest_topic(project_id, environment)
    used = {
        Quota.topics: await uow.topics.count(project_id, environment),
        Quota.partitions: await uow.topics.partition_sum(project_id, environment),
        Quota.groups: busiest[1] if busiest else 0,
        Quota.schedules: await uow.schedules.count(project_id, environment),
        Quota.push_groups: await uow.push.count(project_id, environment),
        Quota.stored_bytes: stored_bytes,
    }
    notes = {Quota.groups: f"on topic {busiest[0]}, the most" if busiest else ""}
    return [QuotaUse(q.value, DESCRIPTIONS[q], limits.limit(q), used[q], notes.get(q, "")) for q in Quota]
