"""Topics: what callers get back (frozen views, never the row), the directory the hot path resolves names
through, and replica counts (the default and the choices come from the log engine in use, and the count a
topic was created with reaches the engine and the publish path)."""

from __future__ import annotations

import dataclasses

import pytest

from app.broker import message_ids, topics
from app.broker.errors import InvalidRequest, TopicNotFound
from app.broker.topics import Scope, TopicDirectory, TopicRef, TopicView
from app.stores.log.local import LocalLogEngine
from app.stores.log.protocol import TopicLogConfig


class OffersReplicas(LocalLogEngine):
    """A real local engine that offers 1, 3 or 5 replicas (3 by default), as the JetStream engine does,
    and keeps the config each topic was created with."""

    created: dict[str, TopicLogConfig]

    @property
    def default_replicas(self) -> int:
        return 3

    @property
    def replica_choices(self) -> tuple[int, ...]:
        return (1, 3, 5)

    async def create_topic(self, topic_id: str, partitions: int, config: TopicLogConfig) -> None:
        self.created[topic_id] = config
        await super().create_topic(topic_id, partitions, config)


@pytest.fixture
async def replicated(tmp_path):
    engine = OffersReplicas(tmp_path / "log")
    engine.created = {}
    await engine.start()
    yield engine
    await engine.close()


@pytest.fixture
async def scope(deployment) -> Scope:
    project = await deployment.project()
    return Scope(project.project_id, "production")


async def test_the_engines_default_is_stored_and_handed_to_the_engine(deployment, replicated, scope):
    metadata = deployment.app.state.services.metadata
    async with metadata.unit() as uow:
        default = await topics.create_topic(uow, replicated, scope, "default")
        five = await topics.create_topic(uow, replicated, scope, "five", replicas=5)
        one = await topics.create_topic(uow, replicated, scope, "one", replicas=1)
    assert (default.replicas, five.replicas, one.replicas) == (3, 5, 1)
    assert [replicated.created[t.id].replicas for t in (default, five, one)] == [3, 5, 1]
    async with metadata.unit(readonly=True) as uow:
        assert (await topics.get_topic(uow, scope, "five")).replicas == 5
    # The publish path's view of the topic carries it (its answers' durability is said from it).
    ref = await deployment.app.state.services.publisher.topics.resolve(scope, "five")
    assert ref.replicas == 5
    for name in ("default", "five", "one"):
        await topics.delete_topic(metadata, replicated, scope, name)


async def test_a_count_outside_1_3_5_is_refused_whatever_the_engine_offers(deployment, replicated, scope):
    async with deployment.app.state.services.metadata.unit() as uow:
        for count in (0, 2, 4, 6):
            with pytest.raises(InvalidRequest) as refused:
                await topics.create_topic(uow, replicated, scope, "t", replicas=count)
            assert refused.value.details == [{"field": "replicas", "issue": "must be 1, 3 or 5"}]
        assert await topics.list_topics(uow, scope) == ([], None)
    assert replicated.created == {}


async def test_the_local_engine_refuses_more_than_one_copy(deployment, scope, tmp_path):
    local = LocalLogEngine(tmp_path / "local")
    await local.start()
    assert (local.default_replicas, local.replica_choices) == (1, (1,))
    metadata = deployment.app.state.services.metadata
    try:
        async with metadata.unit() as uow:
            for count in (3, 5, 2):
                with pytest.raises(InvalidRequest, match="keeps one copy of each message"):
                    await topics.create_topic(uow, local, scope, "t", replicas=count)
            topic = await topics.create_topic(uow, local, scope, "t")
        assert topic.replicas == 1
        assert local.durability_for(topic.replicas) == "fsync"
        await topics.delete_topic(metadata, local, scope, "t")
    finally:
        await local.close()


