"""Read-only views for people looking at a project (the dashboard): projects a user owns, group members
with their partitions and last heartbeat, per-partition oldest-unacked age, and a topic's recent publish
rate read from the log's time index. Nothing here changes state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.broker.groups import get_group, partition_lags
from app.broker.tenancy import ProjectView
from app.broker.topics import TopicRef
from app.kit.clock import now_ms
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import MetadataUnit


async def projects_owned_by(uow: MetadataUnit, user_id: str) -> list[ProjectView]:
    """The projects an account user owns, by name."""
    owned = [p for p in await uow.projects.list() if p.owner_id == user_id]
    return sorted(owned, key=_name)


def _name(project: ProjectView) -> str:
    return project.name


@dataclass(frozen=True, slots=True)
class MemberView:
    id: str
    partitions: list[int]
    last_heartbeat_ms: int
    expires_at_ms: int
    push: bool


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    partition: int
    owner: str | None
    committed: int
    latest: int
    lag: int
    oldest_unacked_seconds: float | None


@dataclass(frozen=True, slots=True)
class GroupHealth:
    members: list[MemberView]
    partitions: list[PartitionHealth]
    dead_letter_depth: int


async def group_health(uow: MetadataUnit, log: LogEngine, topic: TopicRef, name: str) -> GroupHealth:
    """A group's live members (partitions, last heartbeat) and per partition owner, committed offset,
    latest offset, lag and the age of the oldest unacked message (the one at the committed offset)."""
    group = await get_group(uow, topic, name)
    repo = uow.groups
    now = now_ms()
    lags = await partition_lags(uow, log, topic, group.id, group.filter)
    members = []
    for member_id in await repo.live_members(group.id, now):
        member = await repo.get_member(group.id, member_id)
        if member is None:
            continue
        members.append(
            MemberView(
                member.id,
                [p.partition for p in lags if p.consumer == member.id],
                member.expires_at_ms - member.session_timeout_ms,
                member.expires_at_ms,
                bool(member.push),
            )
        )
    partitions = []
    for p in lags:
        age: float | None = None
        if p.lag > 0:
            oldest = await log.read(topic.id, p.partition, p.current, max_records=1, max_bytes=1)
            if oldest:
                age = max(0.0, (now - oldest[0].timestamp_ms) / 1000)
        partitions.append(PartitionHealth(p.partition, p.consumer, p.current, p.latest, p.lag, age))
    depth = await uow.dead_letters.depth(group.id)
    return GroupHealth(members, partitions, depth)


async def dead_letter_depths(uow: MetadataUnit) -> dict[str, int]:
    """Dead letters waiting, per group id."""
    return await uow.dead_letters.depths()


async def publish_rate(
    log: LogEngine, topic_id: str, partitions: int, *, buckets: int = 12, width_ms: int = 60_000
) -> list[int]:
    """Messages appended per ``width_ms`` over the last ``buckets`` intervals, oldest first, from the log's
    time index (offsets at the interval boundaries)."""
    now = now_ms()
    edges = [now - (buckets - i) * width_ms for i in range(buckets)]
    counts = [0] * buckets
    for partition in range(partitions):
        latest = (await log.partition_info(topic_id, partition)).latest_offset
        starts: Sequence[int] = [await log.offset_for_time(topic_id, partition, t) for t in edges]
        ends = [*starts[1:], latest]
        for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
            counts[i] += max(0, end - start)
    return counts
