"""Read-only views for the dashboard (``app.broker.inspection``), on the SQLite and Postgres deployments.

* ``projects_owned_by``: an account's projects, by name, and no one else's.
* ``group_health``: a group's live members with the partitions each owns, their last heartbeat and
  whether they are push members; per partition the owner, committed and latest offsets, the lag and the
  age of the oldest unacked message (the one at the committed offset; None without lag); the DLQ depth.
* ``dlq_depths``: dead letters waiting per group id, groups without any left out.
* ``publish_rate``: messages appended per interval over the last intervals, oldest first, counted from
  the log's time index over every partition (a log of the test's own, with chosen timestamps).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from app.broker import inspection, tenancy
from app.broker.delivery import membership
from app.kit.clock import now_ms
from app.stores.log.protocol import RecordIn, TopicLogConfig
from app.stores.metadata.dead_letter_repositories import DeadLetterRepository
from app.stores.metadata.protocol import DeadLetterRow
from tests.broker.conftest import ON_DATABASES, MakeTopic, TopicUnderTest
from tests.conftest import Deployment
from tests.stores.log.conftest import open_local

MINUTE = 60_000


@ON_DATABASES
class TestProjectsOwnedBy:
    async def test_an_account_sees_its_own_projects_by_name_and_no_one_elses(
        self, deployment: Deployment
    ) -> None:
        tag = secrets.token_hex(3)
        async with deployment.store.unit() as uow:
            owner = await tenancy.create_user(uow, f"own-{tag}@example.com", secrets.token_urlsafe(12))
            other = await tenancy.create_user(uow, f"oth-{tag}@example.com", secrets.token_urlsafe(12))
            for name in (f"zeta-{tag}", f"alpha-{tag}", f"mid-{tag}"):
                await tenancy.create_project(uow, name, owner_id=owner.id)
            await tenancy.create_project(uow, f"theirs-{tag}", owner_id=other.id)
            await tenancy.create_project(uow, f"nobodys-{tag}")
        async with deployment.store.unit(readonly=True) as uow:
            owned = await inspection.projects_owned_by(uow, owner.id)
            theirs = await inspection.projects_owned_by(uow, other.id)
            nobody = await inspection.projects_owned_by(uow, f"usr_{tag}")
        assert [p.name for p in owned] == [f"alpha-{tag}", f"mid-{tag}", f"zeta-{tag}"]
        assert [p.name for p in theirs] == [f"theirs-{tag}"]
        assert nobody == []


async def backdated(topic: TopicUnderTest, partition: int, ages_ms: list[int]) -> None:
    """Messages appended straight to the topic's log, stamped ``age`` ms ago each (oldest first)."""
    now = now_ms()
    records = [RecordIn(value=b'{"n": 1}', timestamp_ms=now - age) for age in ages_ms]
    await topic.services.log.append(topic.ref.id, {partition: records})


async def health(topic: TopicUnderTest, group: str) -> inspection.GroupHealth:
    async with topic.services.metadata.unit(readonly=True) as uow:
        return await inspection.group_health(uow, topic.services.log, topic.ref, group)


