"""The metadata store's protocols (``app/stores/metadata/protocol/``), one class per aggregate, run on
SQLite and on Postgres over a schema the migrations built: what the domain relies on must hold on both.
This module holds units of work, tenancy, topics, quotas, alerts and usage; ``test_conformance_delivery.py``
holds groups, partitions, leases and dead letters."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime, timedelta

import pytest

from app.kit.ids import new_id
from app.stores.errors import AlreadyExists, StoreUnavailable
from app.stores.metadata import protocol
from app.stores.metadata.alert_repositories import AlertRepository
from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.dead_letter_repositories import DeadLetterRepository
from app.stores.metadata.group_repositories import GroupRepository
from app.stores.metadata.lease_repositories import LeaseRepository
from app.stores.metadata.partition_repositories import PartitionRepository
from app.stores.metadata.protocol import (
    EndpointRow,
    EndpointSecret,
    KeyRow,
    KeyStanding,
    NewAlertEvent,
    ProjectRow,
    Rollup,
    UserRow,
)
from app.stores.metadata.push_repositories import PushRepository
from app.stores.metadata.tenancy_repositories import (
    ApiKeyRepository,
    ProjectRepository,
    UserRepository,
    UserSessionRepository,
)
from app.stores.metadata.topic_repositories import TopicRepository
from app.stores.metadata.usage_repositories import UsageRollupRepository
from tests.stores.metadata.conftest import Rows, now


class TestProtocols:
    @pytest.mark.parametrize(
        ("repository", "store"),
        [
            (UserRepository, protocol.UserStore),
            (ProjectRepository, protocol.ProjectStore),
            (ApiKeyRepository, protocol.ApiKeyStore),
            (UserSessionRepository, protocol.UserSessionStore),
            (TopicRepository, protocol.TopicStore),
            (GroupRepository, protocol.GroupStore),
            (PartitionRepository, protocol.PartitionStore),
            (LeaseRepository, protocol.LeaseStore),
            (DeadLetterRepository, protocol.DeadLetterStore),
            (AlertRepository, protocol.AlertStore),
            (UsageRollupRepository, protocol.UsageStore),
            (PushRepository, protocol.PushStore),
        ],
    )
    async def test_each_repository_implements_its_protocol(
        self, metadata: SqlMetadataStore, repository, store
    ):
        async with metadata.session(readonly=True) as session:
            assert isinstance(repository.from_session(session), store)


class TestUnitOfWork:
    async def test_an_unreachable_database_is_store_unavailable(self, metadata: SqlMetadataStore, tmp_path):
        # Nothing listens on this port (the range of this suite's servers); a directory is no database file.
        url = (
            f"sqlite+aiosqlite:///{tmp_path}"
            if metadata.is_sqlite
            else "postgresql+asyncpg://postgres@127.0.0.1:20199/postgres"
        )
        down = SqlMetadataStore(url)
        try:
            assert await metadata.check() and not await down.check(timeout=2.0)
            with pytest.raises(StoreUnavailable) as raised:
                async with down.session() as session:
                    await UserRepository.from_session(session).get_by_email("a@example.com")
            assert raised.value.code == "SERVICE_UNAVAILABLE"
        finally:
            await down.close()

    async def test_an_error_rolls_the_whole_unit_back(self, metadata: SqlMetadataStore):
        email = f"u-{secrets.token_hex(4)}@example.com"
        with pytest.raises(RuntimeError):
            async with metadata.session() as session:
                await UserRepository.from_session(session).add(_user(email))
                raise RuntimeError("the caller gave up")
        async with metadata.session(readonly=True) as session:
            assert await UserRepository.from_session(session).get_by_email(email) is None


def _user(email: str) -> UserRow:
    return UserRow(id=new_id("usr"), email=email, password_hash="x", created_at=now())


def _key(project_id: str, environment: str = "production", *, at: datetime | None = None) -> KeyRow:
    return KeyRow(
        id=new_id("key"),
        project_id=project_id,
        environment=environment,
        key_hash=secrets.token_hex(32),
        prefix="qc_live_",
        last_four="abcd",
        created_at=at or now(),
    )


class TestTenancy:
    async def test_users_by_email_and_an_email_is_taken_once(self, metadata: SqlMetadataStore):
        email = f"u-{secrets.token_hex(4)}@example.com"
        async with metadata.session() as session:
            user = _user(email)
            await UserRepository.from_session(session).add(user)
        async with metadata.session(readonly=True) as session:
            found = await UserRepository.from_session(session).get_by_email(email)
        assert found is not None and found.id == user.id
        with pytest.raises(AlreadyExists):
            async with metadata.session() as session:
                await UserRepository.from_session(session).add(_user(email))

    async def test_projects_by_id_or_name_and_listed_oldest_first(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        first, second = await rows.project(), await rows.project()
        async with metadata.session(readonly=True) as session:
            projects = ProjectRepository.from_session(session)
            by_id, by_name = await projects.get(first.id), await projects.get(second.name)
            listed = [p.id for p in await projects.list()]
            assert await projects.get("no-such-project") is None
        assert by_id is not None and by_id.name == first.name
        assert by_name is not None and by_name.id == second.id
        assert listed.index(first.id) < listed.index(second.id)

    async def test_active_keys_leave_revoked_ones_out(self, metadata: SqlMetadataStore, rows: Rows):
        project = await rows.project()
        old, new, other = (
            _key(project.id, at=now() - timedelta(minutes=1)),
            _key(project.id),
            _key(project.id, "sandbox"),
        )
        async with metadata.session() as session:
            keys = ApiKeyRepository.from_session(session)
            for key in (new, old, other):
                await keys.add(key)
        async with metadata.session(readonly=True) as session:
            keys = ApiKeyRepository.from_session(session)
            assert [k.id for k in await keys.active_for(project.id, "production")] == [old.id, new.id]
            found = await keys.find_active_by_hash(new.key_hash)
            assert found is not None and (found[0].id, found[1].id) == (new.id, project.id)
            assert (await keys.find_active_by_id(other.id)) is not None
        async with metadata.session() as session:
            await ApiKeyRepository.from_session(session).revoke(old.id, now())
            revoked = await ApiKeyRepository.from_session(session).get(old.id)  # at once, in the same unit
            assert revoked is not None and revoked.revoked_at is not None
        async with metadata.session(readonly=True) as session:
            keys = ApiKeyRepository.from_session(session)
            assert [k.id for k in await keys.active_for(project.id, "production")] == [new.id]
            assert await keys.find_active_by_hash(old.key_hash) is None
            assert await keys.find_active_by_id(old.id) is None
            assert len(await keys.list_for_project(project.id)) == 3  # revoked ones are still listed

    async def test_standing_answers_unrevoked_keys_with_their_plan(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        project, other = await rows.project(), await rows.project()
        kept, revoked, elsewhere = _key(project.id), _key(project.id, "sandbox"), _key(other.id)
        async with metadata.session() as session:
            keys = ApiKeyRepository.from_session(session)
            for key in (kept, revoked, elsewhere):
                await keys.add(key)
            await keys.revoke(revoked.id, now())
            await ProjectRepository.from_session(session).set_plan(other.id, "enterprise", {"connections": 7})
        async with metadata.session(readonly=True) as session:
            keys = ApiKeyRepository.from_session(session)
            standing = await keys.standing_of([kept.id, revoked.id, elsewhere.id, "key_nothing"])
            assert await keys.standing_of([]) == {}
        assert standing == {
            kept.id: KeyStanding("developer", None),
            elsewhere.id: KeyStanding("enterprise", {"connections": 7}),
        }
        assert all(type(plan) is KeyStanding for plan in standing.values())

    async def test_last_used_times_of_many_keys_in_one_call(self, metadata: SqlMetadataStore, rows: Rows):
        project = await rows.project()
        a, b = _key(project.id), _key(project.id, "sandbox")
        at = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
        async with metadata.session() as session:
            keys = ApiKeyRepository.from_session(session)
            await keys.add(a)
            await keys.add(b)
        async with metadata.session() as session:
            await ApiKeyRepository.from_session(session).touch_last_used(
                {a.id: at, b.id: at + timedelta(seconds=1)}
            )
        async with metadata.session(readonly=True) as session:
            keys = ApiKeyRepository.from_session(session)
            stored = [(await keys.get(k.id)).last_used_at for k in (a, b)]  # type: ignore[union-attr]
        assert [t.replace(tzinfo=UTC) if t and t.tzinfo is None else t for t in stored] == [
            at,
            at + timedelta(seconds=1),
        ]


class TestTopics:
    async def test_pages_by_name_count_and_environment_scope(self, metadata: SqlMetadataStore, rows: Rows):
        project = await rows.project()
        for name in ("c", "a", "b"):
            await rows.topic(project.id, name=name)
        async with metadata.session(readonly=True) as session:
            topics = TopicRepository.from_session(session)
            assert [t.name for t in await topics.page(project.id, "production", None, 2)] == ["a", "b"]
            assert [t.name for t in await topics.page(project.id, "production", "b", 2)] == ["c"]
            assert await topics.count(project.id, "production") == 3
            assert await topics.count(project.id, "sandbox") == 0
            assert await topics.get_by_name(project.id, "sandbox", "a") is None

    async def test_a_name_is_taken_once_per_environment(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        with pytest.raises(AlreadyExists):
            await rows.topic(topic.project_id, name=topic.name)

    async def test_removing_a_topic_removes_its_groups(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        group_id = await rows.group(topic)
        async with metadata.session() as session:
            assert topic.id in await TopicRepository.from_session(session).all_ids()
            await TopicRepository.from_session(session).remove(topic.id)
        async with metadata.session(readonly=True) as session:
            assert (
                await TopicRepository.from_session(session).get_by_name(
                    topic.project_id, "production", topic.name
                )
                is None
            )
            assert group_id not in await GroupRepository.from_session(session).all_ids()
            assert await PartitionRepository.from_session(session).partitions(group_id) == []


class TestQuotaCounts:
    """What the quotas count and lock (``app/broker/quotas.py``)."""

    async def test_partitions_summed_per_environment_and_listed_per_project(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        project = await rows.project()
        a = await rows.topic(project.id, partitions=3)
        b = await rows.topic(project.id, partitions=5)
        async with metadata.session(readonly=True) as session:
            topics = TopicRepository.from_session(session)
            assert await topics.partition_sum(project.id, "production") == 8
            assert await topics.partition_sum(project.id, "sandbox") == 0
            assert sorted(await topics.partitions_of_project(project.id)) == sorted([(a.id, 3), (b.id, 5)])
            assert await topics.partitions_of_project((await rows.project()).id) == []

    async def test_locks_answer_the_rows_and_none_when_gone(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        async with metadata.session() as session:
            project = await ProjectRepository.from_session(session).lock(topic.project_id)
            assert project is not None and project.tier == "developer"
            locked = await TopicRepository.from_session(session).lock_with_project(topic.id)
            assert locked is not None
            locked_topic, locked_project = locked  # frozen rows, as stored
            assert (locked_topic.id, locked_topic.name, locked_topic.partitions) == (
                topic.id,
                topic.name,
                topic.partitions,
            )
            assert isinstance(locked_project, ProjectRow)
            assert (locked_project.id, locked_project.tier) == (topic.project_id, "developer")
            assert await ProjectRepository.from_session(session).lock("prj_nothing") is None
            assert await TopicRepository.from_session(session).lock_with_project("top_nothing") is None

    async def test_a_project_lock_makes_the_next_locker_wait_for_the_commit(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        """On Postgres the row lock holds until commit; SQLite serialises write units of work anyway."""
        project = await rows.project()
        order: list[str] = []
        held = asyncio.Event()

        async def first() -> None:
            async with metadata.session() as session:
                await ProjectRepository.from_session(session).lock(project.id)
                held.set()
                await asyncio.sleep(0.3)
                order.append("first done")

        async def second() -> None:
            await held.wait()
            async with metadata.session() as session:
                await ProjectRepository.from_session(session).lock(project.id)
                order.append("second locked")

        await asyncio.gather(first(), second())
        assert order == ["first done", "second locked"]

    async def test_groups_counted_per_topic_busiest_topic_and_project_groups(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        project = await rows.project()
        one = await rows.topic(project.id, name="one")
        two = await rows.topic(project.id, name="two")
        ids = [await rows.group(one), await rows.group(two), await rows.group(two)]
        async with metadata.session(readonly=True) as session:
            groups = GroupRepository.from_session(session)
            assert (await groups.count_for_topic(one.id), await groups.count_for_topic(two.id)) == (1, 2)
            assert await groups.busiest_topic(project.id, "production") == ("two", 2)
            assert await groups.busiest_topic(project.id, "sandbox") is None
            assert sorted(await groups.ids_of_project(project.id)) == sorted(ids)


def _event(project_id: str, *, due_ms: int) -> NewAlertEvent:
    return NewAlertEvent(new_id("evt"), project_id, "production", "dlq.depth", "{}", due_ms, now())


def _endpoint(project_id: str, environment: str, *, secret: str = "s", url: str = "") -> EndpointRow:
    at = now()
    return EndpointRow(
        project_id, environment, url or "https://hooks.example.com/qc", secret, 0, None, at, at
    )


class TestAlerts:
    async def test_due_events_are_claimed_once_with_their_endpoint(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        project = await rows.project()
        event, later = _event(project.id, due_ms=1_000), _event(project.id, due_ms=50_000)
        async with metadata.session() as session:
            alerts = AlertRepository.from_session(session)
            await alerts.save_endpoint(_endpoint(project.id, "production", secret="s3cret"))
            await alerts.add_event(event)
            await alerts.add_event(later)
        async with metadata.session() as session:
            alerts = AlertRepository.from_session(session)
            assert await alerts.any_due(2_000)
            claimed = [c for c in await alerts.claim_due(2_000, 30_000, 100) if c.project_id == project.id]
        assert [(c.id, c.url, c.secret) for c in claimed] == [
            (event.id, "https://hooks.example.com/qc", "s3cret")
        ]
        async with metadata.session() as session:  # held by its claim: no one else takes it meanwhile
            alerts = AlertRepository.from_session(session)
            assert event.id not in {c.id for c in await alerts.claim_due(3_000, 30_000, 100)}
            await alerts.settle_event(event.id, "delivered", 1, 3_000)
        async with metadata.session() as session:
            alerts = AlertRepository.from_session(session)
            assert event.id not in {c.id for c in await alerts.claim_due(60_000, 30_000, 100)}

    async def test_the_breaker_opens_at_the_threshold_and_a_success_closes_it(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        project = await rows.project()
        async with metadata.session() as session:
            alerts = AlertRepository.from_session(session)
            await alerts.save_endpoint(_endpoint(project.id, "sandbox"))
        states = []
        for ok in (False, False, False, True):
            async with metadata.session() as session:
                alerts = AlertRepository.from_session(session)
                await alerts.breaker_outcome(project.id, "sandbox", ok, 3, 99_000)
                endpoint = await alerts.endpoint(project.id, "sandbox")
                assert endpoint is not None
                states.append((endpoint.failures, endpoint.open_until_ms))
        assert states == [(1, None), (2, None), (3, 99_000), (0, None)]
        async with metadata.session() as session:
            assert await AlertRepository.from_session(session).remove_endpoint(project.id, "sandbox")
            assert await AlertRepository.from_session(session).endpoint(project.id, "sandbox") is None

    async def test_stored_secrets_are_listed_and_replaced_only_if_unchanged(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        project = await rows.project()
        async with metadata.session() as session:
            alerts = AlertRepository.from_session(session)
            await alerts.save_endpoint(_endpoint(project.id, "production", secret="old"))
            await alerts.save_endpoint(_endpoint(project.id, "sandbox", secret="other"))
        async with metadata.session() as session:
            alerts = AlertRepository.from_session(session)
            listed = [s for s in await alerts.secrets() if s.project_id == project.id]
            assert all(type(s) is EndpointSecret for s in listed)
            assert sorted(listed, key=lambda s: s.environment) == [
                EndpointSecret(project.id, "production", "old"),
                EndpointSecret(project.id, "sandbox", "other"),
            ]
            await alerts.replace_secret(project.id, "production", "old", "sealed")
            await alerts.replace_secret(project.id, "sandbox", "not-what-is-stored", "lost")
        async with metadata.session(readonly=True) as session:
            alerts = AlertRepository.from_session(session)
            production = await alerts.endpoint(project.id, "production")
            sandbox = await alerts.endpoint(project.id, "sandbox")
        assert production is not None and production.secret == "sealed"
        assert sandbox is not None and sandbox.secret == "other"

    async def test_a_held_breaker_and_released_events_wait(self, metadata: SqlMetadataStore, rows: Rows):
        project = await rows.project()
        event = _event(project.id, due_ms=1_000)
        async with metadata.session() as session:
            alerts = AlertRepository.from_session(session)
            await alerts.save_endpoint(_endpoint(project.id, "production"))
            await alerts.add_event(event)
            await alerts.hold_breaker([(project.id, "production")], 70_000)
            await alerts.hold_breaker([], 1)  # nothing held: nothing written
        async with metadata.session() as session:
            alerts = AlertRepository.from_session(session)
            endpoint = await alerts.endpoint(project.id, "production")
            assert endpoint is not None and endpoint.open_until_ms == 70_000
            claimed = [c.id for c in await alerts.claim_due(2_000, 30_000, 100)]
            assert event.id in claimed
            await alerts.release([event.id], 9_000)  # claimed, not tried: due again at 9 s
            await alerts.release([], 1)
        async with metadata.session() as session:
            alerts = AlertRepository.from_session(session)
            assert event.id not in {c.id for c in await alerts.claim_due(8_999, 30_000, 100)}
            assert event.id in {c.id for c in await alerts.claim_due(9_000, 30_000, 100)}


class TestUsage:
    async def test_a_rollup_is_added_once_from_the_offset_it_started_at(self, metadata: SqlMetadataStore):
        source = f"usage-{secrets.token_hex(4)}"
        bucket = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
        row = Rollup(
            f"prj_{secrets.token_hex(4)}",
            "production",
            "key_a",
            "publish",
            "minute",
            bucket,
            5,
            5,
            50,
            0,
            1,
            3,
        )
        async with metadata.session() as session:
            usage = UsageRollupRepository.from_session(session)
            assert await usage.add([row], source=source, from_offset=0, next_offset=10)
        async with metadata.session() as session:  # a repeated run from the same offset: refused
            usage = UsageRollupRepository.from_session(session)
            assert not await usage.add([row], source=source, from_offset=0, next_offset=10)
            assert await usage.add([row], source=source, from_offset=10, next_offset=20)
        async with metadata.session(readonly=True) as session:
            usage = UsageRollupRepository.from_session(session)
            assert await usage.next_offset(source) == 20
            (stored,) = await usage.series(
                row.project_id, "production", "minute", bucket, bucket + timedelta(minutes=1)
            )
        assert (stored.requests, stored.rate_limited, stored.peak_requests_per_second) == (10, 2, 3)