@pytest.mark.parametrize(
    ("count", "offered", "issue"),
    [
        (2, (1, 3, 5), "must be 1, 3 or 5"),
        (1, (3, 5), "must be 3 or 5 on this server's log engine"),
        (5, (1, 3), "must be 1 or 3 on this server's log engine"),
        (7, (1,), "this server's log engine keeps one copy of each message, so replicas must be 1"),
        (True, (1, 3, 5), "must be 1, 3 or 5"),
    ],
)
def test_the_refusal_says_what_the_engine_offers(count, offered, issue):
    with pytest.raises(InvalidRequest) as refused:
        topics.validate_replicas(count, offered)
    assert refused.value.details == [{"field": "replicas", "issue": issue}]


def test_an_offered_count_is_accepted():
    assert topics.validate_replicas(5, (3, 5)) == 5
    assert topics.validate_replicas(1, (1,)) == 1


class TestViews:
    async def test_calls_answer_frozen_views_that_outlive_the_session(self, deployment, scope):
        services = deployment.app.state.services
        async with services.metadata.unit() as uow:
            created = await topics.create_topic(uow, services.log, scope, "viewed", partitions=2)
        async with services.metadata.unit() as uow:
            grown = await topics.update_topic(uow, services.log, scope, "viewed", partitions=3)
        async with services.metadata.unit(readonly=True) as uow:
            got = await topics.get_topic(uow, scope, "viewed")
            (listed,), cursor = await topics.list_topics(uow, scope)
        try:
            assert all(type(v) is TopicView for v in (created, grown, got, listed)) and cursor is None
            # Read after their sessions closed: plain values, nothing left to load.
            assert (created.partitions, grown.partitions, got.partitions, listed.partitions) == (2, 3, 3, 3)
            assert got == listed and got.id == created.id and got.retention == "7d"
            with pytest.raises(dataclasses.FrozenInstanceError):
                got.partitions = 9  # type: ignore[misc]
            assert len(await topics.partition_details(services.log, got)) == 3
        finally:
            await topics.delete_topic(services.metadata, services.log, scope, "viewed")


class TestDirectory:
    async def test_resolves_a_name_to_what_the_hot_path_needs(self, deployment, scope):
        services = deployment.app.state.services
        async with services.metadata.unit() as uow:
            view = await topics.create_topic(uow, services.log, scope, "resolved", partitions=2)
        try:
            ref = await TopicDirectory(services.metadata).resolve(scope, "resolved")
            prefix = message_ids.topic_prefix(view.id)
            assert ref == TopicRef(view.id, "resolved", 2, "exactly-once", prefix, view.replicas)
        finally:
            await topics.delete_topic(services.metadata, services.log, scope, "resolved")

    async def test_an_unknown_name_or_another_environment_is_not_found(self, deployment, scope):
        services = deployment.app.state.services
        async with services.metadata.unit() as uow:
            await topics.create_topic(uow, services.log, scope, "here", partitions=1)
        directory = TopicDirectory(services.metadata)
        try:
            with pytest.raises(TopicNotFound):
                await directory.resolve(scope, "elsewhere")
            with pytest.raises(TopicNotFound):
                await directory.resolve(Scope(scope.project_id, "staging"), "here")
        finally:
            await topics.delete_topic(services.metadata, services.log, scope, "here")

    async def test_answers_are_cached_until_this_process_forgets_them(self, deployment, scope):
        services = deployment.app.state.services
        directory = TopicDirectory(services.metadata, ttl=3600)  # nothing expires during the test
        async with services.metadata.unit() as uow:
            await topics.create_topic(uow, services.log, scope, "cached", partitions=1)
        try:
            assert (await directory.resolve(scope, "cached")).partitions == 1
            async with services.metadata.unit() as uow:
                await topics.update_topic(uow, services.log, scope, "cached", partitions=2)
            assert (await directory.resolve(scope, "cached")).partitions == 1
            directory.forget(scope, "cached")
            assert (await directory.resolve(scope, "cached")).partitions == 2
        finally:
            await topics.delete_topic(services.metadata, services.log, scope, "cached")
        directory.forget(scope, "cached")  # as the delete route does
        with pytest.raises(TopicNotFound):
            await directory.resolve(scope, "cached")
