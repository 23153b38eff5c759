"""The metadata port as the broker calls it: ``SqlMetadataStore.unit()`` hands out a unit of work
(``protocol.MetadataUnit``) whose stores take and answer frozen values, commit with the unit, and raise
the store's ``AlreadyExists`` (never the driver's error) for a name or key taken twice; on SQLite and
Postgres alike."""

from __future__ import annotations

import dataclasses
import secrets

import pytest

from app.kit.ids import new_id
from app.stores.errors import AlreadyExists
from app.stores.metadata import protocol
from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.protocol import (
    EndpointRow,
    GroupConfig,
    GroupRow,
    MetadataUnit,
    NewAlertEvent,
    ProjectRow,
    TopicRow,
    UserRow,
)
from tests.stores.metadata.conftest import Rows, now

STORES = {
    "users": protocol.UserStore,
    "user_sessions": protocol.UserSessionStore,
    "projects": protocol.ProjectStore,
    "keys": protocol.ApiKeyStore,
    "topics": protocol.TopicStore,
    "groups": protocol.GroupStore,
    "partitions": protocol.PartitionStore,
    "leases": protocol.LeaseStore,
    "dead_letters": protocol.DeadLetterStore,
    "alerts": protocol.AlertStore,
    "usage": protocol.UsageStore,
    "schedules": protocol.ScheduleStore,
    "group_controls": protocol.GroupControlStore,
    "flow": protocol.FlowStore,
    "expiry": protocol.ExpiryStore,
    "push": protocol.PushStore,
}


def _topic(project_id: str, name: str = "", *, topic_id: str = "") -> TopicRow:
    at = now()
    return TopicRow(
        topic_id or new_id("top"),
        project_id,
        "production",
        name or f"t-{secrets.token_hex(4)}",
        2,
        "7d",
        7 * 86_400_000,
        "exactly-once",
        1,
        "active",
        at,
        at,
    )


def _fields(row: TopicRow) -> tuple[object, ...]:
    """A topic's fields but its times (SQLite hands times back without their zone)."""
    return dataclasses.astuple(dataclasses.replace(row, created_at=None, updated_at=None))  # type: ignore[arg-type]


