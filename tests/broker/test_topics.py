"""Topics' replica counts: the default and the choices come from the log engine in use, and the count a
topic was created with reaches the engine and the publish path."""

from __future__ import annotations

import pytest

from app.broker import topics
from app.broker.errors import InvalidRequest
from app.broker.topics import Scope
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
    async with metadata.session() as session:
        default = await topics.create_topic(session, replicated, scope, "default")
        five = await topics.create_topic(session, replicated, scope, "five", replicas=5)
        one = await topics.create_topic(session, replicated, scope, "one", replicas=1)
    assert (default.replicas, five.replicas, one.replicas) == (3, 5, 1)
    assert [replicated.created[t.id].replicas for t in (default, five, one)] == [3, 5, 1]
    async with metadata.session(readonly=True) as session:
        assert (await topics.get_topic(session, scope, "five")).replicas == 5
    # The publish path's view of the topic carries it (its answers' durability is said from it).
    ref = await deployment.app.state.services.publisher.topics.resolve(scope, "five")
    assert ref.replicas == 5
    for name in ("default", "five", "one"):
        await topics.delete_topic(metadata, replicated, scope, name)


async def test_a_count_outside_1_3_5_is_refused_whatever_the_engine_offers(deployment, replicated, scope):
    async with deployment.app.state.services.metadata.session() as session:
        for count in (0, 2, 4, 6):
            with pytest.raises(InvalidRequest) as refused:
                await topics.create_topic(session, replicated, scope, "t", replicas=count)
            assert refused.value.details == [{"field": "replicas", "issue": "must be 1, 3 or 5"}]
        assert await topics.list_topics(session, scope) == ([], None)
    assert replicated.created == {}


async def test_the_local_engine_refuses_more_than_one_copy(deployment, scope, tmp_path):
    local = LocalLogEngine(tmp_path / "local")
    await local.start()
    assert (local.default_replicas, local.replica_choices) == (1, (1,))
    metadata = deployment.app.state.services.metadata
    try:
        async with metadata.session() as session:
            for count in (3, 5, 2):
                with pytest.raises(InvalidRequest, match="keeps one copy of each message"):
                    await topics.create_topic(session, local, scope, "t", replicas=count)
            topic = await topics.create_topic(session, local, scope, "t")
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