@ON_DATABASES
class TestGroupHealth:
    async def test_members_are_listed_with_the_partitions_they_own_and_their_kind(
        self, make_topic: MakeTopic
    ) -> None:
        topic = await make_topic(partitions=3)
        services = topic.services
        pull = await membership.join(services.metadata, services.log, topic.ref, "g", session_timeout="45s")
        push = await membership.join(services.metadata, services.log, topic.ref, "g", push=True)
        found = await health(topic, "g")
        by_id = {m.id: m for m in found.members}
        assert set(by_id) == {pull.member_id, push.member_id}
        assert by_id[pull.member_id].push is False and by_id[push.member_id].push is True
        owned = sorted(p for m in found.members for p in m.partitions)
        assert owned == [0, 1, 2] and all(m.partitions for m in found.members)
        for member in found.members:
            assert [p.partition for p in found.partitions if p.owner == member.id] == member.partitions
        pulled = by_id[pull.member_id]
        assert pulled.expires_at_ms - pulled.last_heartbeat_ms == 45_000
        assert pulled.last_heartbeat_ms <= now_ms()

    async def test_each_partition_says_its_lag_and_the_age_of_its_oldest_unacked_message(
        self, make_topic: MakeTopic
    ) -> None:
        topic = await make_topic(partitions=2)
        services = topic.services
        await backdated(topic, 0, [10 * MINUTE, 9 * MINUTE, 8 * MINUTE])
        await membership.join(services.metadata, services.log, topic.ref, "behind", start_from="earliest")
        await membership.join(services.metadata, services.log, topic.ref, "caught-up", start_from="latest")
        behind = await health(topic, "behind")
        p0, p1 = behind.partitions
        assert (p0.partition, p0.committed, p0.latest, p0.lag) == (0, 0, 3, 3)
        assert p0.oldest_unacked_seconds is not None
        # The oldest unacked is the one at the committed offset: stamped ten minutes ago, not eight.
        assert 600 <= p0.oldest_unacked_seconds < 600 + 300
        assert (p1.partition, p1.lag, p1.oldest_unacked_seconds) == (1, 0, None)
        up = await health(topic, "caught-up")
        assert [(p.committed, p.lag, p.oldest_unacked_seconds) for p in up.partitions] == [
            (3, 0, None),
            (0, 0, None),
        ]

    async def test_a_group_without_live_members_has_partitions_and_no_owners(
        self, make_topic: MakeTopic
    ) -> None:
        topic = await make_topic(partitions=2)
        await topic.publish(4, partition=1)
        services = topic.services
        joined = await membership.join(services.metadata, services.log, topic.ref, "g", start_from="earliest")
        await membership.leave(services.metadata, topic.ref, "g", joined.member_id)
        found = await health(topic, "g")
        assert found.members == []
        assert [(p.owner, p.lag) for p in found.partitions] == [(None, 0), (None, 4)]

    async def test_the_dlq_depth_counts_the_groups_dead_letters_only(self, make_topic: MakeTopic) -> None:
        topic = await make_topic()
        services = topic.services
        await membership.join(services.metadata, services.log, topic.ref, "g")
        await membership.join(services.metadata, services.log, topic.ref, "other")
        rows = [DeadLetterRow(0, i, i, "max retries", 5, now_ms()) for i in range(3)]
        async with services.metadata.session() as session:
            await DeadLetterRepository.from_session(session).add(await topic.group_id("g"), rows)
        assert (await health(topic, "g")).dead_letter_depth == 3
        assert (await health(topic, "other")).dead_letter_depth == 0


@ON_DATABASES
class TestDlqDepths:
    async def test_depths_are_per_group_and_leave_out_empty_ones(self, make_topic: MakeTopic) -> None:
        topic = await make_topic()
        services = topic.services
        for group in ("a", "b", "empty"):
            await membership.join(services.metadata, services.log, topic.ref, group)
        ids = {g: await topic.group_id(g) for g in ("a", "b", "empty")}
        async with services.metadata.session() as session:
            repo = DeadLetterRepository.from_session(session)
            await repo.add(ids["a"], [DeadLetterRow(0, i, i, "r", 1, now_ms()) for i in range(2)])
            await repo.add(ids["b"], [DeadLetterRow(0, 9, 0, "r", 1, now_ms())])
        async with services.metadata.unit(readonly=True) as uow:
            depths = await inspection.dead_letter_depths(uow)
        assert (depths[ids["a"]], depths[ids["b"]]) == (2, 1)
        assert ids["empty"] not in depths


class TestPublishRate:
    async def test_messages_are_counted_in_the_interval_they_were_appended_in(self, tmp_path: Path) -> None:
        log = await open_local(tmp_path / "log")
        try:
            await log.create_topic("top_rate", 2, TopicLogConfig())
            now = now_ms()

            async def at(partition: int, ages_ms: list[int]) -> None:
                records = [RecordIn(value=b"1", timestamp_ms=now - age) for age in ages_ms]
                await log.append("top_rate", {partition: records})

            await at(0, [20 * MINUTE, 15 * MINUTE])  # before the twelve minutes: not counted
            await at(0, [int(5.5 * MINUTE)] * 3)  # the interval from six to five minutes ago
            await at(1, [int(5.5 * MINUTE), int(2.5 * MINUTE)])
            await at(1, [MINUTE // 2] * 4)  # the last minute
            rate = await inspection.publish_rate(log, "top_rate", 2)
            assert rate == [0, 0, 0, 0, 0, 0, 4, 0, 0, 1, 0, 4]
            wide = await inspection.publish_rate(log, "top_rate", 2, buckets=2, width_ms=10 * MINUTE)
            assert wide == [1, 9]  # 20 min ago is before both; 15 min ago in the first
        finally:
            await log.close()

    async def test_a_topic_without_messages_has_a_rate_of_zero_everywhere(self, tmp_path: Path) -> None:
        log = await open_local(tmp_path / "log")
        try:
            await log.create_topic("top_quiet", 3, TopicLogConfig())
            assert await inspection.publish_rate(log, "top_quiet", 3, buckets=4) == [0, 0, 0, 0]
        finally:
            await log.close()