class TestTheUnit:
    async def test_holds_every_store_of_the_port_each_built_once(self, metadata: SqlMetadataStore):
        async with metadata.unit(readonly=True) as uow:
            assert isinstance(uow, MetadataUnit)
            for name, store in STORES.items():
                assert isinstance(getattr(uow, name), store), name
                assert getattr(uow, name) is getattr(uow, name)

    async def test_commits_when_the_block_ends(self, metadata: SqlMetadataStore, rows: Rows):
        project = await rows.project()
        topic = _topic(project.id)
        async with metadata.unit() as uow:
            await uow.topics.add(topic)
        async with metadata.unit(readonly=True) as uow:
            found = await uow.topics.get_by_name(project.id, "production", topic.name)
            assert await uow.topics.exists(topic.id)
        assert type(found) is TopicRow and _fields(found) == _fields(topic)

    async def test_an_error_rolls_the_whole_unit_back(self, metadata: SqlMetadataStore, rows: Rows):
        project = await rows.project()
        topic = _topic(project.id)
        with pytest.raises(RuntimeError):
            async with metadata.unit() as uow:
                await uow.topics.add(topic)
                raise RuntimeError("the caller gave up")
        async with metadata.unit(readonly=True) as uow:
            assert not await uow.topics.exists(topic.id)

    async def test_run_unit_answers_what_the_work_answered(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        assert await metadata.run_unit(lambda uow: uow.topics.count(topic.project_id, "production")) == 1


class TestAlreadyExists:
    async def test_a_topic_name_taken_in_its_environment(self, metadata: SqlMetadataStore, rows: Rows):
        taken = await rows.topic()
        again = _topic(taken.project_id, taken.name)
        with pytest.raises(AlreadyExists):
            async with metadata.unit() as uow:
                await uow.topics.add(again)
        async with metadata.unit(readonly=True) as uow:
            assert not await uow.topics.exists(again.id)  # nothing of it stands
            assert await uow.topics.count(taken.project_id, "production") == 1

    async def test_a_topic_id_taken(self, metadata: SqlMetadataStore, rows: Rows):
        taken = await rows.topic()
        with pytest.raises(AlreadyExists):
            async with metadata.unit() as uow:
                await uow.topics.add(_topic(taken.project_id, topic_id=taken.id))

    async def test_raised_in_the_unit_where_the_caller_can_answer_it(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        """The domain turns it into its own error (``TopicAlreadyExists``) before the unit ends, which then
        rolls back: a unit that met it is spoilt and commits nothing."""
        taken = await rows.topic()

        class Taken(Exception):
            pass

        with pytest.raises(Taken):
            async with metadata.unit() as uow:
                try:
                    await uow.topics.add(_topic(taken.project_id, taken.name))
                except AlreadyExists:
                    raise Taken from None

    async def test_a_user_email_taken(self, metadata: SqlMetadataStore):
        email = f"u-{secrets.token_hex(4)}@example.com"

        def user() -> UserRow:
            return UserRow(id=new_id("usr"), email=email, password_hash="x", created_at=now())

        async with metadata.unit() as uow:
            await uow.users.add(user())
        with pytest.raises(AlreadyExists):
            async with metadata.unit() as uow:
                await uow.users.add(user())


class TestTopics:
    async def test_update_stores_partitions_and_retention(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic(partitions=2)
        async with metadata.unit() as uow:
            await uow.topics.update(topic.id, updated_at=now(), partitions=5)
            # Seen at once in the same unit, and by the next one.
            found = await uow.topics.get_by_name(topic.project_id, "production", topic.name)
            assert found is not None and found.partitions == 5
        async with metadata.unit() as uow:
            await uow.topics.update(topic.id, updated_at=now(), retention=("1d", 86_400_000))
        async with metadata.unit(readonly=True) as uow:
            found = await uow.topics.get_by_name(topic.project_id, "production", topic.name)
            (listed,) = await uow.topics.page(topic.project_id, "production", None, 10)
        assert found is not None and (found.partitions, found.retention, found.retention_ms) == (
            5,
            "1d",
            86_400_000,
        )
        assert _fields(listed) == _fields(found)
        with pytest.raises(dataclasses.FrozenInstanceError):
            found.partitions = 9  # type: ignore[misc]

    async def test_exists_until_removed(self, metadata: SqlMetadataStore, rows: Rows):
        topic = await rows.topic()
        async with metadata.unit() as uow:
            assert await uow.topics.exists(topic.id)
            await uow.topics.remove(topic.id)
            assert not await uow.topics.exists(topic.id)
        async with metadata.unit(readonly=True) as uow:
            assert not await uow.topics.exists(topic.id)


class TestPauses:
    async def test_a_pause_is_stored_and_a_clear_restarts_the_breaker_count(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        topic = await rows.topic()
        group_id = await rows.group(topic, name="paused", breaker_acked=4, breaker_failed=6)
        async with metadata.unit() as uow:
            await uow.groups.set_pause(group_id, "user", 9_000, now())
        async with metadata.unit(readonly=True) as uow:
            group = await uow.groups.get(topic.id, "paused")
            assert group is not None
            assert (group.paused_reason, group.paused_until_ms) == ("user", 9_000)
        async with metadata.unit() as uow:
            locked = await uow.groups.get(topic.id, "paused", for_update=True)
            assert locked is not None
            await uow.groups.clear_pause(group_id, 1_234, now())
        async with metadata.unit(readonly=True) as uow:
            group = await uow.groups.get(topic.id, "paused")
        assert group is not None
        assert (group.paused_reason, group.paused_until_ms) == (None, None)
        assert (group.breaker_window_ms, group.breaker_acked, group.breaker_failed) == (1_234, 0, 0)


class TestTenancy:
    async def test_users_are_frozen_values_and_a_password_hash_is_replaced(self, metadata: SqlMetadataStore):
        email = f"u-{secrets.token_hex(4)}@example.com"
        user = UserRow(id=new_id("usr"), email=email, password_hash="old", created_at=now())
        async with metadata.unit() as uow:
            await uow.users.add(user)
            await uow.users.set_password_hash(user.id, "new")
            seen = await uow.users.get_by_email(email)  # at once, in the same unit
            assert seen is not None and seen.password_hash == "new"
        async with metadata.unit(readonly=True) as uow:
            found = await uow.users.get_by_email(email)
        assert found is not None
        assert (found.id, found.email, found.password_hash, found.disabled_at) == (
            user.id,
            email,
            "new",
            None,
        )
        with pytest.raises(dataclasses.FrozenInstanceError):
            found.email = "x"  # type: ignore[misc]

    async def test_a_project_plan_and_owner_are_stored(self, metadata: SqlMetadataStore, rows: Rows):
        project = await rows.project()
        owner = UserRow(
            id=new_id("usr"),
            email=f"o-{secrets.token_hex(4)}@example.com",
            password_hash="x",
            created_at=now(),
        )
        async with metadata.unit() as uow:
            await uow.users.add(owner)
            locked = await uow.projects.get(project.id, for_update=True)
            assert locked is not None and locked.id == project.id
            await uow.projects.set_plan(project.id, "enterprise", {"topics": 3})
            await uow.projects.set_owner(project.id, owner.id)
            seen = await uow.projects.lock(project.id)  # at once, in the same unit
            assert seen is not None and seen.tier == "enterprise"
        async with metadata.unit(readonly=True) as uow:
            by_name = await uow.projects.get(project.name)
            listed = [p for p in await uow.projects.list() if p.id == project.id]
        assert by_name is not None
        assert (by_name.tier, by_name.custom_limits, by_name.owner_id) == (
            "enterprise",
            {"topics": 3},
            owner.id,
        )
        assert [p.name for p in listed] == [project.name]
        async with metadata.unit() as uow:
            await uow.projects.set_plan(project.id, "pro", None)
        async with metadata.unit(readonly=True) as uow:
            found = await uow.projects.get(project.id)
        assert found is not None and (found.tier, found.custom_limits) == ("pro", None)

    async def test_a_project_name_is_taken_once(self, metadata: SqlMetadataStore, rows: Rows):
        taken = await rows.project()
        with pytest.raises(AlreadyExists):
            async with metadata.unit() as uow:
                await uow.projects.add(ProjectRow(new_id("prj"), taken.name, "developer", None, None, now()))


class TestGroups:
    async def test_inserted_and_read_back_as_frozen_values_and_a_second_insert_is_no_error(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        topic = await rows.topic(partitions=3)
        at = now()
        row = GroupRow(
            new_id("grp"), topic.id, "orders", 0, 3, "30s", 30_000, "10s", 10_000, None, at, at, filter="a"
        )
        async with metadata.unit() as uow:
            await uow.groups.insert_if_absent(row)
            await uow.groups.insert_if_absent(dataclasses.replace(row, id=new_id("grp")))  # a concurrent one
        async with metadata.unit(readonly=True) as uow:
            found = await uow.groups.get(topic.id, "orders")
            listed = await uow.groups.list_for_topic(topic.id)
        assert found is not None
        times = {"created_at": None, "updated_at": None}  # SQLite hands times back without their zone
        assert dataclasses.replace(found, **times) == dataclasses.replace(row, **times)
        assert listed == [found]
        with pytest.raises(dataclasses.FrozenInstanceError):
            found.generation = 1  # type: ignore[misc]

    async def test_set_config_stores_the_whole_config_and_nothing_else(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        topic = await rows.topic()
        group_id = await rows.group(topic, name="configured", breaker_acked=4)
        config = GroupConfig("90s", 90_000, "20s", 20_000, {"maxRetries": 3}, 50, 2.5, "key = 'a'")
        async with metadata.unit() as uow:
            locked = await uow.groups.get(topic.id, "configured", for_update=True)
            assert locked is not None
            await uow.groups.set_config(group_id, config, now())
            # Seen at once in the same unit (the row read before is no stale copy), and by the next one.
            seen = await uow.groups.get(topic.id, "configured")
            assert seen is not None and seen.ack_timeout_ms == 90_000
        async with metadata.unit(readonly=True) as uow:
            group = await uow.groups.get(topic.id, "configured")
        assert group is not None
        assert (
            GroupConfig(**{f.name: getattr(group, f.name) for f in dataclasses.fields(GroupConfig)}) == config
        )
        assert (group.generation, group.breaker_acked, group.paused_reason) == (0, 4, None)


class TestExpiry:
    async def test_expired_counts_per_group_and_in_all(self, metadata: SqlMetadataStore, rows: Rows):
        group_id = await rows.group(partitions=2)
        async with metadata.unit() as uow:
            await uow.expiry.add_expired(group_id, {0: 2, 1: 3})
        async with metadata.unit(readonly=True) as uow:
            assert await uow.expiry.expired(group_id) == 5
            assert (await uow.expiry.expired_by_group())[group_id] == 5


class TestAlertEndpoints:
    async def test_saved_then_replaced_and_read_back_as_frozen_values(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        project = await rows.project()
        at = now()
        first = EndpointRow(project.id, "staging", "https://a.example.com/h", "s1", 3, 99, at, at)
        async with metadata.unit() as uow:
            await uow.alerts.save_endpoint(first)
        async with metadata.unit() as uow:
            stored = await uow.alerts.endpoint(project.id, "staging")
            assert stored is not None and type(stored) is EndpointRow
            assert (stored.url, stored.secret, stored.failures, stored.open_until_ms) == (
                "https://a.example.com/h",
                "s1",
                3,
                99,
            )
            await uow.alerts.save_endpoint(
                dataclasses.replace(stored, url="https://b.example.com/h", failures=0, open_until_ms=None)
            )
        async with metadata.unit(readonly=True) as uow:
            replaced = await uow.alerts.endpoint(project.id, "staging")
            assert await uow.alerts.endpoint(project.id, "production") is None
        assert replaced is not None
        assert (replaced.url, replaced.secret, replaced.failures, replaced.open_until_ms) == (
            "https://b.example.com/h",
            "s1",
            0,
            None,
        )

    async def test_attempts_are_read_newest_first(self, metadata: SqlMetadataStore, rows: Rows):
        project = await rows.project()
        at = now()
        async with metadata.unit() as uow:
            await uow.alerts.save_endpoint(
                EndpointRow(project.id, "production", "https://e.com/h", "s", 0, None, at, at)
            )
            event_id = new_id("evt")
            await uow.alerts.add_event(NewAlertEvent(event_id, project.id, "production", "test", "{}", 0, at))
            for n, attempt_id in enumerate(("att_1", "att_2"), start=1):
                await uow.alerts.add_attempt(
                    project.id,
                    "production",
                    protocol.AttemptRow(
                        f"{attempt_id}_{secrets.token_hex(4)}",
                        event_id,
                        "test",
                        n,
                        n == 2,
                        500 if n == 1 else 200,
                        None if n == 2 else "HTTP 500",
                        5,
                        at,
                    ),
                )
        async with metadata.unit(readonly=True) as uow:
            page = await uow.alerts.attempts_page(project.id, "production", None, 10)
        assert all(type(a) is protocol.AttemptRow for a in page)
        assert [(a.attempt, a.ok, a.status_code, a.error) for a in page] == [
            (2, True, 200, None),
            (1, False, 500, "HTTP 500"),
        ]
        assert all(a.event_id == event_id and a.event_type == "test" and a.duration_ms == 5 for a in page)
        async with metadata.unit(readonly=True) as uow:  # another environment sees none of them
            assert await uow.alerts.attempts_page(project.id, "sandbox", None, 10) == []


class TestDashboardSessions:
    async def test_a_session_is_read_back_with_its_account_and_ends_with_a_disable(
        self, metadata: SqlMetadataStore
    ):
        email = f"s-{secrets.token_hex(4)}@example.com"
        user = UserRow(id=new_id("usr"), email=email, password_hash="x", created_at=now())
        at = now()
        row = protocol.UserSessionRow(secrets.token_hex(32), user.id, "csrf", at, at, at)
        async with metadata.unit() as uow:
            await uow.users.add(user)
            await uow.user_sessions.add(row)
        async with metadata.unit() as uow:
            found = await uow.user_sessions.get_with_user(row.id)
            assert found is not None
            stored, account = found
            assert type(stored) is protocol.UserSessionRow and (stored.id, stored.user_id, stored.csrf) == (
                row.id,
                user.id,
                "csrf",
            )
            assert account == protocol.Account(user.id, email, None)
            await uow.users.set_disabled(user.id, at)
        async with metadata.unit(readonly=True) as uow:
            found = await uow.user_sessions.get_with_user(row.id)
            assert found is not None and found[1].disabled_at is not None
            assert await uow.user_sessions.get_with_user("no-such-session") is None
